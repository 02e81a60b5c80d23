"""``hypertrain aggregate`` finalises too: against the real daemon (``aggregator = "external"``).

Checked: with three real miners the command merges and finalises every round of a three-round
run, in order, each with a K_coord Finalize the round view shows, whose verdicts are the
server's; with an auditor and a ``noise`` honeypot the verdicts are the audits' (MATCH, FAULT)
and the ledger is fed; stopped after posting a Finalize (its answer lost) and started again it
finalises the rest and skips what is final; ``--no-finalize`` merges only, ``--once``
finalises what is due and a later run the rest; a Finalize the server refuses with 422 is
posted again with a fresh template (at most ``FINALIZE_TRIES`` times), one found final after a
409 is reported with a note; a round that cannot become final is polled with bounded sleeps
until cancelled. The pure parts (the report line, the retry round, the inputs' finality keys)
without a daemon.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio.testing

from hypertrain.aggregator.remote import RemoteAggregator, RemoteConfig
from hypertrain.aggregator.remote_client import AggregatorClient, Refused
from hypertrain.aggregator.remote_final import FINALIZE_TRIES
from hypertrain.aggregator.remote_plan import (
    FinalReport,
    Report,
    final_offer,
    final_retry_round,
    run_facts,
)
from hypertrain.beacon import ChainInfo
from hypertrain.cli.aggregate import _report
from hypertrain.daemon.services import SERVICES
from hypertrain.datasets.pin import pin_async
from hypertrain.miner.honeypot import HoneypotMode
from hypertrain.protocol.envelope import NEVER, seal, verify
from hypertrain.protocol.errors import Malformed
from hypertrain.protocol.hashes import honeypot_commit
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import Beacon, RunManifest
from hypertrain.rounds.finality import Entry, Verdict, entitlements_root
from nurseries.testing import open_asgi_transport
from tests.aggregator.test_remote import (
    FAST_RETRY,
    RUN_TIMEOUT,
    _aggregate,
    _args,
    _external_daemon,
    _lines,
)
from tests.coordinator.harness import ADMIN_TOKEN, WORKER_TOKEN, admin_headers, write_secret
from tests.daemon.support import running_daemon
from tests.miner.conftest import coord, data_dir, run_manifest  # noqa: F401 (fixtures)
from tests.miner.network_support import audit, mine
from tests.miner.rounds_support import set_total_rounds
from tests.miner.test_against_the_daemon import (
    API,
    COORD,
    MINERS,
    OWNER,
    _launch,
    _settings,
)

ROUNDS = 3
AUDITED_TIMEOUT = 8000.0  # virtual seconds: three rounds of the manifest's own timeouts
AUDITOR = Keypair.from_seed(b"\x0a" * 32)
HONEYPOT = Keypair.from_seed(b"\x77" * 32)
HOTKEYS = sorted(key.ss58 for key in MINERS)


class _Crash(Exception):
    pass


def _finals(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if line.get("state") == "FINAL"]


def _merges(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if line.get("state") != "FINAL"]


def _forever(argv: list[str], *extra: str) -> list[str]:
    """``argv`` without ``--once`` (run until the last round is merged and final)."""
    return [arg for arg in argv if arg != "--once"] + list(extra)


async def _mine(tmp_path: Path, data_dir: Path, transport: httpx.AsyncBaseTransport) -> None:  # noqa: F811
    """Every miner for ``ROUNDS`` rounds, concurrently (each exits 0)."""

    async def one(key: Keypair) -> None:
        summary = await mine(tmp_path, key, data_dir, transport, rounds=ROUNDS)
        assert summary.exit_code == 0, key.ss58

    async with trio.open_nursery() as nursery:
        for key in MINERS:
            nursery.start_soon(one, key)


async def _views(client: httpx.AsyncClient, run_id: str, n: int) -> list[dict[str, Any]]:
    return [(await client.get(f"/v1/runs/{run_id}/rounds/{w}")).json() for w in range(n)]


def _finalize_of(view: dict[str, Any], run_id: str) -> Any:
    """The round view's Finalize body, checked to be sealed by K_coord for this run."""
    envelope = view["finalize"]["envelope"]
    assert envelope["type"] == "Finalize"
    assert envelope["signer"] == COORD.ss58
    return verify(
        envelope,
        expected_run_id=run_id,
        now_round=0,
        signer_allowed=lambda _type, signer: signer == COORD.ss58,
    ).message


