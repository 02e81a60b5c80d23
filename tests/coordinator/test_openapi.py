"""``GET /openapi.json`` (issue 20 item 4): the document is the app.

- its paths and methods are exactly the app's URL map (every rule, the lease path's two routes
  included; ``HEAD``/``OPTIONS`` are werkzeug's own), and every operation is declared;
- every answer of a short in-process flow (a beacon, a run created, configured, rostered and
  unpaused, honeypots, a node registered and polling, objects, refusals of every kind) is
  valid against the schema the document gives for its operation and status, and where that is
  an attrs class the answer round-trips through the converter as that class; the classes seen
  include every one of :data:`EXERCISED`.
"""

from __future__ import annotations

import hashlib
import json
import types
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, get_args

import attrs
import httpx
import jsonschema_rs
import trio
from werkzeug.routing import Map

from hypertrain.beacon.chain import DrandInfo
from hypertrain.beacon.ingest import IngestAnswer, NoRound
from hypertrain.compute.status import ComputeStatus
from hypertrain.compute.wire import LeaseAnswer, RegisterAnswer
from hypertrain.coordinator.flows.aggregator import RoundInputs
from hypertrain.coordinator.flows.auditstats import AuditorStats
from hypertrain.coordinator.flows.disputewire import DisputesList
from hypertrain.coordinator.flows.honeypots import HoneypotCommitted, HoneypotVerified
from hypertrain.coordinator.flows.leaderboard import LeaderboardPage
from hypertrain.coordinator.flows.lifecycle import (
    ConfigAnswer,
    PausedAnswer,
    RosterRemoved,
    RunCreated,
)
from hypertrain.coordinator.flows.replies import (
    Accepted,
    CommitRefused,
    Committed,
    HandedBack,
    LeaseExtended,
    LeavesTaken,
    StateStored,
    Uploaded,
    UploadGrant,
)
from hypertrain.coordinator.flows.runview import RunsList
from hypertrain.coordinator.flows.system import Healthy, VersionAnswer
from hypertrain.coordinator.flows.viewwire import RosterView, RoundView, RunView
from hypertrain.coordinator.tables.runs import RosterRow
from hypertrain.coordinator.web.ledger import ClawbackAnswer
from hypertrain.coordinator.web.openapi import OPENAPI_PATH, openapi_path_of
from hypertrain.coordinator.web.routedoc import Doc, Media, docs_of
from hypertrain.protocol.auditjob import AuditJob, JobServes, StoredJob
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.errors import ErrorBody, SchemaError
from hypertrain.protocol.hashes import honeypot_commit
from hypertrain.store.keys import ObjectInfo
from tests.coordinator.audit_support import uploaded_round
from tests.coordinator.harness import (
    ADMIN_TOKEN,
    WORKER_TOKEN,
    CapturedApp,
    Harness,
    admin_headers,
)
from tests.coordinator.lifecycle_support import MINERS, admin, open_runs, push, ready_run, unpause
from tests.coordinator.miner_support import KEYS

EXERCISED: frozenset[type] = frozenset(
    {
        VersionAnswer,
        Healthy,
        IngestAnswer,
        NoRound,
        DrandInfo,
        RunCreated,
        ConfigAnswer,
        RosterRow,
        RosterRemoved,
        PausedAnswer,
        HoneypotCommitted,
        HoneypotVerified,
        RunsList,
        RunView,
        RosterView,
        RoundView,
        ComputeStatus,
        LeaderboardPage,
        AuditorStats,
        DisputesList,
        RegisterAnswer,
        LeaseAnswer,
        ObjectInfo,
        ClawbackAnswer,
        ErrorBody,
    }
)
"""The answer classes the flow below must meet (the others need a full round: see the
report of issue 20)."""
_AUTOMATIC = frozenset({"HEAD", "OPTIONS"})


