"""``GET /metrics`` of the real app, in virtual time: requests of several routes (the lease
path served in front of Quart, a 404 and a 400 among them) show up under their route
templates, the compute outcomes and a held poll are counted, ``serve_metrics=False`` leaves the
path to the app (404) and :func:`metrics_app` serves it alone, and access lines written as JSON
parse back with their route and status."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing
from prometheus_client.parser import text_string_to_metric_families

from hypertrain.compute import enqueue_step
from hypertrain.coordinator.computehub import WORK
from hypertrain.coordinator.metrics import CONTENT_TYPE
from hypertrain.coordinator.web.app import AppParts, create_app
from hypertrain.coordinator.web.instrument import metrics_app
from hypertrain.daemon.logs import JsonFormatter
from hypertrain.scoring.registry import DELTA_LOSS
from nurseries.testing import open_mounted_client
from tests.coordinator.harness import API, Harness, open_harness

LEASE = "/v1/compute/jobs/lease"
RESULT = "/v1/compute/jobs/<copy_id>/result"
ROUND = "/v1/runs/<run_id>/rounds/<u53:w>"
LOSS = {"loss": "40a00000", "fingerprint": "ab" * 32, "wallMs": 12}

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(client: httpx.AsyncClient, path: str = "/metrics") -> Samples:
    """The samples of ``path``, once every request before it has ended (a request is counted
    when its app call returns, just after its client has the whole answer)."""
    await trio.testing.wait_all_tasks_blocked()
    r = await client.get(path)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == CONTENT_TYPE
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def requests(found: Samples, method: str, route: str, status: str) -> float | None:
    labels = {"method": method, "route": route, "status": status}
    return found.get(("hypertrain_http_requests_total", frozenset(labels.items())))


def outcome(found: Samples, name: str, value: str) -> float | None:
    return found.get((name, frozenset({("outcome", value)})))


async def _node(client: httpx.AsyncClient) -> dict[str, str]:
    body = {"key": None, "capabilities": ["delta-loss"], "hardware": "cpu"}
    r = await client.post("/v1/compute/register", json=body)
    assert r.status_code == 200, r.text
    return {"Authorization": f"Bearer {r.json()['key']}"}


async def _lease(client: httpx.AsyncClient, auth: dict[str, str], wait_ms: int) -> Any:
    body = {"capabilities": ["delta-loss"], "hardware": "cpu", "wait_ms": wait_ms}
    r = await client.post(LEASE, json=body, headers=auth)
    assert r.status_code == 200, r.text
    return r.json()["job"]


async def _enqueue(h: Harness) -> None:
    """One delta-loss step (two copies) over small stand-in inputs, as the daemon queues it."""
    ctx = h.ctx
    inputs = []
    for name in DELTA_LOSS.inputs:
        info = await ctx.objects.put_bytes(f"step:{name}".encode())
        inputs.append({"name": name, "sha256": info.sha256, "size": info.size})
    step = partial(
        enqueue_step,
        challenge_id=DELTA_LOSS.id,
        subject={"label": "step"},
        step="public",
        inputs=inputs,
        now_ms=int(ctx.wall.now() * 1000),
        wait_ms=ctx.compute.settings.wait_ms,
        settings=ctx.compute.settings,
    )
    await ctx.compute.write(step)


async def test_requests_count_under_their_route_templates_with_the_compute_outcomes(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_harness(tmp_path) as h:
        c = h.client
        assert (await c.get("/health")).status_code == 200
        assert (await c.get("/health")).status_code == 200
        assert (await c.get("/v1/runs/ab12")).status_code == 404  # a route: no such run
        assert (await c.get("/no/such/path")).status_code == 404
        assert (await c.get("/v1/runs/ab12/rounds/soon")).status_code == 400
        assert (await c.post(LEASE, json={})).status_code == 401  # the lease path, in front
        first, second = await _node(c), await _node(c)
        await _enqueue(h)
        copies = [await _lease(c, first, 0), await _lease(c, second, 0)]
        for auth, copy in zip((first, second), copies, strict=True):
            body = {"lease": copy["lease"], "ok": True, "result": LOSS}
            r = await c.post(f"/v1/compute/jobs/{copy['id']}/result", json=body, headers=auth)
            assert r.status_code == 200, r.text
        assert await _lease(c, first, 0) is None

        async with trio.open_nursery() as nursery:
            nursery.start_soon(_lease, c, second, 4000)  # held: nothing to lease
            await trio.testing.wait_all_tasks_blocked()
            assert h.ctx.compute.waiter.waiting(WORK) == 1
            held = await scrape(c)
        assert held[("hypertrain_long_polls_held", frozenset())] == 1
        found = await scrape(c)

    assert requests(found, "GET", "/health", "200") == 2
    assert requests(found, "GET", "/v1/runs/<run_id>", "404") == 1
    assert requests(found, "GET", "unmatched", "404") == 1
    assert requests(found, "GET", ROUND, "400") == 1
    assert requests(found, "POST", LEASE, "401") == 1
    assert requests(found, "POST", LEASE, "200") == 4
    assert requests(found, "POST", RESULT, "200") == 2
    assert requests(found, "POST", "/v1/compute/register", "200") == 2
    assert requests(found, "GET", "/metrics", "200") == 1  # the first scrape
    no_raw_paths = [labels for _, labels in found if ("route", "/no/such/path") in labels]
    assert no_raw_paths == []
    lease_route = frozenset({("method", "POST"), ("route", LEASE)})
    assert found[("hypertrain_http_request_duration_seconds_count", lease_route)] == 5
    # The held poll waited its 4 virtual seconds: its latency is in the (2.5, 5] bucket.
    bucket = "hypertrain_http_request_duration_seconds_bucket"
    assert found[(bucket, lease_route | {("le", "2.5")})] == 4
    assert found[(bucket, lease_route | {("le", "5.0")})] == 5
    assert outcome(found, "hypertrain_compute_leases_total", "granted") == 2
    assert outcome(found, "hypertrain_compute_leases_total", "empty") == 2
    assert outcome(found, "hypertrain_compute_results_total", "counted") == 2
    assert outcome(found, "hypertrain_scoring_steps_total", "agreement") == 1
    assert found[("hypertrain_long_polls_held", frozenset())] == 0


async def test_with_a_listener_of_its_own_the_apps_metrics_path_is_a_404(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_harness(tmp_path) as h:
        parts = AppParts.build(h.ctx)
        app = create_app(h.ctx, parts, serve_metrics=False)
        alone = metrics_app(parts.metrics)
        async with open_mounted_client({API: app, "http://metrics": alone}) as client:
            assert (await client.get(f"{API}/health")).status_code == 200
            r = await client.get(f"{API}/metrics")
            assert (r.status_code, r.json()) == (404, {"detail": "not found: GET /metrics"})
            found = await scrape(client, "http://metrics/metrics")
            assert (await client.get("http://metrics/other")).status_code == 404
            r = await client.post("http://metrics/metrics")
            assert (r.status_code, r.headers["allow"]) == (405, "GET, HEAD")
            head = await client.head("http://metrics/metrics")
            assert (head.status_code, head.content) == (200, b"")
    assert requests(found, "GET", "/health", "200") == 1
    assert requests(found, "GET", "unmatched", "404") == 1


@pytest.fixture
def access_lines() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("tests.access")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    yield log, out
    log.removeHandler(handler)


async def test_access_lines_in_json_carry_the_route_and_status(
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    access_lines: tuple[logging.Logger, io.StringIO],
) -> None:
    log, out = access_lines
    async with open_harness(tmp_path) as h:
        app = create_app(h.ctx, AppParts.build(h.ctx), access_log=log)
        async with open_mounted_client({API: app}, base_url=API) as client:
            await client.get("/health")
            await client.get("/v1/runs/ab12/rounds/soon", params={"lease": "secret"})
            await client.post(LEASE, json={})
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    shown = [(x["method"], x["path"], x["route"], x["status"]) for x in lines]
    assert shown == [
        ("GET", "/health", "/health", 200),
        ("GET", "/v1/runs/ab12/rounds/soon", ROUND, 400),
        ("POST", LEASE, LEASE, 401),
    ]
    assert {x["logger"] for x in lines} == {"tests.access"}
    assert {x["level"] for x in lines} == {"INFO"}
    assert lines[0]["message"] == "GET /health 200 0.0ms route=/health"
    assert all(isinstance(x["duration_ms"], float) and x["time"] for x in lines)
    assert "secret" not in out.getvalue()  # the query string is never logged