def _check_final(views: list[dict[str, Any]], run_id: str, hotkeys: list[list[str]]) -> None:
    """Every round final, in order, K_coord-sealed, its body the server's own entries (one
    per committed miner: round ``w``'s are ``hotkeys[w]``)."""
    final_rounds = [view["finalize"]["final_round"] for view in views]
    assert final_rounds == sorted(final_rounds)
    for w, view in enumerate(views):
        body = _finalize_of(view, run_id)
        entries = view["finalize"]["entries"]
        assert body.w == w
        assert sorted(entries) == hotkeys[w]
        paid = sorted(h for h, e in entries.items() if e["verdict"] in ("MATCH", "UNSAMPLED"))
        assert list(body.included) == paid
        ledger = [
            Entry(h, Verdict(e["verdict"]), e["tokens"], e["soft_score_ppm"])
            for h, e in entries.items()
        ]
        assert body.entitlements_root == entitlements_root(ledger)
        if w + 1 < len(views):  # the theta round w handed to round w + 1
            opened = views[w + 1]["round_open"]["body"]["theta_hash"]
            if view["rollback"] is None:
                assert body.final_theta_hash_w1 == opened
            else:  # rolled back: the corrected theta, which round w + 2 builds on
                assert body.final_theta_hash_w1 != opened
        assert view["finalize"]["final_round"] >= view["round_open"]["body"]["d_final"]
        assert view["state"] in ("FINAL", "VESTING", "RELEASED")


