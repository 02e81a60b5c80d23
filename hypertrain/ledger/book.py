"""The round book: which rounds exist, who committed, who has a verdict, which rounds are
final and which NO_UPLOAD slices are settled. It is what the rules of spec 8 are checked
against, and it is updated as soon as an event is recorded (the money follows lazily, see
:mod:`hypertrain.ledger.state`).

The rules, in the order :meth:`Book.check` applies them (the time rules are the state's):

- ``commit``: the round is not finalized; the hotkey has no commit in it yet.
- ``verdict``: the round is not finalized; the hotkey committed to it; no verdict yet.
- ``finalize``: ``w`` is the run's next round to finalize (0 first, then the last final
  ``w + 1``); every commit of the round has a verdict.
- ``vindicate`` / ``fault``: the round is finalized and the hotkey's verdict in it was
  NO_UPLOAD. A repeat of the settlement the slice already has is a no-op (``check`` answers
  False and nothing is recorded); the other settlement is refused.
- ``clawback``: no book rule (any hotkey, ``units >= 1``).
"""

from __future__ import annotations

from typing import Literal

import attrs

from hypertrain.ledger.errors import LedgerRefused
from hypertrain.ledger.events import (
    ClawbackEvent,
    CommitEvent,
    Event,
    FaultEvent,
    FinalizeEvent,
    Verdict,
    VerdictEvent,
    VindicateEvent,
)

__all__ = ["Book", "Settlement"]

Settlement = Literal["vindicated", "faulted"]
RoundKey = tuple[str, int]
SliceKey = tuple[str, int, str]


@attrs.define
class Book:
    """Every round's commits and verdicts, each run's last final round, settled slices."""

    rounds: dict[RoundKey, dict[str, Verdict | None]] = attrs.field(factory=dict)
    """``(run_id, w) -> hotkey -> verdict`` (None until the verdict), finalized rounds too."""
    last_final: dict[str, int] = attrs.field(factory=dict)
    """``run_id -> w`` of the run's last finalized round."""
    settled: dict[SliceKey, Settlement] = attrs.field(factory=dict)
    """NO_UPLOAD slices already vindicated or faulted."""
    final_at: dict[RoundKey, int] = attrs.field(factory=dict)
    """``(run_id, w) -> at`` of each finalize."""

    def is_finalized(self, run_id: str, w: int) -> bool:
        """Whether round ``w`` of ``run_id`` is finalized (rounds finalize in order)."""
        return w <= self.last_final.get(run_id, -1)

    def has_commit(self, run_id: str, w: int, hotkey: str) -> bool:
        """Whether ``hotkey`` committed to round ``w`` of ``run_id``."""
        return hotkey in self.rounds.get((run_id, w), {})

    def verdict_of(self, run_id: str, w: int, hotkey: str) -> Verdict | None:
        """The verdict recorded for ``hotkey`` in the round (None: none, or no commit)."""
        return self.rounds.get((run_id, w), {}).get(hotkey)

    def settlement_of(self, run_id: str, w: int, hotkey: str) -> Settlement | None:
        """How a finalized NO_UPLOAD slice was settled (None: not settled, or not one)."""
        return self.settled.get((run_id, w, hotkey))

    def check(self, event: Event) -> bool:
        """Raise LedgerRefused if ``event`` breaks a book rule; False if it is a no-op repeat
        (a settlement the slice already has), True if it is to be recorded."""
        if isinstance(event, CommitEvent):
            self._check_open(event.run_id, event.w, "commit")
            if self.has_commit(event.run_id, event.w, event.hotkey):
                raise LedgerRefused(
                    f"commit: {event.hotkey} already committed to round {event.w} of"
                    f" run {event.run_id}"
                )
        elif isinstance(event, VerdictEvent):
            self._check_open(event.run_id, event.w, "verdict")
            if not self.has_commit(event.run_id, event.w, event.hotkey):
                raise LedgerRefused(
                    f"verdict: {event.hotkey} has no commit in round {event.w} of run"
                    f" {event.run_id}"
                )
            if self.verdict_of(event.run_id, event.w, event.hotkey) is not None:
                raise LedgerRefused(
                    f"verdict: {event.hotkey} already has a verdict in round {event.w} of"
                    f" run {event.run_id}"
                )
        elif isinstance(event, FinalizeEvent):
            self._check_finalize(event)
        elif isinstance(event, VindicateEvent | FaultEvent):
            return self._check_settlement(event)
        else:
            assert isinstance(event, ClawbackEvent)
        return True

    def record(self, event: Event) -> None:
        """Update the book with ``event``, which :meth:`check` accepted."""
        if isinstance(event, CommitEvent):
            self.rounds.setdefault((event.run_id, event.w), {})[event.hotkey] = None
        elif isinstance(event, VerdictEvent):
            self.rounds[(event.run_id, event.w)][event.hotkey] = event.verdict
        elif isinstance(event, FinalizeEvent):
            self.rounds.setdefault((event.run_id, event.w), {})
            self.last_final[event.run_id] = event.w
            self.final_at[(event.run_id, event.w)] = event.at
        elif isinstance(event, VindicateEvent):
            self.settled[(event.run_id, event.w, event.hotkey)] = "vindicated"
        elif isinstance(event, FaultEvent):
            self.settled[(event.run_id, event.w, event.hotkey)] = "faulted"

    def _check_open(self, run_id: str, w: int, kind: str) -> None:
        if self.is_finalized(run_id, w):
            raise LedgerRefused(f"{kind}: round {w} of run {run_id} is already finalized")

    def _check_finalize(self, event: FinalizeEvent) -> None:
        expected = self.last_final.get(event.run_id, -1) + 1
        if event.w != expected:
            raise LedgerRefused(
                f"finalize: rounds of run {event.run_id} finalize in order; the next is"
                f" {expected}, not {event.w}"
            )
        missing = sorted(
            hotkey
            for hotkey, verdict in self.rounds.get((event.run_id, event.w), {}).items()
            if verdict is None
        )
        if missing:
            raise LedgerRefused(
                f"finalize: round {event.w} of run {event.run_id} has commits without a"
                f" verdict: {', '.join(missing)}"
            )

    def _check_settlement(self, event: VindicateEvent | FaultEvent) -> bool:
        kind = event.kind
        if not self.is_finalized(event.run_id, event.w):
            raise LedgerRefused(f"{kind}: round {event.w} of run {event.run_id} is not finalized")
        if self.verdict_of(event.run_id, event.w, event.hotkey) != "NO_UPLOAD":
            raise LedgerRefused(
                f"{kind}: {event.hotkey} has no NO_UPLOAD verdict in round {event.w} of run"
                f" {event.run_id}"
            )
        done = self.settlement_of(event.run_id, event.w, event.hotkey)
        wanted: Settlement = "vindicated" if isinstance(event, VindicateEvent) else "faulted"
        if done is None:
            return True
        if done == wanted:
            return False
        raise LedgerRefused(
            f"{kind}: the NO_UPLOAD slice of {event.hotkey} in round {event.w} of run"
            f" {event.run_id} is already {done}"
        )
