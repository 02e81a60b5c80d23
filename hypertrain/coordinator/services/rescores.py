"""The sampled trusted re-scores' beacon observer (issue 19 item 3).

:meth:`RescoreDraws.on_beacon` runs after each new D (the composition root subscribes it with
the other observers, :meth:`~hypertrain.coordinator.web.app.AppParts.beacon_observers`): one
write through the compute hub, :func:`~hypertrain.coordinator.flows.rescores.draw_rescores`
with the round the wall clock has made due, so the steps settled since the last round get a
draw round whose randomness does not exist yet, and the steps whose draw round has come are
decided. Each ``audit`` event ``{change: "drawn"}`` is published and wakes the fallback pool,
which re-scores the step (:class:`~hypertrain.coordinator.services.fallback.FallbackPool`).
"""

from __future__ import annotations

import logging
from functools import partial

import attrs

from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.flows.rescores import draw_rescores

__all__ = ["RescoreDraws"]

log = logging.getLogger(__name__)


@attrs.define(eq=False)
class RescoreDraws:
    """See the module docstring."""

    ctx: Coordinator

    async def on_beacon(self, D: int) -> None:  # noqa: N803 (spec name)
        """Beacon observer: fix and decide the re-score draws (module doc)."""
        hub = self.ctx.compute
        now_ms = int(self.ctx.wall.now() * 1000)
        due = self.ctx.beacon.now_round()
        draw = partial(draw_rescores, settings=hub.settings)
        for kind, payload in await hub.write(draw, due, now_ms):
            if kind == "audit":
                log.info("D=%d draws step %s for a trusted re-score", D, payload["job"])
