"""The compute wire: each body's JSON, key by key and in order, and the hostile shapes refused."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from hypertrain.compute.wire import (
    DisabledAnswer,
    ErrorAnswer,
    InputFile,
    LeaseAnswer,
    LeaseGrant,
    LeaseRequest,
    RegisterAnswer,
    RegisterRequest,
    ResultCounted,
    ResultJudged,
    ResultPost,
    ResultStatus,
    read_result_answer,
)
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.errors import SchemaError

SHA = "ab" * 32
GRANT: dict[str, Any] = {
    "id": "j1.1",
    "job": "j1",
    "challenge": "delta-loss",
    "base": "delta-loss",
    "step": "j1/public",
    "trace": "public",
    "inputs": [
        {"name": "model.json", "sha256": SHA, "size": 17},
        {"name": "trace.u16", "sha256": "cd" * 32, "size": 128},
    ],
    "step_budget_ms": 45_000,
    "kill_after_ms": 60_000,
    "memory_bytes": 4 << 30,
    "version": 1,
    "objective": "loss",
    "lease": "lt_" + "x" * 32,
    "deadline_ms": 1_704_067_290_000,
}
REGISTERED: dict[str, Any] = {
    "id": "n1",
    "handle": "alice",
    "capabilities": ["delta-loss"],
    "hardware": "cpu-generic",
    "jobs_done": 0,
    "credits": 0,
    "compute_credits": 0,
    "last_seen": 1_704_067_200_000,
    "node_id": "n1",
    "probation": 0,
    "strikes_today": 0,
    "network_strikes_today": 0,
}

BODIES: list[tuple[type[Any], dict[str, Any]]] = [
    (RegisterRequest, {"key": None, "handle": None, "capabilities": [], "hardware": "cpu"}),
    (
        RegisterRequest,
        {"key": "ht_x", "handle": "a", "capabilities": ["delta-loss"], "hardware": None},
    ),
    (
        RegisterRequest,
        {"key": None, "handle": None, "capabilities": [], "hardware": None, "account": "ht_y"},
    ),
    (RegisterAnswer, REGISTERED),
    (RegisterAnswer, {**REGISTERED, "key": "ht_" + "k" * 32}),
    (LeaseRequest, {"capabilities": ["delta-loss"], "hardware": "cpu-generic"}),
    (LeaseRequest, {"capabilities": [], "hardware": "cpu-generic", "wait_ms": 0}),
    (LeaseAnswer, {"job": None}),
    (LeaseAnswer, {"job": GRANT}),
    (
        DisabledAnswer,
        {"detail": "x", "reenable_at_ms": 5, "reenable_at": "1970-01-01T00:00:00.005Z"},
    ),
    (ResultPost, {"lease": "lt_x", "ok": True, "result": {"loss": "3f800000", "wallMs": 1}}),
    (ResultPost, {"lease": "lt_x", "ok": False, "class": "oom", "error": "Killed"}),
    (ResultPost, {"lease": "lt_x", "ok": False, "busy": True}),
    (ResultStatus, {"copy": "j1.1", "status": "held"}),
    (ResultJudged, {"copy": "j1.1", "status": "judged", "verdict": "paid", "compute_credits": 2}),
    (
        ResultCounted,
        {
            "copy": "j1.1",
            "status": "counted",
            "verdict": None,
            "job_state": "queued",
            "compute_credits": 0,
        },
    ),
    (ErrorAnswer, {"detail": "copy j1.1: the lease expired; this answer counts for nothing"}),
]


@pytest.mark.parametrize(("cls", "body"), BODIES)
def test_each_body_decodes_and_encodes_to_the_same_json_in_the_same_order(
    cls: type[Any], body: dict[str, Any]
) -> None:
    decoded = structure(cls, body)
    assert json.dumps(unstructure(decoded)) == json.dumps(body)


def test_a_result_answer_is_read_by_its_status() -> None:
    for cls, body in BODIES:
        if cls in (ResultStatus, ResultJudged, ResultCounted):
            assert read_result_answer(body) == structure(cls, body)
    with pytest.raises(SchemaError, match=r"\$\.status: must be one of"):
        read_result_answer({"copy": "j1.1", "status": "paid"})
    with pytest.raises(SchemaError, match="compute_credits"):
        read_result_answer({"copy": "j1.1", "status": "judged", "verdict": "paid"})


def _grant(**changes: Any) -> dict[str, Any]:
    job = copy.deepcopy(GRANT)
    for name, value in changes.items():
        if name.startswith("input_"):
            job["inputs"][0][name.removeprefix("input_")] = value
        else:
            job[name] = value
    return {"job": job}


@pytest.mark.parametrize(
    ("answer", "field"),
    [
        (_grant(id="../../j3"), "copy_id"),
        (_grant(id="/etc/passwd"), "copy_id"),
        (_grant(input_name="../x"), r"inputs\[0\].name"),
        (_grant(input_name="a/b"), r"inputs\[0\].name"),
        (_grant(input_sha256="AB" * 32), r"inputs\[0\].sha256"),
        (_grant(input_sha256="ab"), r"inputs\[0\].sha256"),
        (_grant(input_size=-1), r"inputs\[0\].size"),
        (_grant(input_size=2**53), r"inputs\[0\].size"),
        (_grant(input_size=True), r"inputs\[0\].size"),
        (_grant(inputs=[]), "inputs"),
        (_grant(inputs=[GRANT["inputs"][0]] * 2), "inputs: input names must be distinct"),
        (_grant(version=True), "version"),
        (_grant(version="1"), "version"),
        (_grant(deadline_ms=2**53), "deadline_ms"),
        (_grant(deadline_ms=1.5), "deadline_ms"),
        (_grant(trace="private"), "trace"),
        (_grant(lease=""), "token"),
        (_grant(extra=1), "unknown field"),
        ({"job": GRANT, "extra": 1}, "unknown field"),
        ({}, "job"),
        ({"job": [GRANT]}, "job"),
    ],
)
def test_a_hostile_lease_answer_is_refused_naming_the_field(answer: object, field: str) -> None:
    with pytest.raises(SchemaError, match=field):
        structure(LeaseAnswer, answer)


@pytest.mark.parametrize(
    ("cls", "body", "field"),
    [
        (LeaseRequest, {"wait_ms": -1}, "wait_ms"),
        (LeaseRequest, {"wait_ms": 25_001}, "wait_ms"),
        (LeaseRequest, {"wait_ms": True}, "wait_ms"),
        (LeaseRequest, {"wait_ms": 2**64}, "wait_ms"),
        (LeaseRequest, {"capabilities": "delta-loss"}, "capabilities"),
        (LeaseRequest, {"capabilities": [1]}, "capabilities"),
        (LeaseRequest, {"hardware": 5}, "hardware"),
        (LeaseRequest, {"waitMs": 5}, "unknown field"),
        (RegisterRequest, {"key": 5}, "key"),
        (RegisterRequest, {"handle": ["a"]}, "handle"),
        (RegisterRequest, {"x": 1}, "unknown field"),
        (ResultPost, {"lease": "lt_x", "ok": True, "result": [1]}, "result"),
        (ResultPost, {"lease": "lt_x", "ok": 1}, "ok"),
        (ResultPost, {"lease": 5, "ok": True}, "lease"),
        (RegisterAnswer, {**REGISTERED, "credits": -1}, "credits"),
        (RegisterAnswer, {**REGISTERED, "node_id": ""}, "node_id"),
        (DisabledAnswer, {"detail": "x", "reenable_at_ms": False, "reenable_at": "x"}, "reenable"),
    ],
)
def test_hostile_requests_and_answers_are_refused_naming_the_field(
    cls: type[Any], body: object, field: str
) -> None:
    with pytest.raises(SchemaError, match=field):
        structure(cls, body)


def test_an_input_file_checks_its_fields_when_built() -> None:
    assert InputFile("trace.u16", SHA, 0).size == 0
    with pytest.raises(ValueError, match="name"):
        InputFile("..", SHA, 1)
    grant = structure(LeaseAnswer, {"job": GRANT}).job
    assert grant is not None
    assert grant.label == "delta-loss/public"
    assert "lt_" not in repr(grant)
    assert isinstance(grant, LeaseGrant)
