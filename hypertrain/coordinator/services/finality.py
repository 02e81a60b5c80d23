"""Finalising rounds: the daemon's aggregator seals Finalize, an external one posts it (spec 7).

:class:`Finality` is shared by the daemon's aggregator service (which calls
:meth:`Finality.finalize_due` on every pass: each run's oldest round that is not final, and the
next ones while they become final in turn) and by ``POST /v1/aggregator/runs/{id}/rounds/{w}/
finalize`` (:meth:`Finality.record`, for an external aggregator's K_coord Finalize). Both store
the Finalize in one write (:func:`~hypertrain.coordinator.flows.finalize.record_finalize`), then
feed the ledger (:class:`~hypertrain.coordinator.services.ledgerfeed.LedgerFeed`, when the
coordinator has one) and publish ``round_state`` ``{run_id, w, state: "FINAL", D, verdicts}``.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs

from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.flows.finalize import (
    FinalizePlan,
    next_to_finalize,
    plan_finalize,
    record_finalize,
)
from hypertrain.coordinator.services.ledgerclock import LedgerClock
from hypertrain.ledger import LedgerError
from hypertrain.protocol.envelope import NEVER, Envelope, seal
from hypertrain.protocol.errors import Conflict, ContractMismatch, NotFound
from hypertrain.protocol.messages import Finalize

__all__ = ["Finality"]

log = logging.getLogger(__name__)


@attrs.define(eq=False)
class Finality:
    """See the module docstring."""

    ctx: Coordinator
    _blocked: dict[tuple[str, int], str] = attrs.field(factory=dict, init=False)
    """The last reason logged per round, so a waiting round is logged once per reason."""

    def _time(self) -> tuple[int, tuple[int, int, int]]:
        ctx = self.ctx
        D = ctx.beacon.latest  # noqa: N806 (spec name)
        if ctx.ledger is not None:
            at = ctx.ledger.event_time(D)
            return at, ctx.ledger.marks(at)
        clock = LedgerClock.of(ctx.settings, ctx.chain)  # no ledger: the same clock
        at = clock.time_of_drand(D)
        return at, clock.final_marks(at)

    async def record(self, envelope: Envelope, body: Finalize) -> FinalizePlan:
        """Store a K_coord Finalize (checked against the server's plan), feed the ledger and
        publish; raises what :func:`record_finalize` raises."""
        ctx = self.ctx
        at, marks = self._time()
        plan, _row = await ctx.db.write(record_finalize, envelope, body, at, marks)
        log.info("run %s round %d final: %s", plan.run_id, plan.w, plan.verdicts_json())
        ctx.events.publish("round_state", self.event(plan))
        if ctx.ledger is not None:
            try:
                await ctx.ledger.sync(ctx.db)
            except LedgerError as e:  # the Finalize is stored: the feed tries again later
                log.error("ledger feed after round %d of run %s: %s", plan.w, plan.run_id, e)
        return plan

    def event(self, plan: FinalizePlan) -> dict[str, Any]:
        """The ``round_state`` event of a round just final."""
        return {
            "run_id": plan.run_id,
            "w": plan.w,
            "state": "FINAL",
            "D": self.ctx.beacon.latest,
            "verdicts": plan.verdicts_json(),
        }

    async def finalize_due(self) -> list[FinalizePlan]:
        """Seal and record every round that can be final now, oldest first per run."""
        ctx = self.ctx
        if ctx.ledger is not None:
            await ctx.ledger.sync(ctx.db)
        done = []
        for run_id, w in await ctx.db.read(next_to_finalize):
            while True:
                try:
                    plan = await ctx.db.read(plan_finalize, run_id, w)
                except NotFound:
                    break  # round w is not open yet
                except Conflict as e:
                    if self._blocked.get((run_id, w)) != e.detail:
                        self._blocked[(run_id, w)] = e.detail
                        log.info("%s", e.detail)
                    break
                self._blocked.pop((run_id, w), None)
                body = plan.body()
                envelope = seal(ctx.coord_keypair(), "Finalize", run_id, body, NEVER)
                try:
                    done.append(await self.record(envelope, body))
                except (Conflict, ContractMismatch) as e:
                    # finalised (or changed) meanwhile by a posted Finalize: look again next pass
                    log.info("round %d of run %s: %s", w, run_id, e.detail)
                    break
                w += 1
        return done
