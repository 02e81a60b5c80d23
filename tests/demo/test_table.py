"""The demo's table and verdict, from hand-written round views."""

from __future__ import annotations

from typing import Any

from hypertrain.demo.table import (
    HEADER,
    AuditTotals,
    DrillResult,
    Payout,
    RoundRow,
    Table,
    summary_lines,
    verdict,
)


def _view(w: int, state: str, statuses: list[str], **merged: Any) -> dict[str, Any]:
    return {
        "w": w,
        "state": state,
        "miners": [
            {"hotkey": f"k{i}", "status": s, "delta_manifest": {} if s == "UPLOADED" else None}
            for i, s in enumerate(statuses)
        ],
        "update_norm": None,
        "clipped": None,
        "heldout_loss": None,
        "heldout_loss_after": None,
        **merged,
    }


def _job(how: str | None) -> dict[str, Any]:
    return {"state": "queued" if how is None else "settled", "how": how}


def _merged(w: int, norm: float, clipped: int, before: float, after: float | None) -> RoundRow:
    view = _view(
        w,
        "APPLIED",
        ["UPLOADED", "UPLOADED", "COMMITTED"],
        update_norm=norm,
        clipped=clipped,
        heldout_loss=before,
        heldout_loss_after=after,
        scoring_jobs=[_job("agreement"), _job("agreement"), _job("third-copy"), _job("fallback")],
    )
    return RoundRow.from_view(view)


def test_a_row_counts_uploads_and_shows_dashes_until_the_merge() -> None:
    row = RoundRow.from_view(_view(4, "TRAINING", ["UPLOADED", "ACCEPTED", "ASSIGNED"]))
    assert (row.uploaded, row.rostered, row.merged, row.complete) == (1, 3, False, False)
    assert row.line() == (
        "    4  TRAINING            1/3            -        -              -           0/0/0 of 0"
        "                      -"
    )
    assert len(row.line()) == len(HEADER)


def test_a_merged_row_shows_norm_clipped_and_the_loss_after_the_merge() -> None:
    row = _merged(0, 0.80954, 2, 5.557, 5.05391)
    assert row.complete
    assert row.line() == (
        "    0  APPLIED             2/3       0.8095        2         5.0539           2/1/1 of 4"
        "                      -"
    )


def test_a_round_is_complete_only_once_every_scoring_step_settled() -> None:
    merged = _merged(0, 0.8, 2, 5.5, 5.0)
    assert merged.complete
    pending = _view(
        0,
        "APPLIED",
        ["UPLOADED", "UPLOADED"],
        update_norm=0.8,
        clipped=0,
        heldout_loss_after=5.0,
        scoring_jobs=[_job("agreement"), _job(None), _job("agreement"), _job("fallback")],
    )
    assert not RoundRow.from_view(pending).complete
    # The feed has not enqueued the second upload's steps yet.
    early = {**pending, "scoring_jobs": [_job("agreement"), _job("agreement")]}
    assert not RoundRow.from_view(early).complete


def test_the_table_prints_a_round_only_when_its_line_changes() -> None:
    table = Table()
    assert table.update(RoundRow.from_view(_view(0, "OPEN", ["ASSIGNED"]))) is not None
    assert table.update(RoundRow.from_view(_view(0, "OPEN", ["ASSIGNED"]))) is None
    # heldout_loss (of theta(w)) is not a column: a row differing only there prints nothing.
    same = RoundRow.from_view(_view(0, "OPEN", ["ASSIGNED"], heldout_loss=5.5))
    assert table.update(same) is None
    assert table.latest() == [same]
    assert table.update(RoundRow.from_view(_view(0, "ASSIGNED", ["ASSIGNED"]))) is not None
    assert table.update(RoundRow.from_view(_view(1, "OPEN", ["ASSIGNED"]))) is not None
    assert [row.w for row in table.latest()] == [0, 1]


