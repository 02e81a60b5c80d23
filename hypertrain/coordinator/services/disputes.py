"""The dispute deadlines' live side: after each new D, a party silent past its deadline loses.

:meth:`DisputeClock.on_beacon` is a beacon observer (the composition root subscribes it with the
other parts' observers): it runs :func:`~hypertrain.coordinator.flows.disputes.expire_disputes`
(one write; a restarted daemon expires what passed while it was down, since the deadline is a
drand round stored with the dispute) and publishes each ``dispute`` event ``{change:
"resolved", cause: "timeout"}``. Without K_coord (the loser's Forfeit is sealed with it) the
pass is skipped and logged; the next beacon round tries again.
"""

from __future__ import annotations

import logging

import attrs

from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.flows.disputes import expire_disputes
from hypertrain.protocol.errors import HypertrainError

__all__ = ["DisputeClock"]

log = logging.getLogger(__name__)


@attrs.define(eq=False)
class DisputeClock:
    """See the module docstring."""

    ctx: Coordinator

    async def on_beacon(self, D: int) -> None:  # noqa: N803 (spec name)
        """Beacon observer: resolve the disputes whose stage deadline passed at ``D``."""
        ctx = self.ctx
        try:
            coord = ctx.coord_keypair()
        except HypertrainError as e:
            log.warning("dispute deadlines at D=%d skipped: %s", D, e)
            return
        for event in await ctx.db.write(expire_disputes, coord):
            log.info(
                "run %s round %d: dispute %s lost by the %s (timeout)",
                event["run_id"],
                event["w"],
                event["dispute_id"],
                event["loser_role"],
            )
            ctx.events.publish("dispute", event)
