"""The demo's live table and summary, from round views (pure: no I/O, no clock).

A :class:`RoundRow` is what one ``GET /v1/runs/{id}/rounds/{w}`` view says about round ``w``:
its state, how many rostered miners uploaded, and once the daemon merged it the update's norm,
how many deltas were preclipped and the held-out loss of the merged weights
(``heldout_loss_after``: the loss of theta(w + 1)); and how the scoring steps of its deltas
(``scoring_jobs``) were settled: by two agreeing nodes, by a third copy, or by the daemon's
fallback; and its audits: how many miners the draw selected, how many were replayed (a verdict)
and how many of those were caught (a fault verdict).
:class:`Table` turns a stream of views into printed lines: a round's line is printed when its
text differs from the last one printed for that round, so the table is live and never repeats
itself. :func:`verdict` decides the demo's exit status.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

__all__ = [
    "HEADER",
    "AuditTotals",
    "DrillResult",
    "RoundRow",
    "Table",
    "Verdict",
    "summary_lines",
    "verdict",
]

HEADER: Final = (
    "round  state          uploaded  update norm  clipped  held-out loss  scored agree/3rd/fb"
    "  audits sel/rep/caught"
)
_FAULTS: Final = frozenset({"MISMATCH", "WITHHELD", "BAD_PROOF", "ASSIGNMENT_VIOLATION"})
_SETTLED_HOW: Final = ("agreement", "third-copy", "fallback")


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _uploaded(miner: Mapping[str, Any]) -> bool:
    """The miner uploaded its delta (``delta_hash`` set; a full view's ``delta_manifest``)."""
    return miner.get("delta_hash") is not None or miner.get("delta_manifest") is not None


@attrs.frozen
class RoundRow:
    """One round of the table (module doc)."""

    w: int
    state: str
    uploaded: int
    rostered: int
    update_norm: float | None = None
    clipped: int | None = None
    heldout_loss: float | None = None
    """Loss of the round's start weights theta(w)."""
    heldout_loss_after: float | None = None
    """Loss of the merged weights theta(w + 1)."""
    jobs: int = 0
    """Scoring steps of the round's deltas (two per upload: public and hidden trace)."""
    settled: tuple[int, int, int] = (0, 0, 0)
    """Steps settled by agreement, by a third copy and by the daemon's fallback."""
    selected: int | None = None
    """Miners the audit draw selected (None before the draw)."""
    replayed: int = 0
    """Audits with a verdict."""
    caught: int = 0
    """Audits with a fault verdict."""
    audits_open: int = 0
    """Audits still without a verdict (queued, waiting or leased)."""
    expect_audits: bool = False
    """The run has auditors: the round is complete only once its audits are settled."""

    @classmethod
    def from_view(cls, view: Mapping[str, Any], *, expect_audits: bool = False) -> RoundRow:
        miners = view.get("miners") or []
        audits = [j for j in view.get("jobs") or [] if isinstance(j, dict)]
        results = [j.get("result") for j in audits if j.get("result") is not None]
        selected = view.get("selected")
        clipped = view.get("clipped")
        jobs = [j for j in view.get("scoring_jobs") or [] if isinstance(j, dict)]
        hows = [j.get("how") for j in jobs if j.get("state") == "settled"]
        return cls(
            w=int(view["w"]),
            state=str(view["state"]),
            uploaded=sum(1 for m in miners if _uploaded(m)),
            rostered=len(miners),
            update_norm=_number(view.get("update_norm")),
            clipped=clipped if isinstance(clipped, int) else None,
            heldout_loss=_number(view.get("heldout_loss")),
            heldout_loss_after=_number(view.get("heldout_loss_after")),
            jobs=len(jobs),
            settled=(
                hows.count("agreement"),
                hows.count("third-copy"),
                hows.count("fallback"),
            ),
            selected=len(selected) if isinstance(selected, list) else None,
            replayed=len(results),
            caught=sum(1 for r in results if r in _FAULTS),
            audits_open=sum(1 for j in audits if j.get("state") not in ("done", "failed")),
            expect_audits=expect_audits,
        )

    @property
    def merged(self) -> bool:
        """The daemon merged the round (its update norm is known)."""
        return self.update_norm is not None

    @property
    def scored(self) -> bool:
        """Every scoring step of every upload is settled (or there is nothing to score)."""
        return self.jobs >= 2 * self.uploaded and sum(self.settled) >= self.jobs

    @property
    def audited(self) -> bool:
        """The audit draw ran and every selected miner has a verdict (or a failed job)."""
        return self.selected is not None and self.audits_open == 0

    @property
    def complete(self) -> bool:
        """Merged, evaluated, scored and (with auditors) audited: nothing about the round will
        change in the table."""
        done = self.merged and self.heldout_loss_after is not None and self.scored
        return done and (self.audited or not self.expect_audits)

    def line(self) -> str:
        norm = "-" if self.update_norm is None else f"{self.update_norm:.4f}"
        clipped = "-" if self.clipped is None else str(self.clipped)
        loss = "-" if self.heldout_loss_after is None else f"{self.heldout_loss_after:.4f}"
        uploaded = f"{self.uploaded}/{self.rostered}"
        scored = "/".join(str(n) for n in self.settled) + f" of {self.jobs}"
        audits = "-" if self.selected is None else f"{self.selected}/{self.replayed}/{self.caught}"
        return (
            f"{self.w:5d}  {self.state:<13}  {uploaded:>8}  {norm:>11}  {clipped:>7}"
            f"  {loss:>13}  {scored:>19}  {audits:>21}"
        )


@attrs.define
class Table:
    """The latest row of every round seen so far (module doc)."""

    printed: dict[int, RoundRow] = attrs.field(factory=dict)

    def update(self, row: RoundRow) -> str | None:
        """The line to print for ``row``, or None when it says nothing new."""
        previous = self.printed.get(row.w)
        self.printed[row.w] = row
        line = row.line()
        return None if previous is not None and previous.line() == line else line

    def latest(self) -> list[RoundRow]:
        """The last printed row of every round, by round."""
        return [self.printed[w] for w in sorted(self.printed)]


@attrs.frozen
class AuditTotals:
    """``GET /run/{id}/auditor-stats`` summed over its epochs (after the honeypot reveal)."""

    replayed: int = 0
    caught: int = 0
    hp_bad: int = 0
    hp_bad_caught: int = 0
    hp_honest: int = 0
    hp_honest_flagged: int = 0

    @classmethod
    def from_stats(cls, stats: Mapping[str, Any]) -> AuditTotals:
        epochs = [e for e in stats.get("epochs") or [] if isinstance(e, dict)]

        def total(key: str) -> int:
            return sum(int(e.get(key) or 0) for e in epochs)

        return cls(
            replayed=total("audits"),
            caught=total("catches"),
            hp_bad=total("hp_bad"),
            hp_bad_caught=total("hp_bad_caught"),
            hp_honest=total("hp_honest"),
            hp_honest_flagged=total("hp_honest_flagged"),
        )

    @property
    def miners_caught(self) -> int:
        """Fault verdicts of miners that are not honeypots (all honest in the demo)."""
        return self.caught - self.hp_bad_caught - self.hp_honest_flagged

    def line(self) -> str:
        return (
            f"summary: audits: {self.replayed} replayed, {self.caught} caught; honeypots:"
            f" {self.hp_bad_caught} of {self.hp_bad} bad caught, {self.hp_honest_flagged} of"
            f" {self.hp_honest} honest flagged"
        )


@attrs.frozen
class DrillResult:
    """The dispute drill (``--dispute``): the op spec the drill miner trains wrong, and each of
    its resolved disputes as ``(loser_role, op_spec)``."""

    spec: str
    outcomes: tuple[tuple[str, str], ...]

    def failure(self) -> str | None:
        """Why the drill did not go as it must (None: every dispute lost at the drill's op)."""
        if not self.outcomes:
            return "the drill miner's dispute was not resolved"
        for loser, op_spec in self.outcomes:
            if (loser, op_spec) != ("miner", self.spec):
                return (
                    f"a drill dispute: the {loser} lost at {op_spec}, not the miner at {self.spec}"
                )
        return None


@attrs.frozen
class Payout:
    """The ``get_weights`` answer the demo asked for once round 0 was RELEASED, and who must
    (``honest``) and must not (``cheaters``: honeypots, the drill miner) be in it."""

    answer: dict[str, Any]
    honest: tuple[str, ...]
    cheaters: tuple[str, ...]

    def failure(self) -> str | None:
        """Why the payout is not what the ledger promises (None: it is)."""
        weights = self.answer.get("weights", {})
        meta = self.answer.get("metadata", {})
        unpaid = [h for h in self.honest if weights.get(h, 0) <= 0]
        if unpaid:
            return f"{len(unpaid)} honest miner(s) not paid by get_weights epoch {self.epoch}"
        paid = [h for h in self.cheaters if h in weights]
        if paid:
            return f"get_weights epoch {self.epoch} paid {len(paid)} caught cheater(s)"
        spent = meta.get("ledger_burned", 0) + meta.get("ledger_paid", 0)
        if meta.get("ledger_minted") != spent + meta.get("ledger_pending", 0):
            return f"the ledger does not balance: {meta}"
        return None

    @property
    def epoch(self) -> int:
        return int(self.answer.get("epoch", -1))

    def lines(self, names: dict[str, str]) -> list[str]:
        """The summary's payout lines (``names``: hotkey -> the demo's name for it)."""
        meta = self.answer.get("metadata", {})
        weights = self.answer.get("weights", {})
        paid = ", ".join(
            f"{names.get(h, h[:8])} {int(units):,}" for h, units in sorted(weights.items())
        )
        return [
            f"summary: get_weights epoch {self.epoch} ({meta.get('reason')}): {paid or 'nobody'}"
            f"; {len(self.cheaters)} caught cheater(s) paid nothing",
            f"summary: ledger minted {meta.get('ledger_minted', 0):,} = burned"
            f" {meta.get('ledger_burned', 0):,} + paid {meta.get('ledger_paid', 0):,} + pending"
            f" {meta.get('ledger_pending', 0):,} units",
        ]


@attrs.frozen
class Verdict:
    """Whether the demo did what it promises (exit 0), and why not."""

    ok: bool
    reason: str


def verdict(
    rows: Sequence[RoundRow],
    rounds: int,
    initial_loss: float | None,
    audits: AuditTotals | None = None,
    drill: DrillResult | None = None,
    payout: Payout | None = None,
) -> Verdict:
    """OK when ``rounds`` rounds were merged, the held-out loss of the last merge's weights is
    below the loss of theta(0), (with ``audits``) every audited bad honeypot was caught and no
    honest miner or honeypot was flagged (the drill miner's fault verdicts, one per dispute,
    are not honest miners flagged), (with ``drill``) the drill miner lost every dispute at its
    op, and (with audits) one ``get_weights`` answer paid every honest miner and no caught
    cheater; otherwise the first reason it is not."""
    merged = [row for row in rows if row.merged]
    if len(merged) < rounds:
        return Verdict(False, f"only {len(merged)} of {rounds} rounds were applied")
    final = merged[rounds - 1].heldout_loss_after
    if initial_loss is None or final is None:
        return Verdict(False, "the daemon did not report the held-out loss")
    if not (math.isfinite(final) and final < initial_loss):
        return Verdict(False, f"held-out loss did not fall: {initial_loss:.4f} -> {final:.4f}")
    if audits is None:
        return Verdict(True, f"{rounds} rounds applied and the held-out loss fell")
    if audits.hp_bad_caught < audits.hp_bad:
        missed = audits.hp_bad - audits.hp_bad_caught
        return Verdict(False, f"{missed} audit(s) of a bad honeypot passed")
    drilled = 0 if drill is None else len(drill.outcomes)
    if audits.hp_honest_flagged or audits.miners_caught > drilled:
        flagged = audits.hp_honest_flagged + audits.miners_caught - drilled
        return Verdict(False, f"{flagged} honest miner(s) flagged by an audit")
    if drill is not None:
        failure = drill.failure()
        if failure is not None:
            return Verdict(False, failure)
    if payout is None:
        return Verdict(False, "round 0 was not RELEASED in time: nothing was paid")
    failure = payout.failure()
    if failure is not None:
        return Verdict(False, failure)
    drilled_part = (
        "" if drill is None else f", the drill miner lost its {drilled} dispute(s) at {drill.spec}"
    )
    return Verdict(
        True,
        f"{rounds} rounds applied, the held-out loss fell, every bad honeypot audited was caught,"
        f" no honest miner was flagged{drilled_part}, and get_weights paid every honest miner"
        " and no cheater",
    )


def summary_lines(
    rows: Sequence[RoundRow], rounds: int, initial_loss: float | None, seconds: float
) -> list[str]:
    """The closing summary: rounds, deltas merged and clipped, the loss from theta(0) on."""
    merged = [row for row in rows if row.merged][:rounds]
    uploaded = sum(row.uploaded for row in merged)
    offered = sum(row.rostered for row in merged)
    clipped = sum(row.clipped or 0 for row in merged)
    settled = [sum(row.settled[i] for row in merged) for i in range(3)]
    lines = [
        f"summary: {len(merged)}/{rounds} rounds applied in {seconds:.1f} s;"
        f" {uploaded}/{offered} deltas uploaded, {clipped} preclipped",
        f"summary: {sum(row.jobs for row in merged)} scoring steps; settled by agreement"
        f" {settled[0]}, by a third copy {settled[1]}, by the fallback {settled[2]}",
    ]
    final = merged[-1].heldout_loss_after if merged else None
    if initial_loss is not None and final is not None:
        change = 100.0 * (final - initial_loss) / initial_loss
        lines.append(
            f"summary: held-out loss {initial_loss:.4f} at theta(0) -> {final:.4f}"
            f" at theta({len(merged)}) ({change:+.1f}%)"
        )
    return lines
