"""The ledger feed: final rounds in the database become ledger events, exactly once.

A Finalize is stored first (one database transaction, :mod:`.flows.finalize`); then
:meth:`LedgerFeed.sync` turns every final round the ledger does not hold yet into its events,
in round order: a ``commit`` and a ``verdict`` per entry (each skipped when the journal has it
already) and the ``finalize``, then marks the row synced with the time the ledger recorded.
Each event is one fsynced journal record, so a daemon killed anywhere in between resumes on the
next sync (the daemon syncs at start, after each Finalize and on each beacon round) with no
event twice and none lost: the journal itself says what it holds.

A dispute of a final round decided later (the miner's verdict was NO_UPLOAD while it was open)
is queued in the ledger outbox by the same transaction and fed after the rounds: ``vindicate``
when the miner won, ``fault`` when it lost (both idempotent in the ledger).

The event time is the chain time of the round's ``final_round`` bumped by the ledger to be
after its last event and last answered ``epoch_at`` (spec 4.1).
"""

from __future__ import annotations

import logging

import attrs

from hypertrain.coordinator.flows.rerun import reruns_of_round
from hypertrain.coordinator.services.ledgerclock import LedgerClock
from hypertrain.coordinator.tables.finality import (
    FinalRow,
    last_synced,
    mark_outcome_synced,
    mark_synced,
    unsynced_finals,
    unsynced_outcomes,
)
from hypertrain.ledger import Ledger
from hypertrain.store import Database

__all__ = ["LedgerFeed"]

log = logging.getLogger(__name__)


@attrs.define(eq=False)
class LedgerFeed:
    """The coordinator's ledger and its clock (module doc)."""

    ledger: Ledger
    clock: LedgerClock

    def event_time(self, D: int) -> int:  # noqa: N803 (spec name)
        """The time a ledger event recorded at drand round ``D`` carries."""
        return self.ledger.event_time(self.clock.time_of_drand(D))

    def marks(self, at: int) -> tuple[int, int, int]:
        """``(ledger_round, vesting_round, released_round)`` of a round final at ``at``."""
        return self.clock.final_marks(at)

    async def check(self, db: Database) -> list[str]:
        """What the database says the journal holds and it does not (empty: they agree): a
        journal replaced by an older copy or a fresh one would otherwise refuse every later
        finalize (rounds finalise in order) and wedge the feed. The daemon refuses to start."""
        problems = []
        for run_id, w in sorted((await db.read(last_synced)).items()):
            if not self.ledger.is_finalized(run_id, w):
                problems.append(
                    f"round {w} of run {run_id} was fed to the ledger, but {self.ledger.path}"
                    " does not hold it (a journal replaced or lost?)"
                )
        return problems

    async def sync(self, db: Database) -> list[FinalRow]:
        """Feed every unsynced final round, then every post-final outcome, to the ledger
        (module doc); returns the rounds."""
        rows = await db.read(unsynced_finals)
        for row in rows:
            reruns = await db.read(reruns_of_round, row.run_id, row.w)
            epochs = {hotkey: int(r["epoch"]) for hotkey, r in reruns.items()}
            at = self._apply(row, epochs)
            await db.write(mark_synced, row.run_id, row.w, at, self.marks(at))
        for run_id, w, hotkey, action, d in await db.read(unsynced_outcomes):
            at = self.event_time(d)
            if action == "vindicate":
                done = self.ledger.vindicate(run_id, w, hotkey, at)
            else:
                done = self.ledger.fault(run_id, w, hotkey, at)
            log.info("ledger: %s %s of run %s round %d (%s)", action, hotkey, run_id, w, done)
            await db.write(mark_outcome_synced, run_id, w, hotkey)
        return rows

    def _apply(self, row: FinalRow, rerun_epochs: dict[str, int]) -> int:
        """Feed one final round; ``rerun_epochs``: the chain epoch of each miner's rerun, where
        the coordinator counted a TRANSIENT's forgiveness (the ledger counts it there too)."""
        ledger, run_id, w = self.ledger, row.run_id, row.w
        done = ledger.finalized_at(run_id, w)
        if done is not None:
            return done
        at = ledger.event_time(row.at)
        for entry in row.entries:
            if not ledger.has_commit(run_id, w, entry.hotkey):
                ledger.commit(run_id, w, entry.hotkey, at)
        for entry in row.entries:
            if not ledger.has_verdict(run_id, w, entry.hotkey):
                ledger.verdict(
                    run_id,
                    w,
                    entry.hotkey,
                    entry.verdict.value,
                    entry.tokens,
                    entry.soft_score_ppm,
                    at,
                    rerun_epochs.get(entry.hotkey) if entry.verdict == "TRANSIENT" else None,
                )
        ledger.finalize(run_id, w, at)
        log.info(
            "ledger: run %s round %d final at %d (%d entries)", run_id, w, at, len(row.entries)
        )
        return at