async def test_the_remote_aggregator_merges_and_finalises_every_round_in_order(
    tmp_path: Path,
    data_dir: Path,  # noqa: F811
    run_manifest: RunManifest,  # noqa: F811
    configured: None,
    autojump_clock: trio.testing.MockClock,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with (
        _external_daemon(tmp_path) as (_handle, transport),
        httpx.AsyncClient(transport=transport, base_url=API) as client,
    ):
        run_id = await _launch(client, run_manifest)
        await set_total_rounds(client, run_id, ROUNDS)
        with trio.fail_after(RUN_TIMEOUT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_mine, tmp_path, data_dir, transport)
                code = await _aggregate(_forever(_args(tmp_path, run_id)), transport)
        views = await _views(client, run_id, ROUNDS)
        inputs = [
            await AggregatorClient(API, ADMIN_TOKEN, transport=transport).inputs(run_id, w)
            for w in range(ROUNDS)
        ]
    lines = _lines(capsys.readouterr().out)
    merges, finals = _merges(lines), _finals(lines)

    assert code == 0
    assert [m["w"] for m in merges] == list(range(ROUNDS))
    assert [f["w"] for f in finals] == list(range(ROUNDS))
    # Each round is reported final after its merge line, and before the next round's final.
    order = [(line["w"], line.get("state", "merged")) for line in lines]
    for w in range(ROUNDS):
        assert order.index((w, "merged")) < order.index((w, "FINAL"))
    _check_final(views, run_id, [HOTKEYS] * ROUNDS)
    for w, (view, final) in enumerate(zip(views, finals, strict=True)):
        # The verdicts the command printed are the server's (no auditors: nobody is drawn).
        server = {h: e["verdict"] for h, e in view["finalize"]["entries"].items()}
        assert server == dict.fromkeys(HOTKEYS, "UNSAMPLED")
        assert final == {
            "w": w,
            "state": "FINAL",
            "included": 3,
            "counts": {"MATCH": 0, "UNSAMPLED": 3, "FAULT": 0, "TRANSIENT": 0, "NO_UPLOAD": 0},
            "verdicts": server,
        }
        assert _finalize_of(view, run_id).final_theta_hash_w1 == merges[w]["theta_hash"]
        assert inputs[w]["final"] is True
        assert inputs[w]["finalize_template"] is None
        assert inputs[w]["finalize_blocked"] is None


async def _audited_run(
    client: httpx.AsyncClient,
    manifest: RunManifest,
    data_dir: Path,  # noqa: F811
    objects_dir: Path,
) -> str:
    """A running three-round run audited by :data:`AUDITOR` (the manifest's own timeouts, so
    each round's audits end before the next round's ``d_upload``): the miners, the first on
    probation (audited every round), and the ``noise`` honeypot on probation."""
    info = ChainInfo.from_json((await client.get("/v1/beacon/info")).json())
    beacon = Beacon(
        chain_hash=info.hash, period=info.period_ms // 1000, genesis_time=info.genesis_ms // 1000
    )
    manifest = attrs.evolve(
        manifest, coord_pubkey=COORD.ss58, beacon=beacon, auditors=(AUDITOR.ss58,)
    )
    envelope = seal(OWNER, "RunManifest", manifest.run_id(), manifest, NEVER).to_json()
    created = await client.post("/v1/admin/runs", json=envelope, headers=admin_headers())
    assert created.status_code == 201, created.text
    run_id: str = created.json()["run_id"]
    base = f"/v1/admin/runs/{run_id}"
    pinned = await pin_async(data_dir, objects_dir)
    commitment = honeypot_commit([(HONEYPOT.ss58, HoneypotMode.NOISE.value)], b"\x05" * 32)
    steps: list[tuple[str, object]] = [
        (f"{base}/dataset", {"manifest_sha256": pinned.manifest_sha256}),
        (f"{base}/config", {"train_rounds": 20, "final_after_upload": 5, "total_rounds": ROUNDS}),
        *((f"{base}/roster/{key.ss58}", {"probation": key == MINERS[0]}) for key in MINERS),
        (f"{base}/roster/{HONEYPOT.ss58}", {"probation": True}),
        (f"{base}/honeypot", {"commitment": commitment}),
        (f"{base}/paused", {"paused": False}),
    ]
    for path, body in steps:
        r = await client.put(path, json=body, headers=admin_headers())
        assert r.status_code == 200, r.text
    return run_id


async def test_audited_rounds_are_final_with_the_servers_verdicts(
    tmp_path: Path,
    data_dir: Path,  # noqa: F811
    run_manifest: RunManifest,  # noqa: F811
    configured: None,
    autojump_clock: trio.testing.MockClock,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = attrs.evolve(_settings(tmp_path), aggregator="external")
    worker = write_secret(tmp_path / "secrets" / "worker_token", WORKER_TOKEN)
    coordinator = attrs.evolve(settings.coordinator, worker_token_file=worker)
    finished = trio.Event()
    async with (
        running_daemon(attrs.evolve(settings, coordinator=coordinator), SERVICES) as handle,
        open_asgi_transport(handle.app, lifespan=False) as transport,
        httpx.AsyncClient(transport=transport, base_url=API) as client,
    ):
        objects_dir = tmp_path / "state" / "objects"
        run_id = await _audited_run(client, run_manifest, data_dir, objects_dir)

        async def miner(key: Keypair, mode: HoneypotMode) -> None:
            await mine(tmp_path, key, data_dir, transport, rounds=ROUNDS, mode=mode)

        async def auditor() -> None:
            await audit(tmp_path / "a", run_id, AUDITOR, transport, finished.wait)

        with trio.fail_after(AUDITED_TIMEOUT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(auditor)
                for key in MINERS:
                    nursery.start_soon(miner, key, HoneypotMode.HONEST)
                nursery.start_soon(miner, HONEYPOT, HoneypotMode.NOISE)
                code = await _aggregate(_forever(_args(tmp_path, run_id)), transport)
                finished.set()
        views = await _views(client, run_id, ROUNDS)
        assert handle.ctx.ledger is not None
    out = capsys.readouterr().out
    finals = _finals(_lines(out))

    assert code == 0
    assert [f["w"] for f in finals] == list(range(ROUNDS))
    # The honeypot caught in round 0 is blacklisted: off the rosters of rounds 1 and 2.
    _check_final(views, run_id, [sorted([*HOTKEYS, HONEYPOT.ss58]), HOTKEYS, HOTKEYS])
    for view, final in zip(views, finals, strict=True):
        server = {h: e["verdict"] for h, e in view["finalize"]["entries"].items()}
        assert final["verdicts"] == server
        # The verdicts are the audits': MATCH for the audited, FAULT for the caught honeypot,
        # UNSAMPLED for a miner never drawn.
        statuses = {m["hotkey"]: (m["status"], m["selected"]) for m in view["miners"]}
        for hotkey, verdict in server.items():
            status, selected = statuses[hotkey]
            expected = "FAULT" if status == "MISMATCH" else "MATCH" if selected else "UNSAMPLED"
            assert verdict == expected, (view["w"], hotkey, status, selected)
        assert server[MINERS[0].ss58] == "MATCH"
        assert final["included"] == final["counts"]["MATCH"] + final["counts"]["UNSAMPLED"]
        assert view["finalize"]["ledger_synced"] is True
    assert views[0]["finalize"]["entries"][HONEYPOT.ss58]["verdict"] == "FAULT"
    # hypertrain aggregate rolled round 0 back without the honeypot when it merged round 1.
    rollback = views[0]["rollback"]
    assert rollback is not None
    assert rollback["excluded"] == [HONEYPOT.ss58]
    assert rollback["new_tapes"] == [views[0]["tape_key"], views[1]["tape_key"]]
    assert (
        views[2]["round_open"]["body"]["theta_hash"]
        == (rollback["envelope"]["body"]["new_theta_hash_w2"])
    )
    assert any("rolled back round 0" in str(line.get("note")) for line in _lines(out))


async def test_stopped_after_posting_a_finalize_a_restart_finalises_the_rest(
    tmp_path: Path,
    data_dir: Path,  # noqa: F811
    run_manifest: RunManifest,  # noqa: F811
    configured: None,
    autojump_clock: trio.testing.MockClock,
    capsys: pytest.CaptureFixture[str],
) -> None:
    posted: list[int] = []

    class Crashing(AggregatorClient):
        async def finalize(
            self, run_id: str, w: int, envelope: dict[str, Any]
        ) -> tuple[int, dict[str, Any]]:
            answer = await super().finalize(run_id, w, envelope)
            posted.append(w)
            if w == 1:
                raise _Crash("stopped after POST .../rounds/1/finalize, its answer lost")
            return answer

    reports: list[Report] = []
    async with (
        _external_daemon(tmp_path) as (_handle, transport),
        httpx.AsyncClient(transport=transport, base_url=API) as client,
    ):
        run_id = await _launch(client, run_manifest)
        await set_total_rounds(client, run_id, ROUNDS)
        config = RemoteConfig(run_id, COORD, tmp_path / "aggregator-state")
        crashing = Crashing(API, ADMIN_TOKEN, transport=transport, retry=FAST_RETRY)
        with trio.fail_after(RUN_TIMEOUT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_mine, tmp_path, data_dir, transport)
                with pytest.raises(_Crash):
                    await RemoteAggregator(config, crashing, reports.append).run()
                await crashing.aclose()
                stopped = await _views(client, run_id, 2)
                code = await _aggregate(_forever(_args(tmp_path, run_id)), transport)
        views = await _views(client, run_id, ROUNDS)
    lines = _lines(capsys.readouterr().out)

    assert code == 0
    assert posted == [0, 1]
    assert [(type(r).__name__, r.w) for r in reports] == [
        ("MergeReport", 0),
        ("FinalReport", 0),  # at d_final(0), while waiting for d_upload(1)
        ("MergeReport", 1),
    ]
    # Round 1 was final before the stop; the restart merged round 2 and finalised it alone.
    assert stopped[1]["finalize"] is not None
    assert [m["w"] for m in _merges(lines)] == [2]
    assert [(f["w"], f.get("note")) for f in _finals(lines)] == [(2, None)]
    _check_final(views, run_id, [HOTKEYS] * ROUNDS)


async def test_no_finalize_merges_only_and_a_later_run_finalises(
    tmp_path: Path,
    run_manifest: RunManifest,  # noqa: F811
    configured: None,
    autojump_clock: trio.testing.MockClock,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with (
        _external_daemon(tmp_path) as (_handle, transport),
        httpx.AsyncClient(transport=transport, base_url=API) as client,
    ):
        run_id = await _launch(client, run_manifest)  # no miner ever commits
        await set_total_rounds(client, run_id, 2)
        argv = _args(tmp_path, run_id)
        with trio.fail_after(RUN_TIMEOUT):
            merged_only = await _aggregate(_forever(argv, "--no-finalize"), transport)
            after_merge = await _views(client, run_id, 2)
            merge_out = capsys.readouterr()
            once = await _aggregate(argv, transport)
            after_once = await _views(client, run_id, 2)
            once_out = capsys.readouterr()
            rest = await _aggregate(_forever(argv), transport)
        views = await _views(client, run_id, 2)
    rest_lines = _lines(capsys.readouterr().out)

    assert (merged_only, once, rest) == (0, 0, 0)
    assert [line["w"] for line in _lines(merge_out.out)] == [0, 1]
    assert _finals(_lines(merge_out.out)) == []
    assert [v["finalize"] for v in after_merge] == [None, None]
    # --once at D < d_final(1): round 0 only; the next run waits for d_final(1).
    assert "nothing to merge" in once_out.err
    assert [f["w"] for f in _finals(_lines(once_out.out))] == [0]
    assert after_once[0]["finalize"] is not None
    assert after_once[1]["finalize"] is None
    assert rest_lines == [
        {
            "w": 1,
            "state": "FINAL",
            "included": 0,
            "counts": dict.fromkeys(("MATCH", "UNSAMPLED", "FAULT", "TRANSIENT", "NO_UPLOAD"), 0),
            "verdicts": {},
        }
    ]
    _check_final(views, run_id, [[], []])
    # Waiting for d_final(1) wakes there: the Finalize is recorded at D = d_final(1), or one
    # round later when the beacon ticks while the daemon writes it.
    d_final = views[1]["round_open"]["body"]["d_final"]
    assert views[1]["finalize"]["final_round"] in (d_final, d_final + 1)


async def test_a_refused_finalize_is_posted_again_with_a_fresh_template(
    tmp_path: Path,
    run_manifest: RunManifest,  # noqa: F811
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Round 0: the first post carries a wrong ``entitlements_root`` (422), the second is the
    template's (200). Round 1: the post succeeds but its answer is replaced by a repeat's 409
    (already final): reported with a note. Round 2: every post is wrong: Refused after
    ``FINALIZE_TRIES`` posts."""
    posts: list[tuple[int, int]] = []

    class Meddling(AggregatorClient):
        async def finalize(
            self, run_id: str, w: int, envelope: dict[str, Any]
        ) -> tuple[int, dict[str, Any]]:
            if (w == 0 and not posts) or w == 2:
                body = {**envelope["body"], "entitlements_root": "00" * 32}
                envelope = seal(COORD, "Finalize", run_id, body, NEVER).to_json()
            answer = await super().finalize(run_id, w, envelope)
            if w == 1:
                answer = await super().finalize(run_id, w, envelope)
            posts.append((w, answer[0]))
            return answer

    reports: list[Report] = []
    async with (
        _external_daemon(tmp_path) as (_handle, transport),
        httpx.AsyncClient(transport=transport, base_url=API) as client,
    ):
        run_id = await _launch(client, run_manifest)
        await set_total_rounds(client, run_id, 3)
        config = RemoteConfig(run_id, COORD, tmp_path / "aggregator-state")
        meddling = Meddling(API, ADMIN_TOKEN, transport=transport, retry=FAST_RETRY)
        aggregator = RemoteAggregator(config, meddling, reports.append)
        with trio.fail_after(RUN_TIMEOUT), pytest.raises(Refused) as refused:
            await aggregator.run()
        await meddling.aclose()
        views = await _views(client, run_id, 3)

    assert posts == [(0, 422), (0, 200), (1, 409), *[(2, 422)] * FINALIZE_TRIES]
    finals = [r for r in reports if isinstance(r, FinalReport)]
    assert [(r.w, r.note) for r in finals] == [
        (0, None),
        (1, "round 1 was final already (round 1 of run " + run_id + " is already final)"),
    ]
    assert refused.value.status == 422
    assert "entitlements_root" in refused.value.detail
    assert f"{FINALIZE_TRIES} tries" in refused.value.detail
    assert views[0]["finalize"] is not None
    assert views[1]["finalize"] is not None
    assert views[2]["finalize"] is None


async def test_a_round_that_cannot_be_final_is_polled_with_bounded_sleeps_until_cancelled(
    tmp_path: Path,
    run_manifest: RunManifest,  # noqa: F811
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    asked: list[float] = []

    class Counting(AggregatorClient):
        async def inputs(self, run_id: str, w: int) -> dict[str, Any]:
            asked.append(trio.current_time())
            return await super().inputs(run_id, w)

    async with (
        _external_daemon(tmp_path) as (_handle, transport),
        httpx.AsyncClient(transport=transport, base_url=API) as client,
    ):
        run_id = await _launch(client, run_manifest)
        config = RemoteConfig(run_id, COORD, tmp_path / "aggregator-state", max_poll=30.0)
        counting = Counting(API, ADMIN_TOKEN, transport=transport, retry=FAST_RETRY)
        aggregator = RemoteAggregator(config, counting, lambda report: None)
        start = trio.current_time()
        # Nobody merges round 0: it can never be final; only cancellation ends the wait.
        with trio.move_on_after(1200) as scope:
            await aggregator.wait_final()
        await counting.aclose()
        view = (await client.get(f"/v1/runs/{run_id}/rounds/0")).json()
        d_final = int(view["round_open"]["body"]["d_final"])
        now = int(view["now_round"])
    assert scope.cancelled_caught
    assert view["finalize"] is None
    # Asked once, then at d_final (1 s rounds), then about every max_poll seconds.
    gaps = [b - a for a, b in itertools.pairwise(asked)]
    assert asked[0] == start
    assert all(gap <= 30.0 + 1.0 for gap in gaps[1:]), gaps
    assert len(asked) >= (now - d_final) // 30, (len(asked), now, d_final)


def test_a_final_report_is_one_json_line_with_a_note_only_when_there_is_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b, c = HOTKEYS
    _report(FinalReport.of(3, {c: "UNSAMPLED", a: "MATCH", b: "UNSAMPLED"}))
    _report(FinalReport.of(4, {a: "FAULT"}, "round 4 was final already"))
    counts = '"counts":{{"MATCH":{},"UNSAMPLED":{},"FAULT":{},"TRANSIENT":0,"NO_UPLOAD":0}}'
    assert capsys.readouterr().out == (
        '{"w":3,"state":"FINAL","included":3,'
        + counts.format(1, 2, 0)
        + f',"verdicts":{{"{a}":"MATCH","{b}":"UNSAMPLED","{c}":"UNSAMPLED"}}}}\n'
        '{"w":4,"state":"FINAL","included":0,'
        + counts.format(0, 0, 1)
        + f',"verdicts":{{"{a}":"FAULT"}},"note":"round 4 was final already"}}\n'
    )


def test_the_retry_round_is_d_final_then_one_max_poll_later() -> None:
    def inputs(now: int) -> dict[str, Any]:
        return {"now_round": now, "round_open": {"body": {"d_final": 100}}}

    assert final_retry_round(inputs(40), period=3.0, max_poll=30.0) == 100
    assert final_retry_round(inputs(100), period=3.0, max_poll=30.0) == 110
    assert final_retry_round(inputs(120), period=3.0, max_poll=31.0) == 131
    assert final_retry_round(inputs(120), period=60.0, max_poll=30.0) == 121


def test_the_inputs_must_say_whether_the_round_is_final() -> None:
    template = {"w": 0, "final_theta_hash_w1": "ab" * 32, "included": [], "entitlements_root": ""}
    offer = final_offer({"final": False, "finalize_template": template, "finalize_blocked": None})
    assert offer.template == template
    assert not offer.final
    blocked = {"final": False, "finalize_template": None, "finalize_blocked": "D = 3 is before"}
    assert final_offer(blocked).blocked == "D = 3 is before"
    with pytest.raises(Malformed, match="pass --no-finalize"):
        final_offer({"w": 0})
    with pytest.raises(Malformed, match="final must be a bool"):
        final_offer({"final": "yes", "finalize_template": None, "finalize_blocked": None})


def test_the_oldest_round_not_final_comes_from_the_run_view(run_manifest: RunManifest) -> None:  # noqa: F811
    envelope = seal(COORD, "RunManifest", run_manifest.run_id(), run_manifest, NEVER).to_json()
    view = {"run_id": run_manifest.run_id(), "status": "running", "manifest_envelope": envelope}
    states = ["RELEASED", "VESTING", "FINAL", "AUDIT", "TRAINING"]
    rounds = [{"w": w, "state": s} for w, s in enumerate(states)]
    assert run_facts({**view, "rounds": rounds}).not_final == 3
    assert run_facts({**view, "rounds": rounds[:3]}).not_final is None
    assert run_facts({**view, "rounds": []}).not_final is None