def test_the_verdict_needs_every_round_merged_and_the_loss_below_theta_zero() -> None:
    rows = [_merged(0, 1.0, 0, 5.5, 5.0), _merged(1, 1.0, 0, 5.0, 4.5)]
    assert verdict(rows, 2, 5.5).ok
    assert verdict(rows, 3, 5.5).reason == "only 2 of 3 rounds were applied"
    assert verdict([*rows[:1], _merged(1, 1.0, 0, 5.0, 5.6)], 2, 5.5).reason == (
        "held-out loss did not fall: 5.5000 -> 5.6000"
    )
    assert verdict(rows, 2, None).reason == "the daemon did not report the held-out loss"
    assert not verdict([_merged(0, 1.0, 0, 5.5, float("nan"))], 1, 5.5).ok
    # Only the first N merged rounds count.
    assert verdict([*rows, _merged(2, 1.0, 0, 4.5, 9.0)], 2, 5.5).ok


def test_the_summary_adds_up_the_merged_rounds() -> None:
    rows = [_merged(0, 1.0, 2, 5.5, 5.0), _merged(1, 1.0, 1, 5.0, 4.4)]
    assert summary_lines(rows, 2, 5.5, 41.04) == [
        "summary: 2/2 rounds applied in 41.0 s; 4/6 deltas uploaded, 3 preclipped",
        "summary: 8 scoring steps; settled by agreement 4, by a third copy 2, by the fallback 2",
        "summary: held-out loss 5.5000 at theta(0) -> 4.4000 at theta(2) (-20.0%)",
    ]
    assert summary_lines([], 2, None, 3.0) == [
        "summary: 0/2 rounds applied in 3.0 s; 0/0 deltas uploaded, 0 preclipped",
        "summary: 0 scoring steps; settled by agreement 0, by a third copy 0, by the fallback 0",
    ]


def _audit(target: str, state: str, result: str | None) -> dict[str, Any]:
    return {"target": target, "state": state, "result": result}


def test_with_auditors_a_round_is_complete_once_its_audits_have_verdicts() -> None:
    merged = _merged(0, 0.8, 0, 5.5, 5.0)
    view = {
        **_view(0, "AUDIT", ["MATCH", "MISMATCH", "UPLOADED"]),
        "update_norm": 0.8,
        "clipped": 0,
        "heldout_loss_after": 5.0,
        "scoring_jobs": [_job("agreement")] * 6,
        "selected": ["k0", "k1", "k2"],
        "jobs": [
            _audit("k0", "done", "MATCH"),
            _audit("k1", "done", "MISMATCH"),
            _audit("k2", "leased", None),
        ],
    }
    assert merged.complete  # no auditors: the audits do not hold a round back
    row = RoundRow.from_view(view, expect_audits=True)
    assert (row.selected, row.replayed, row.caught, row.audits_open) == (3, 2, 1, 1)
    assert row.uploaded == 1  # a verdict replaces UPLOADED; the DeltaManifest still counts
    assert not row.complete
    assert row.line().endswith("3/2/1")
    view["jobs"][2] = _audit("k2", "done", "MATCH")
    view["miners"][2]["status"] = "MATCH"
    assert RoundRow.from_view(view, expect_audits=True).complete
    before_draw = {**view, "selected": None, "jobs": []}
    assert not RoundRow.from_view(before_draw, expect_audits=True).complete


def test_the_verdict_with_audits_needs_every_bad_honeypot_caught_and_no_honest_flag() -> None:
    rows = [_merged(0, 1.0, 0, 5.5, 5.0)]
    good = AuditTotals(replayed=4, caught=1, hp_bad=1, hp_bad_caught=1, hp_honest=0)
    assert verdict(rows, 1, 5.5, good, None, PAID).ok
    assert (
        verdict(rows, 1, 5.5, good).reason == "round 0 was not RELEASED in time: nothing was paid"
    )
    assert good.line() == (
        "summary: audits: 4 replayed, 1 caught; honeypots: 1 of 1 bad caught, 0 of 0 honest flagged"
    )
    missed = AuditTotals(replayed=4, caught=0, hp_bad=1, hp_bad_caught=0)
    assert verdict(rows, 1, 5.5, missed).reason == "1 audit(s) of a bad honeypot passed"
    honest = AuditTotals(replayed=4, caught=2, hp_bad=1, hp_bad_caught=1)
    assert verdict(rows, 1, 5.5, honest).reason == "1 honest miner(s) flagged by an audit"
    stats = {
        "epochs": [
            {"audits": 3, "catches": 1, "hp_bad": 1, "hp_bad_caught": 1, "hp_honest": 1},
            {"audits": 2, "catches": 0, "hp_honest": 1, "hp_honest_flagged": 0},
        ]
    }
    assert AuditTotals.from_stats(stats) == AuditTotals(5, 1, 1, 1, 2, 0)


