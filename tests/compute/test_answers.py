"""Result bodies parsed strictly against the job's challenge (scenario 30): the converter
decodes the :class:`ResultPost`, :func:`answer_of` checks its answer for the challenge."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypertrain.compute import ERROR_TEXT_LIMIT, Answer, ResultPost, answer_of, parse_answer
from hypertrain.protocol.converter import structure
from hypertrain.protocol.errors import Malformed
from hypertrain.scoring.registry import DELTA_LOSS, STEP_THROUGHPUT, Challenge

FP = "ab" * 32


def parse_body(challenge: Challenge, body: object) -> tuple[ResultPost, Answer]:
    """A posted body as the book reads it: decoded, then checked against the challenge."""
    post = structure(ResultPost, body)
    return post, answer_of(challenge, post)


def det(**result: Any) -> dict[str, Any]:
    return {
        "lease": "lt_x",
        "ok": True,
        "result": {"loss": "3f800000", "fingerprint": FP, "wallMs": 812, **result},
    }


def timing(value: object, **extra: Any) -> dict[str, Any]:
    result = {"tokens_per_s": value, "fingerprint": FP, "wallMs": 5, **extra}
    return {"lease": "lt_x", "ok": True, "result": result}


def test_a_deterministic_answer_keeps_objective_and_fingerprint_only() -> None:
    post, answer = parse_body(DELTA_LOSS, det(extra={"a": 1}, tokens=9))
    assert post.lease == "lt_x"
    assert answer == Answer.success("3f800000", FP, wall_ms=812)
    assert answer.key() == parse_body(DELTA_LOSS, det(wallMs=1))[1].key()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"lease": "lt_x", "ok": True}, "result"),
        ({"lease": "lt_x", "ok": True, "result": None}, "result"),
        ({"lease": "lt_x", "ok": True, "result": {"fingerprint": FP, "wallMs": 1}}, "loss"),
        (det(loss=1.0), "loss"),
        (det(loss="3F800000"), "loss"),
        (det(loss="3f80000"), "loss"),
        (det(fingerprint="xyz"), "fingerprint"),
        (det(fingerprint="AB" * 32), "fingerprint"),
        (det(fingerprint="ab" * 65), "fingerprint"),
        (det(wallMs=-1), "wallMs"),
        (det(wallMs=1.5), "wallMs"),
        (det(wallMs=True), "wallMs"),
        ({**det(), "extra": 1}, "unknown field"),
        ({**det(), "class": "oom"}, "class"),
        ({**det(), "busy": True}, "busy"),
        ({"ok": True, "result": det()["result"]}, "lease"),
        ({"lease": "", "ok": False}, "lease"),
        ({"lease": "lt_x", "ok": "true"}, "ok"),
        ({"lease": "lt_x", "ok": False, "result": {"x": 1}}, "result"),
        ({"lease": "lt_x", "ok": False, "class": 3}, "class"),
        ({"lease": "lt_x", "ok": False, "error": 3}, "error"),
        ({"lease": "lt_x", "ok": False, "busy": "yes"}, "busy"),
        ([1, 2], "object"),
    ],
)
def test_malformed_bodies_are_refused_naming_the_field(body: Any, field: str) -> None:
    with pytest.raises(Malformed, match=field):
        parse_body(DELTA_LOSS, body)


@pytest.mark.parametrize(
    "value",
    ["12.5", True, False, None, math.nan, math.inf, -math.inf, 0, 0.0, -0.0, -1, 10**400, [1]],
)
def test_timing_objectives_must_be_finite_positive_numbers(value: object) -> None:
    with pytest.raises(Malformed, match="tokens_per_s"):
        parse_body(STEP_THROUGHPUT, timing(value))


def test_huge_exponent_and_nan_literals_from_json_are_refused() -> None:
    for text in ("1e400", "NaN", "Infinity", "-Infinity"):
        result = f'{{"tokens_per_s":{text},"fingerprint":"{FP}","wallMs":1}}'
        body = json.loads(f'{{"lease":"lt_x","ok":true,"result":{result}}}')
        with pytest.raises(Malformed):
            parse_body(STEP_THROUGHPUT, body)


def test_one_and_one_point_zero_are_the_same_answer() -> None:
    a = parse_body(STEP_THROUGHPUT, timing(1))[1]
    b = parse_body(STEP_THROUGHPUT, timing(1.0))[1]
    assert a == b
    assert a.key() == b.key()
    assert isinstance(a.objective, float)


def test_failures_carry_a_class_and_truncated_display_text() -> None:
    oom = parse_answer(DELTA_LOSS, ok=False, failure="oom", error="x" * 9999)
    assert oom.failure == "oom"
    assert oom.error is not None
    assert len(oom.error) == ERROR_TEXT_LIMIT
    assert parse_answer(DELTA_LOSS, ok=False).failure == "crash"
    assert parse_answer(DELTA_LOSS, ok=False, failure="segfault").failure == "crash"
    text_a = parse_answer(DELTA_LOSS, ok=False, failure="oom", error="killed")
    assert oom.key() == text_a.key()


def test_busy_is_its_own_answer() -> None:
    busy = parse_answer(DELTA_LOSS, ok=False, busy=True, error="queue full")
    assert busy.busy
    assert busy.key() == '["busy"]'
    assert busy != parse_answer(DELTA_LOSS, ok=False)


@given(
    st.one_of(
        st.builds(Answer.success, st.text(min_size=1), st.text(min_size=1)),
        st.builds(Answer.success, st.floats(min_value=1e-300, max_value=1e300), st.just(FP)),
        st.builds(Answer.failed, st.sampled_from(["timeout", "oom", "bad-input", "crash"])),
        st.just(Answer.busy_answer()),
    )
)
def test_stored_form_round_trips(answer: Answer) -> None:
    back = Answer.from_json(json.loads(json.dumps(answer.to_json())))
    assert back == answer
    assert back.key() == answer.key()
