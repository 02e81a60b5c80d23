"""Dataset routes (:mod:`hypertrain.coordinator.flows.datasets`).

===========================================  ================================================
``PUT /v1/admin/runs/{id}/dataset``           admin: ``{manifest_sha256}`` ->
                                              ``{run_id, manifest_sha256, n_shards}``
``GET /v1/runs/{id}/dataset``                 public: ``{run_id, manifest_sha256, seq_len,
                                              samples_per_shard, n_samples, shard_sha256s}``
===========================================  ================================================
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from quart import Response
from quart_trio import QuartTrio

from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.flows.datasets import (
    DatasetRegistered,
    DatasetRequest,
    DatasetView,
    check_dataset_manifest,
    dataset_sha,
    dataset_target,
    dataset_view,
    register_dataset,
)
from hypertrain.coordinator.web.auth import require_admin
from hypertrain.coordinator.web.http import json_response, read_json
from hypertrain.coordinator.web.routedoc import Doc, add_route, errors
from hypertrain.datasets.manifest import DatasetManifest
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.errors import Conflict

if TYPE_CHECKING:
    from hypertrain.coordinator.web.app import AppParts

__all__ = ["register"]


def register(app: QuartTrio, ctx: Coordinator, parts: AppParts) -> None:
    """Add the dataset routes to ``app``."""

    async def put_dataset(run_id: str) -> Response:
        require_admin(ctx)
        sha = structure(DatasetRequest, await read_json(ctx)).manifest_sha256
        spec, registered = await ctx.db.read(dataset_target, run_id, sha)
        if not ctx.objects.exists(sha):
            raise Conflict(f"dataset manifest object {sha} is not in the object store")
        record = check_dataset_manifest(await ctx.objects.get(sha), spec, ctx.objects.exists)
        if not registered:
            await ctx.db.write(register_dataset, run_id, sha, int(ctx.wall.now()))
        registered_as = DatasetRegistered(
            run_id=run_id, manifest_sha256=sha, n_shards=record.n_shards
        )
        return json_response(unstructure(registered_as))

    async def get_dataset(run_id: str) -> Response:
        sha = await ctx.db.read(dataset_sha, run_id)
        record = structure(DatasetManifest, json.loads(await ctx.objects.get(sha)))
        return json_response(unstructure(dataset_view(run_id, sha, record)))

    add_route(
        app,
        "/v1/admin/runs/<run_id>/dataset",
        "datasets.put",
        put_dataset,
        "PUT",
        Doc(
            summary="register the run's dataset manifest (stored first as an object)",
            auth="admin",
            body=DatasetRequest,
            answers={200: DatasetRegistered},
            errors=errors(409, 422),
        ),
    )
    add_route(
        app,
        "/v1/runs/<run_id>/dataset",
        "datasets.get",
        get_dataset,
        "GET",
        Doc(summary="the run's registered dataset", answers={200: DatasetView}),
    )