def _operations_of(url_map: Map) -> set[tuple[str, str]]:
    return {
        (openapi_path_of(rule.rule), method.lower())
        for rule in url_map.iter_rules()
        for method in (rule.methods or set()) - _AUTOMATIC
    }


async def _document(h: Harness) -> dict[str, Any]:
    r = await h.client.get(OPENAPI_PATH)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    doc: dict[str, Any] = r.json()
    return doc


async def test_the_document_lists_every_rule_of_the_url_map_and_declares_each(
    tmp_path: Path,
) -> None:
    captured = CapturedApp()
    async with open_runs(tmp_path, extra_routes=captured) as h:
        doc = await _document(h)
        slug = h.ctx.settings.slug
    assert captured.app is not None
    weights = doc["paths"]["/internal/v1/get_weights"]["get"]
    assert weights["security"] == [{"InternalToken": []}]
    slug_header = {p["name"]: p for p in weights["parameters"]}["X-Platform-Challenge-Slug"]
    assert slug_header["schema"] == {"enum": [slug]}  # a client can send the one accepted
    documented = {(path, method) for path, item in doc["paths"].items() for method in item}
    assert documented == _operations_of(captured.app.url_map)
    assert ("/v1/compute/jobs/lease", "post") in documented  # served in front of Quart
    assert ("/v1/compute/jobs/{copy_id}/result", "post") in documented
    operations = [op for item in doc["paths"].values() for op in item.values()]
    assert [op["operationId"] for op in operations if op.get("x-undocumented")] == []
    ids = [op["operationId"] for op in operations]
    assert len(ids) == len(set(ids))
    assert doc["openapi"] == "3.1.0"
    for op in operations:
        assert any(code.startswith("2") for code in op["responses"]), op["operationId"]
    untyped = [
        (op["operationId"], code)
        for op in operations
        for code, answer in op["responses"].items()
        if answer.get("content", {}).get("application/json", {}).get("schema") == {"type": "object"}
    ]
    # every JSON answer names its class but this document and a checkpoint's stored files
    assert sorted(untyped) == [("checkpoints.file", "200"), ("openapi.document", "200")]


async def test_a_route_added_without_a_declaration_is_marked_undocumented(
    tmp_path: Path,
) -> None:
    async def stray() -> str:
        return "stray"

    def add_stray(app: Any, _ctx: object) -> None:
        app.add_url_rule("/stray", "tests.stray", stray, methods=["GET"])

    async with open_runs(tmp_path, extra_routes=add_stray) as h:
        doc = await _document(h)
    assert doc["paths"]["/stray"]["get"]["x-undocumented"] is True


