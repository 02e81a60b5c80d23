"""Recompute a signed ``ht-tape-v1`` merge from stored artifacts (spec/protocol.md section 7).

:func:`replay_tape` checks, in this order, and stops at the first failure:

1. the signature, by the coordinator (SignatureError / UnauthorizedSigner);
2. ``params`` equal the run's outer parameters;
3. ``prev_state``: the stored bytes hash to the key, unpack, and ``TH(theta)`` equals
   ``prev_theta_hash``;
4. each input's object: the stored bytes hash to ``object`` and decode as a delta payload
   (``inputs[i].object``) with the model's names and shapes (``inputs``);
5. ``aggregate_round(prev, deltas, params, excluded=body.excluded)`` is recomputed and the tape
   body it yields (``out_state = sha256(pack_outer(state_out))``) must equal the signed body,
   field by field in body order.

Any disagreement raises :class:`TapeMismatch`, whose ``field`` is the path of the first
differing item (``params.lr``, ``inputs[1].weight``, ``screens.copy_flags[0].cosine``,
``out_state``...). ``load_object(key) -> bytes`` is a synchronous object-store reader; what it
raises for a missing key (NotFound) passes through.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from attrs import frozen

from hypertrain.aggregator.merge import MergeInputError, Params, aggregate_round
from hypertrain.aggregator.outerstate import OuterState, pack_outer, state_key, unpack_outer
from hypertrain.aggregator.tape import (
    SignedTape,
    TapeParams,
    build_tape_body,
    tape_key,
    verify_tape,
)
from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.errors import ContractMismatch, Malformed
from hypertrain.trainer.codec import F32Array, decode_payload

__all__ = ["ReplayReport", "TapeMismatch", "first_difference", "replay_tape"]


class TapeMismatch(ContractMismatch):
    """A tape that does not replay; ``field`` is the path of the first differing item."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"tape mismatch at {field}: {detail}")
        self.field = field


@frozen
class ReplayReport:
    """A tape that replayed exactly, and the state it produces."""

    tape_key: str
    run_id: str
    w: int
    n_inputs: int
    out_state: str
    theta_hash: str
    state: OuterState


def first_difference(expected: Any, actual: Any, path: str = "") -> str | None:
    """The path of the first item where two JSON values differ, or None when equal.

    Objects are walked in ``expected``'s key order, then keys only ``actual`` has; arrays item by
    item, a length difference being reported at the array itself.
    """
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in [*expected, *(k for k in actual if k not in expected)]:
            sub = f"{path}.{key}" if path else key
            if key not in expected or key not in actual:
                return sub
            found = first_difference(expected[key], actual[key], sub)
            if found is not None:
                return found
        return None
    if isinstance(expected, list) and isinstance(actual, list):
        for index, (e, a) in enumerate(zip(expected, actual, strict=False)):
            found = first_difference(e, a, f"{path}[{index}]")
            if found is not None:
                return found
        return None if len(expected) == len(actual) else path
    same = type(expected) is type(actual) and expected == actual
    return None if same else path


def _pick(value: Any, path: str) -> Any:
    """The item at ``path`` (as made by :func:`first_difference`), or None when absent."""
    for part in path.replace("[", ".[").split("."):
        if part.startswith("["):
            index = int(part[1:-1])
            value = value[index] if isinstance(value, list) and index < len(value) else None
        elif part:
            value = value.get(part) if isinstance(value, dict) else None
    return value


def _load(load_object: Callable[[str], bytes], key: str, field: str) -> bytes:
    data = load_object(key)
    got = hashlib.sha256(data).hexdigest()
    if got != key:
        raise TapeMismatch(field, f"the object store returned bytes hashing to {got}, not {key}")
    return data


def _compare(field: str, expected: Any, actual: Any) -> None:
    found = first_difference(expected, actual, field)
    if found is not None:
        raise TapeMismatch(
            found,
            f"the tape says {_pick(actual, found)!r:.100}, "
            f"replay gives {_pick(expected, found)!r:.100}",
        )


def replay_tape(
    signed: SignedTape,
    *,
    coord_ss58: str,
    load_object: Callable[[str], bytes],
    outer_params: Params,
) -> ReplayReport:
    """Recompute ``signed``'s merge and require it to match exactly (module docstring)."""
    verify_tape(signed, coord_ss58=coord_ss58)
    body = signed.body
    _compare("params", unstructure(TapeParams.from_params(outer_params)), unstructure(body.params))
    prev_bytes = _load(load_object, body.prev_state, "prev_state")
    try:
        prev = unpack_outer(prev_bytes)
    except Malformed as e:
        raise TapeMismatch("prev_state", f"stored state does not unpack: {e.detail}") from e
    _compare("prev_theta_hash", prev.theta_hash(), body.prev_theta_hash)
    deltas: dict[str, dict[str, F32Array]] = {}
    for index, item in enumerate(body.inputs):
        field = f"inputs[{index}].object"
        payload = _load(load_object, item.object, field)
        try:
            deltas[item.id] = decode_payload(payload)
        except Malformed as e:
            raise TapeMismatch(field, f"not a delta payload: {e.detail}") from e
    try:
        result = aggregate_round(prev, deltas, outer_params, excluded=body.excluded)
    except MergeInputError as e:
        raise TapeMismatch("inputs", f"a delta does not fit the model: {e.detail}") from e
    out_key = state_key(pack_outer(result.state_out))
    expected = build_tape_body(
        body.run_id,
        body.w,
        outer_params,
        body.prev_state,
        prev,
        result,
        out_key,
        {item.id: item.object for item in body.inputs},
        body.excluded,
    )
    _compare("", unstructure(expected), unstructure(body))
    return ReplayReport(
        tape_key=tape_key(signed),
        run_id=body.run_id,
        w=body.w,
        n_inputs=len(body.inputs),
        out_state=out_key,
        theta_hash=body.theta_hash,
        state=result.state_out,
    )
