"""Checkpoint routes (issue 16; spec 7 "Checkpoints"): public, no auth, each one read.

=======================================================  ==========================================
``GET /v1/runs/{id}/checkpoints``                        ``{run_id, checkpoints: [{w, rounds,
                                                         status, theta_hash, files: {name:
                                                         sha256}, written_round}]}`` by ``w``
``GET /v1/runs/{id}/checkpoints/{w}/{file}``             the file's bytes (``MANIFEST.json``,
                                                         ``lineage.json``, ``model.safetensors``)
``GET /v1/runs/{id}/checkpoints/{w}/objects/{sha256}``   an object a replay of the checkpoint
                                                         reads: a tape's ``prev_state`` or
                                                         ``out_state``, or a merged delta
=======================================================  ==========================================

404 for an unknown run, checkpoint, file name or an object the checkpoint does not name (the
object store is not open to the public: only what a checkpoint's replay needs is served); 400
for a round outside ``0..2^53-1`` (the ``u53`` path converter) or a key that is not 64
lowercase hex. Bodies are streamed from the object store, which verifies each hash before the
first chunk and again at the end.
``hypertrain checkpoint fetch`` and ``hypertrain verify-checkpoint --replay --api`` read these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quart import Response
from quart_trio import QuartTrio

from hypertrain.aggregator.checkpoint import LINEAGE_FILE, MANIFEST_FILE
from hypertrain.aggregator.checkpoint_listing import Listing
from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.flows.checkpoints import (
    checkpoint_file_key,
    checkpoint_listing,
    checkpoint_object,
)
from hypertrain.coordinator.web.http import JSON_CONTENT_TYPE, json_response, object_response
from hypertrain.coordinator.web.routedoc import OCTETS, Doc, Media, add_route
from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.validators import HEX64_RE, hex64, pattern

if TYPE_CHECKING:
    from hypertrain.coordinator.web.app import AppParts

__all__ = ["register"]

_JSON_FILES = frozenset({MANIFEST_FILE, LINEAGE_FILE})


def register(app: QuartTrio, ctx: Coordinator, parts: AppParts) -> None:
    """Add the checkpoint routes to ``app``."""

    async def get_list(run_id: str) -> Response:
        rows = await ctx.db.read(checkpoint_listing, run_id)
        listing = Listing(run_id, tuple(row.entry() for row in rows))
        return json_response(unstructure(listing))

    async def get_file(run_id: str, w: int, name: str) -> Response:
        key = await ctx.db.read(checkpoint_file_key, run_id, w, name)
        response = object_response(ctx.objects, key)
        if name in _JSON_FILES:
            response.content_type = "application/json"
        return response

    async def get_object(run_id: str, w: int, sha256: str) -> Response:
        hex64.check_param("sha256", sha256)
        key = await ctx.db.read(checkpoint_object, run_id, w, sha256)
        return object_response(ctx.objects, key)

    base = "/v1/runs/<run_id>/checkpoints"
    add_route(
        app,
        base,
        "checkpoints.list",
        get_list,
        "GET",
        Doc(summary="the run's published checkpoints", answers={200: Listing}),
    )
    add_route(
        app,
        f"{base}/<u53:w>/<name>",
        "checkpoints.file",
        get_file,
        "GET",
        Doc(
            summary="a file of round w's checkpoint (its manifest and lineage are JSON)",
            answers={200: (Media(OCTETS), Media(JSON_CONTENT_TYPE))},
        ),
    )
    add_route(
        app,
        f"{base}/<u53:w>/objects/<sha256>",
        "checkpoints.object",
        get_object,
        "GET",
        Doc(
            summary="an object a replay of round w's checkpoint reads",
            path={"sha256": pattern(HEX64_RE)},
            answers={200: Media(OCTETS)},
        ),
    )
