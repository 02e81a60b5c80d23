"""A node's posted result, checked against its job's challenge into an :class:`Answer`.

The body of ``POST /v1/compute/jobs/<copy>/result`` is a :class:`~hypertrain.compute.wire.
ResultPost` (decoded by the converter: exactly ``lease``, ``ok``, ``result``, ``class``,
``error``, ``busy``, each of its JSON type)::

    {"lease": "lt_...", "ok": true,  "result": {"<objective>": ..., "fingerprint": "<hex>",
                                                "wallMs": 812, ...other fields}}
    {"lease": "lt_...", "ok": false, "error": "<text>", "class": "oom"}
    {"lease": "lt_...", "ok": false, "busy": true}

Promises of :func:`answer_of` and :func:`parse_answer` (``Malformed``, HTTP 400, naming the
field, otherwise):

- ``ok: true`` needs a ``result`` object holding the objective, ``fingerprint`` and ``wallMs``;
  it may not carry ``class`` or ``busy: true``. Other keys inside ``result`` are allowed, kept
  nowhere and never compared.
- The objective of a deterministic challenge is a string compared exactly (``delta-loss``:
  exactly 8 lower-case hex characters, the f32 of the loss; others: 1-128 printable ASCII
  characters). A timing challenge's objective is a finite JSON number > 0 (ints and floats
  alike: ``1`` and ``1.0`` are the same answer); strings, bools, NaN, Infinity, overflowing
  numbers, 0 and -0 are refused.
- ``fingerprint``: 8-128 lower-case hex characters. ``wallMs``: a non-negative int (at most
  :data:`MAX_WALL_MS`), kept for display only, never compared.
- ``delta-loss`` only: ``losses``, the per-sequence losses (:mod:`hypertrain.scoring.slices`),
  is kept when present and must give back the answer's loss, fingerprint and ``sequences``
  (it is never compared on its own: equal fingerprints mean equal losses). A slice of a hidden
  step needs it (:func:`hypertrain.compute.slices.check_slice_answer`).
- ``ok: false`` carries a failure class in ``class`` (``timeout``, ``oom``, ``bad-input``,
  ``crash``; a missing or unknown class string is ``crash``); ``result`` must be absent or
  null; ``error`` is optional text kept only for display, cut to :data:`ERROR_TEXT_LIMIT`.
- ``busy: true`` (only with ``ok: false``) is a non-verdict: the node gave the copy back.

:meth:`Answer.key` is the canonical comparison form (busy, ok and failure class, objective,
fingerprint); two posts with equal keys are the same answer. :meth:`Answer.to_json` is the
form the book stores (and publishes once settled). Pure: no clock, no I/O.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Final

import attrs

from hypertrain.compute.wire import ResultPost
from hypertrain.protocol.errors import Malformed
from hypertrain.scoring.registry import DELTA_LOSS, FAILURE_CLASSES, Challenge, FailureClass
from hypertrain.scoring.slices import check_losses

__all__ = [
    "ERROR_TEXT_LIMIT",
    "MAX_WALL_MS",
    "Answer",
    "answer_of",
    "parse_answer",
]

ERROR_TEXT_LIMIT: Final = 500
"""Characters of a failed answer's ``error`` text kept for display."""
MAX_WALL_MS: Final = 10**12
"""Largest ``wallMs`` an answer may report."""

_FINGERPRINT: Final = re.compile(r"[0-9a-f]{8,128}")
_OBJECTIVE_SHAPES: Final[Mapping[str, re.Pattern[str]]] = {"delta-loss": re.compile(r"[0-9a-f]{8}")}
_DEFAULT_OBJECTIVE: Final = re.compile(r"[\x20-\x7e]{1,128}")


