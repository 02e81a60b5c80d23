"""A fake coordinator for the auditor tests: the worker routes of the audit wire contract as an
``httpx.MockTransport``, recording every call with the Trio time it arrived at.

``jobs`` are handed out in order by ``POST /v1/worker/lease`` (204 when none is left);
``disputes`` (DisputeViews) are listed by ``GET /v1/runs/{id}/disputes`` with its filters,
``job_views`` answer ``GET /v1/worker/jobs/{id}``, and Bisects and Resolutions are accepted;
``statuses`` forces answers: ``{"GET /v1/objects": [503, 503]}`` answers the first two object
GETs with 503 (a route key is ``METHOD /path-prefix``; an entry of ``None`` answers normally).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs
import httpx
import trio

from hypertrain.protocol.envelope import seal
from hypertrain.protocol.manifest import RunManifest
from tests.auditor.world import OWNER, Built, World, dataset_objects

TOKEN = "worker-token-1"
API = "http://127.0.0.1:8000"


@attrs.frozen
class Call:
    at: float
    method: str
    path: str
    query: str
    body: Any


@attrs.define
class FakeCoordinator:
    manifest: RunManifest
    objects: dict[str, bytes] = attrs.Factory(dict)
    jobs: list[dict[str, Any]] = attrs.Factory(list)
    serves_answer: dict[str, Any] | None = None
    statuses: dict[str, list[int | None]] = attrs.Factory(dict)
    disputes: list[dict[str, Any]] = attrs.Factory(list)
    job_views: dict[str, dict[str, Any]] = attrs.Factory(dict)
    calls: list[Call] = attrs.Factory(list)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def paths(self, method: str, prefix: str = "") -> list[Call]:
        return [c for c in self.calls if c.method == method and c.path.startswith(prefix)]

    def _forced(self, method: str, path: str) -> int | None:
        for key, queue in self.statuses.items():
            m, _, prefix = key.partition(" ")
            if m == method and path.startswith(prefix) and queue:
                return queue.pop(0)
        return None

    async def handle(self, request: httpx.Request) -> httpx.Response:
        await trio.lowlevel.checkpoint()
        method, path = request.method, request.url.path
        body = json.loads(request.content) if request.content else None
        self.calls.append(Call(trio.current_time(), method, path, request.url.query.decode(), body))
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return httpx.Response(401, json={"detail": "bad token"})
        forced = self._forced(method, path)
        if forced is not None:
            return httpx.Response(forced, json={"detail": f"forced {forced}"})
        return self._route(method, path, request.url.params, body)

    def _disputes(self, params: httpx.QueryParams) -> list[dict[str, Any]]:
        out = []
        for view in self.disputes:
            if "state" in params and view["state"] != params["state"]:
                continue
            if "party" in params and params["party"] not in (view["miner"], view["auditor"]):
                continue
            if params.get("referee") == "1" and (view["state"], view["referee"] is None) != (
                "open",
                False,
            ):
                continue
            out.append(view)
        return out

    def _route(
        self, method: str, path: str, params: httpx.QueryParams, body: Any
    ) -> httpx.Response:
        run_id = self.manifest.run_id()
        if method == "GET" and path == f"/v1/runs/{run_id}/disputes":
            return httpx.Response(200, json={"run_id": run_id, "disputes": self._disputes(params)})
        if method == "POST" and path == f"/v1/runs/{run_id}/bisect":
            dispute_id = body["body"]["dispute_id"]
            return httpx.Response(200, json={"dispute_id": dispute_id, "seq": 1, "state": "open",
                                             "stage": None, "referee": None})  # fmt: skip
        if method == "POST" and path == f"/v1/runs/{run_id}/resolution":
            answer = {k: body["body"][k] for k in ("dispute_id", "loser")}
            return httpx.Response(200, json={**answer, "state": "resolved"})
        if method == "GET" and path == f"/v1/runs/{run_id}":
            envelope = seal(OWNER, "RunManifest", run_id, self.manifest, 2**40)
            return httpx.Response(200, json={"run_id": run_id, "manifest_envelope":
                                             envelope.to_json()})  # fmt: skip
        if method == "POST" and path == "/v1/worker/lease":
            if not self.jobs:
                return httpx.Response(204)
            return httpx.Response(200, json=self.jobs.pop(0))
        if method == "GET" and path.startswith("/v1/objects/"):
            data = self.objects.get(path.rsplit("/", 1)[-1])
            if data is None:
                return httpx.Response(404, json={"detail": "unknown object"})
            return httpx.Response(200, content=data)
        if path.startswith("/v1/worker/jobs/"):
            job_id, _, action = path.removeprefix("/v1/worker/jobs/").partition("/")
            return self._job_route(method, job_id, action, body)
        return httpx.Response(404, json={"detail": f"no route {method} {path}"})

    def _job_route(self, method: str, job_id: str, action: str, body: Any) -> httpx.Response:
        if method == "GET" and action == "":
            if job_id not in self.job_views:
                return httpx.Response(404, json={"detail": "no such job"})
            return httpx.Response(200, json=self.job_views[job_id])
        if method == "POST" and action == "heartbeat":
            return httpx.Response(200, json={"id": job_id, "lease_expires_round": 1000})
        if method == "GET" and action == "serves":
            return httpx.Response(200, json=self.serves_answer or {"now_round": 1, "serves": []})
        if method == "POST" and action == "complete":
            result = body["verdict"]["body"]["result"]
            return httpx.Response(200, json={"id": job_id, "state": "done", "result": result})
        if method == "POST" and action == "fail":
            state = "queued" if body.get("retry", True) else "failed"
            return httpx.Response(200, json={"id": job_id, "state": state})
        return httpx.Response(404, json={"detail": "unknown job route"})


def serves_answer(now_round: int, serves: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``GET .../serves`` answer of ``serves`` (envelopes) at ``now_round``."""
    return {
        "now_round": now_round,
        "serves": [
            {"serve": dict(s), "blob_sha256": s["body"]["uri"].rsplit("/", 1)[-1]} for s in serves
        ],
    }


def coordinator(world: World, *jobs: Built) -> FakeCoordinator:
    """A fake coordinator of ``world``'s run serving its dataset and ``jobs`` (with their blobs)."""
    fake = FakeCoordinator(world.manifest)
    fake.objects.update(dataset_objects(world.data_dir))
    for built in jobs:
        fake.jobs.append(built.job)
        fake.objects.update(built.blobs)
    return fake