def _answer(weights: dict[str, float], burned: int = 1, pending: int = 0) -> dict[str, Any]:
    paid = int(sum(weights.values()))
    meta = {
        "reason": "paid",
        "ledger_minted": burned + paid + pending,
        "ledger_burned": burned,
        "ledger_paid": paid,
        "ledger_pending": pending,
    }
    return {"epoch": 7, "weights": weights, "metadata": meta}


PAID = Payout(_answer({"h0": 500000.0, "h1": 499999.0}), ("h0", "h1"), ("hp",))


def test_the_payout_must_pay_every_honest_miner_and_no_cheater_and_balance() -> None:
    assert PAID.failure() is None
    assert PAID.lines({"h0": "miner-0", "h1": "miner-1"}) == [
        "summary: get_weights epoch 7 (paid): miner-0 500,000, miner-1 499,999; 1 caught"
        " cheater(s) paid nothing",
        "summary: ledger minted 1,000,000 = burned 1 + paid 999,999 + pending 0 units",
    ]
    unpaid = Payout(_answer({"h0": 10.0}), ("h0", "h1"), ())
    assert unpaid.failure() == "1 honest miner(s) not paid by get_weights epoch 7"
    cheat = Payout(_answer({"h0": 1.0, "h1": 1.0, "hp": 1.0}), ("h0", "h1"), ("hp",))
    assert cheat.failure() == "get_weights epoch 7 paid 1 caught cheater(s)"
    broken = _answer({"h0": 1.0, "h1": 1.0})
    broken["metadata"]["ledger_minted"] += 1
    assert Payout(broken, ("h0", "h1"), ()).failure().startswith("the ledger does not balance")  # type: ignore[union-attr]
    rows = [_merged(0, 1.0, 0, 5.5, 5.0)]
    good = AuditTotals(replayed=4, caught=1, hp_bad=1, hp_bad_caught=1, hp_honest=0)
    assert verdict(rows, 1, 5.5, good, None, cheat).reason == cheat.failure()


def test_the_dispute_drill_is_ok_only_when_the_drill_miner_lost_every_dispute_at_its_op() -> None:
    rows = [_merged(0, 1.0, 0, 5.5, 5.0)]
    spec = "step=6;layer=1;op=mlp"
    audits = AuditTotals(replayed=3, caught=2, hp_bad=1, hp_bad_caught=1)  # honeypot + drill
    won = DrillResult(spec, (("miner", spec),))
    ok = verdict(rows, 1, 5.5, audits, won, PAID)
    assert ok.ok
    assert f"the drill miner lost its 1 dispute(s) at {spec}" in ok.reason
    assert not verdict(rows, 1, 5.5, audits).ok  # without the drill it is an honest miner
    other_op = DrillResult(spec, (("miner", "step=6;layer=1;op=attn"),))
    assert verdict(rows, 1, 5.5, audits, other_op).reason.startswith("a drill dispute: the miner")
    auditor_lost = DrillResult(spec, (("auditor", spec),))
    assert not verdict(rows, 1, 5.5, audits, auditor_lost).ok
    unresolved = DrillResult(spec, ())
    got = verdict(rows, 1, 5.5, audits, unresolved).reason
    assert got in (
        "1 honest miner(s) flagged by an audit",
        "the drill miner's dispute was not resolved",
    )
    extra = AuditTotals(replayed=3, caught=3, hp_bad=1, hp_bad_caught=1)
    assert verdict(rows, 1, 5.5, extra, won).reason == "1 honest miner(s) flagged by an audit"