@attrs.frozen(kw_only=True)
class Answer:
    """One canonical answer (module doc). Exactly one of three shapes:

    - ok: ``ok`` true, ``objective`` and ``fingerprint`` set, ``failure`` None;
    - failed: ``ok`` false, ``failure`` set, objective and fingerprint None;
    - busy: ``busy`` true, ``ok`` false, nothing else.
    """

    ok: bool
    objective: str | float | None = None
    fingerprint: str | None = None
    failure: FailureClass | None = None
    busy: bool = False
    wall_ms: int | None = None
    """Informational only; never compared."""
    error: str | None = None
    """Display only; never compared."""
    losses: str | None = None
    """``delta-loss``: the per-sequence losses as hex; fixed by the fingerprint, not compared."""

    @classmethod
    def success(
        cls,
        objective: str | float,
        fingerprint: str,
        *,
        wall_ms: int | None = None,
        losses: str | None = None,
    ) -> Answer:
        return cls(
            ok=True, objective=objective, fingerprint=fingerprint, wall_ms=wall_ms, losses=losses
        )

    @classmethod
    def failed(cls, failure: FailureClass, *, error: str | None = None) -> Answer:
        return cls(ok=False, failure=failure, error=error)

    @classmethod
    def busy_answer(cls) -> Answer:
        return cls(ok=False, busy=True)

    def key(self) -> str:
        """The canonical comparison form: equal keys are the same answer."""
        if self.busy:
            return '["busy"]'
        if not self.ok:
            return json.dumps(["failed", self.failure])
        return json.dumps(["ok", self.objective, self.fingerprint])

    def to_json(self) -> dict[str, Any]:
        """The stored and published form (also read back by :meth:`from_json`)."""
        if self.busy:
            return {"busy": True, "ok": False}
        if not self.ok:
            return {"ok": False, "class": self.failure, "error": self.error}
        stored: dict[str, Any] = {
            "ok": True,
            "objective": self.objective,
            "fingerprint": self.fingerprint,
            "wall_ms": self.wall_ms,
        }
        if self.losses is not None:
            stored["losses"] = self.losses
        return stored

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Answer:
        """Read back :meth:`to_json` (trusted, stored data)."""
        if data.get("busy"):
            return cls.busy_answer()
        if not data["ok"]:
            return cls.failed(data["class"], error=data.get("error"))
        return cls.success(
            data["objective"],
            data["fingerprint"],
            wall_ms=data.get("wall_ms"),
            losses=data.get("losses"),
        )


def answer_of(challenge: Challenge, post: ResultPost) -> Answer:
    """The answer a result post carries for a job of ``challenge`` (module doc)."""
    return parse_answer(
        challenge,
        ok=post.ok,
        result=post.result,
        failure=post.class_,
        error=post.error,
        busy=post.busy,
    )


def parse_answer(
    challenge: Challenge,
    *,
    ok: bool,
    result: Mapping[str, Any] | None = None,
    failure: str | None = None,
    error: str | None = None,
    busy: bool = False,
) -> Answer:
    """An answer from its parts (module doc): a node's post (:func:`answer_of`) or the
    fallback evaluator's own outcome, which has no lease token."""
    if ok:
        if busy:
            raise Malformed("busy: a busy answer has ok false")
        if failure is not None:
            raise Malformed("class: only a failed answer has a failure class")
        return _parse_success(challenge, result)
    if result is not None:
        raise Malformed("result: a failed answer carries no result")
    if busy:
        return Answer.busy_answer()
    return Answer.failed(_failure_class(failure), error=_display(error))


def _failure_class(value: str | None) -> FailureClass:
    for known in FAILURE_CLASSES:
        if value == known:
            return known
    return "crash"


def _display(error: str | None) -> str | None:
    return None if error is None else error[:ERROR_TEXT_LIMIT]


def _parse_success(challenge: Challenge, result: Mapping[str, Any] | None) -> Answer:
    if result is None:
        raise Malformed("result: an ok answer needs a result object")
    name = challenge.objective
    if name not in result:
        raise Malformed(f"result.{name}: the objective is missing")
    objective: str | float
    if challenge.kind == "timing":
        objective = _timing_objective(name, result[name])
    else:
        objective = _deterministic_objective(challenge, name, result[name])
    fingerprint = result.get("fingerprint")
    if not isinstance(fingerprint, str) or _FINGERPRINT.fullmatch(fingerprint) is None:
        raise Malformed("result.fingerprint: 8-128 lower-case hex characters")
    wall_ms = result.get("wallMs")
    if type(wall_ms) is not int or not 0 <= wall_ms <= MAX_WALL_MS:
        raise Malformed("result.wallMs: a non-negative integer of milliseconds")
    losses = None
    if challenge.capability == DELTA_LOSS.id and "losses" in result:
        try:
            losses = check_losses(result)
        except ValueError as e:
            raise Malformed(f"result.{e}") from e
    return Answer.success(objective, fingerprint, wall_ms=wall_ms, losses=losses)


def _timing_objective(name: str, value: object) -> float:
    if type(value) not in (int, float):
        raise Malformed(f"result.{name}: must be a JSON number")
    try:
        number = float(value)  # type: ignore[arg-type]
    except OverflowError as e:
        raise Malformed(f"result.{name}: out of range") from e
    if not math.isfinite(number) or number <= 0.0:
        raise Malformed(f"result.{name}: must be finite and > 0")
    return number


def _deterministic_objective(challenge: Challenge, name: str, value: object) -> str:
    shape = _OBJECTIVE_SHAPES.get(challenge.capability, _DEFAULT_OBJECTIVE)
    if not isinstance(value, str) or shape.fullmatch(value) is None:
        raise Malformed(f"result.{name}: must be a string of the shape {shape.pattern}")
    return value
