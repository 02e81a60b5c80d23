"""The audit draw's live side: after each new D, draw the due rounds and publish the events.

:meth:`AuditDraws.on_beacon` is a beacon observer (the composition root appends it to
``ctx.beacon_observers``): it runs :func:`~hypertrain.coordinator.flows.auditdraw.draw_due` (one
write; a restarted daemon draws what it missed, since the draws are recorded) and publishes each
``audit`` event ``{change: "selected"}``.

An auditor replays from the round's published start state. Round 0's is the genesis state,
which no aggregation publishes: before the first draw of a run's round 0, the service stores
``pack_state(init_params(model))`` (the blob every miner derives, whose TH is the manifest's
``init_state_hash``) and publishes it as round 0's start state (one write), so the job can be
leased like any other.
"""

from __future__ import annotations

import logging
import sqlite3

import attrs

from hypertrain.beacon.ingest import latest_round
from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.flows.auditdraw import draw_due, due_draws
from hypertrain.coordinator.flows.lifecycle import parse_manifest
from hypertrain.coordinator.tables.miners import StateRow, get_round_state, insert_round_state
from hypertrain.coordinator.tables.runs import get_run
from hypertrain.protocol.errors import HypertrainError
from hypertrain.protocol.manifest import RunManifest
from hypertrain.store.catalog import record_object
from hypertrain.store.keys import ObjectInfo
from hypertrain.trainer.params import init_params
from hypertrain.trainer.state import pack_state
from nurseries import RunSync, run_inline

__all__ = ["AuditDraws"]

log = logging.getLogger(__name__)


def _genesis_due(conn: sqlite3.Connection) -> list[tuple[str, RunManifest]]:
    """Runs whose round 0 is due for its draw and has no published start state."""
    out = []
    for row in due_draws(conn, latest_round(conn)):
        if row.w == 0 and get_round_state(conn, row.run_id, 0) is None:
            out.append((row.run_id, parse_manifest(get_run(conn, row.run_id).manifest_envelope)))
    return out


def _publish_genesis(conn: sqlite3.Connection, run_id: str, info: ObjectInfo, now: int) -> None:
    record_object(conn, info, now)
    if get_round_state(conn, run_id, 0) is None:
        insert_round_state(conn, run_id, 0, StateRow(info.sha256, None), latest_round(conn))


@attrs.define(eq=False)
class AuditDraws:
    """See the module docstring."""

    ctx: Coordinator
    run_sync: RunSync = run_inline

    async def on_beacon(self, D: int) -> None:  # noqa: N803 (spec name)
        """Beacon observer: publish round 0's start state where needed, then draw."""
        ctx = self.ctx
        for run_id, manifest in await ctx.db.read(_genesis_due):
            blob = await self.run_sync(lambda m=manifest: pack_state(init_params(m.model)))
            info = await ctx.objects.put_bytes(blob)
            await ctx.db.write(_publish_genesis, run_id, info, int(ctx.wall.now()))
        try:
            coord = ctx.coord_keypair()
        except HypertrainError as e:
            log.warning("audit draw at D=%d skipped: %s", D, e)
            return
        for event in await ctx.db.write(draw_due, coord):
            log.info(
                "run %s round %d: %s selected for a %s audit",
                event["run_id"],
                event["w"],
                event["target"],
                event["mode"],
            )
            ctx.events.publish("audit", event)