class _Recorder:
    """Every answer the harness client got: (method, path, status, content type, body)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, int, str, bytes]] = []
        self.requests: list[httpx.Request] = []

    async def __call__(self, response: httpx.Response) -> None:
        body = await response.aread()
        request = response.request
        self.requests.append(request)
        self.seen.append(
            (
                request.method,
                request.url.path,
                response.status_code,
                response.headers.get("content-type", ""),
                body,
            )
        )


async def _flow(h: Harness) -> None:
    """A short flow touching the routes whose answers :data:`EXERCISED` names."""
    client = h.client
    await client.get("/version")
    await client.get("/health")
    await client.get("/v1/beacon/info")
    await client.get("/v1/beacon/latest")  # before the first round: {"round": 0}
    await push(h, 1, 2, 3)
    await client.get("/v1/beacon/latest")
    repeat = unstructure(h.chain.round(1))
    await client.post("/v1/admin/beacon", json=repeat, headers=admin_headers())
    run_id = await ready_run(h, MINERS[:3])
    salt = bytes(range(32))
    members = [(MINERS[2], "noise")]
    commitment = honeypot_commit(members, salt)
    await admin(h, "PUT", f"/v1/admin/runs/{run_id}/honeypot", {"commitment": commitment})
    reveal = {
        "commitment": commitment,
        "members": [{"hotkey": k, "mode": m} for k, m in members],
        "salt": salt.hex(),
    }
    await admin(h, "POST", f"/v1/admin/runs/{run_id}/honeypot/reveal", reveal)
    await admin(h, "DELETE", f"/v1/admin/runs/{run_id}/roster/{MINERS[2]}")
    assert (await unpause(h, run_id)).status_code == 200
    await client.get("/v1/runs")
    await client.get(f"/v1/runs/{run_id}")
    await client.get(f"/v1/runs/{run_id}/rounds/0")
    await client.get(f"/v1/runs/{run_id}/roster", params={"limit": "1"})
    minted = await client.post("/v1/compute/register", json={"handle": "n1"})
    key = minted.json()["key"]
    node = {"Authorization": f"Bearer {key}"}
    await client.post("/v1/compute/jobs/lease", json={"wait_ms": 0}, headers=node)
    await client.get("/v1/compute/status")
    await client.get("/v1/compute/leaderboard", params={"limit": "2"})
    await client.get(f"/run/{run_id}/auditor-stats")
    await client.get(f"/v1/runs/{run_id}/disputes")
    blob = b"an object"
    sha = hashlib.sha256(blob).hexdigest()
    await admin(h, "PUT", f"/v1/aggregator/objects/{sha}", content=blob)
    await client.get(f"/v1/objects/{sha}", headers=admin_headers(WORKER_TOKEN))
    clawback = {"hotkey": MINERS[0], "units": 5}
    await admin(h, "POST", f"/v1/admin/runs/{run_id}/clawback", clawback)
    # refusals: 400, 401, 404, 405, 409, 413, 422
    await admin(h, "PUT", f"/v1/admin/runs/{run_id}/config", {"train_rounds": "ten"})
    await client.post("/v1/admin/beacon", json={})
    await client.get("/v1/runs/" + "0" * 64)
    await client.delete("/v1/runs")
    await admin(
        h, "PUT", f"/v1/admin/runs/{run_id}/config", {"train_rounds": 3, "final_after_upload": 1}
    )
    await client.post(f"/v1/runs/{run_id}/accept", content=b"x" * (2 << 20))
    await client.get("/v1/worker/jobs/x", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})


def _answers_of(doc: dict[str, Any], op: dict[str, Any], status: int) -> dict[str, Any]:
    responses = op["responses"]
    assert str(status) in responses, (op["operationId"], status)
    content: dict[str, Any] = responses[str(status)].get("content", {})
    return content


def _matches(app: Any, method: str, path: str) -> str:
    adapter = app.url_map.bind("coordinator.test")
    endpoint, _ = adapter.match(path, method=method)
    return str(endpoint)


def _answer_types(doc: Doc, status: int) -> tuple[object, ...]:
    """The types an answer of ``status`` may be (a union's members; none for a media type)."""
    answer = doc.answers.get(status, doc.errors.get(status))
    if answer is None:
        return (ErrorBody,)
    if isinstance(answer, Media | tuple):
        return ()
    return get_args(answer) if isinstance(answer, types.UnionType) else (answer,)


def _round_trips(cls: type, value: object) -> bool:
    try:
        return unstructure(structure(cls, value)) == value
    except SchemaError:
        return False


def _check_answers(app: Any, doc: dict[str, Any], recorder: _Recorder) -> set[type]:
    """Check every recorded answer against its operation's documented answer (module doc);
    the attrs classes it round-tripped through."""
    declared = docs_of(app)
    seen: set[type] = set()
    checked = 0
    for method, path, status, content_type, body in recorder.seen:
        if status == 405:
            assert json.loads(body) == {"detail": f"method {method} not allowed on {path}"}
            continue
        endpoint = _matches(app, method, path)
        rule = next(r for r in app.url_map.iter_rules() if r.endpoint == endpoint)
        op = doc["paths"][openapi_path_of(rule.rule)][method.lower()]
        content = _answers_of(doc, op, status)
        if not content:
            assert body == b"", (endpoint, status)
            continue
        assert content_type.split(";")[0] in content, (endpoint, status, content_type)
        if not content_type.startswith("application/json"):
            continue
        value = json.loads(body)
        schema = {**content["application/json"]["schema"], "components": doc["components"]}
        errors = [e.message for e in jsonschema_rs.validator_for(schema).iter_errors(value)]
        assert errors == [], (endpoint, status, value)
        checked += 1
        classes = [c for c in _answer_types(declared[endpoint], status) if attrs.has(c)]
        matched = [c for c in classes if isinstance(c, type) and _round_trips(c, value)]
        assert classes == [] or len(matched) == 1, (endpoint, status, value)
        seen.update(matched)
    print(f"{checked} JSON answers checked; classes seen: {sorted(c.__name__ for c in seen)}")
    return seen


async def _answers_checked(
    tmp_path: Path, flow: Callable[[Harness, _Recorder], Awaitable[None]]
) -> set[type]:
    """Run ``flow`` over a harness, then check every answer it got (:func:`_check_answers`)."""
    captured = CapturedApp()
    recorder = _Recorder()
    async with open_runs(tmp_path, extra_routes=captured) as h:
        doc = await _document(h)
        h.client.event_hooks["response"].append(recorder)
        await flow(h, recorder)
    assert captured.app is not None
    return _check_answers(captured.app, doc, recorder)


async def test_every_answer_of_a_flow_matches_its_documented_schema_and_class(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    seen = await _answers_checked(tmp_path, lambda h, _: _flow(h))
    assert seen >= EXERCISED, sorted(c.__name__ for c in EXERCISED - seen)


async def _round_and_audit(h: Harness, recorder: _Recorder) -> None:
    """A round uploaded, its Commit re-posted, a state served, a job leased, beaten, handed back."""
    audit = await uploaded_round(h)
    taken = next(r for r in recorder.requests if r.url.path.endswith("/commit"))
    again = await h.client.post(taken.url.path, content=taken.content)  # its receipt, 409
    assert again.status_code == 409, again.text
    await audit.serve_all(KEYS[0])
    worker = admin_headers(WORKER_TOKEN)
    job = (await h.client.post("/v1/worker/lease", headers=worker)).json()
    jobs = f"/v1/worker/jobs/{job['id']}"
    assert (await h.client.get(jobs, headers=worker)).status_code == 200
    serves = await h.client.get(f"{jobs}/serves", headers=worker, params={"lease": job["lease"]})
    assert serves.status_code == 200, serves.text
    await h.client.post(f"{jobs}/heartbeat", headers=worker, json={"lease": job["lease"]})
    give_back = {"lease": job["lease"], "reason": "a test", "retry": True}
    await h.client.post(f"{jobs}/fail", headers=worker, json=give_back)
    rounds = f"/v1/runs/{audit.run_id}/rounds/0"
    for query in ({}, {"full": "1"}, {"limit": "1", "full": "1"}):  # the hot views, as served
        assert (await h.client.get(rounds, params=query)).status_code == 200
    assert (await h.client.get(f"/v1/runs/{audit.run_id}")).status_code == 200
    inputs = f"/v1/aggregator/runs/{audit.run_id}/rounds/0/inputs"
    assert (await h.client.get(inputs, headers=admin_headers())).status_code == 200


async def test_the_answers_of_a_round_and_its_audit_match_their_documented_classes(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    seen = await _answers_checked(tmp_path, _round_and_audit)
    round_classes = {
        Accepted,
        Committed,
        CommitRefused,
        LeavesTaken,
        UploadGrant,
        Uploaded,
        StateStored,
        LeaseExtended,
        HandedBack,
        ObjectInfo,
        RunView,
        RoundView,
        AuditJob,
        StoredJob,
        JobServes,
        RoundInputs,
    }
    assert round_classes <= seen, sorted(c.__name__ for c in round_classes - seen)
