"""Strict, pickle-free parsing of a scoring job's input files (pure: bytes in, arrays out).

Every parser takes the file's bytes and refuses anything off with :class:`BadInput`, whose
message is one line that starts with the file's name (``delta.bin: 12 trailing bytes``):

- ``model.json`` (:func:`parse_model`): the run manifest's ``model`` section as a JSON object,
  at most :data:`MODEL_JSON_MAX` bytes of UTF-8, no duplicate keys, no ``NaN``/``Infinity``,
  structured by the strict wire converter (unknown keys refused) into a
  :class:`~hypertrain.protocol.manifest.ModelSpec` that the CPU trainer supports;
- ``state.bin`` (:func:`parse_state`): a theta-only state blob
  (:mod:`hypertrain.trainer.state`) whose names and shapes are the model's, all values finite.
  Its exact size follows from the model, so it is checked before anything is parsed;
- ``delta.bin`` (:func:`parse_delta`): an ``ht-dense-int8-v1`` payload
  (:mod:`hypertrain.trainer.codec`) of exactly the model's names and shapes (exact size
  checked first), decoding to finite values;
- ``trace.u16`` (:func:`parse_trace`): rows of ``seq_len + 1`` little-endian uint16 token ids
  (the dataset sample layout), a positive whole number of rows, at most
  :data:`TRACE_MAX_ROWS`, every id below ``vocab``.

:func:`check_input_name` is the rule for input-file *names* that the node, the coordinator and
the worker share: ``[A-Za-z0-9][A-Za-z0-9._-]{0,63}`` and no ``..`` anywhere, so a name is
never a path (``../x``, ``/abs`` and the empty name are refused).

:func:`size_cap` bounds how many bytes the reader of each file may take (the caller reads at
most that many plus one, and refuses a longer file before parsing it).
"""

from __future__ import annotations

import math
import re
from typing import Final

import numpy as np
import numpy.typing as npt

from hypertrain.protocol.converter import structure
from hypertrain.protocol.errors import Malformed, SchemaError
from hypertrain.protocol.jcs import parse_json
from hypertrain.protocol.manifest import ModelSpec
from hypertrain.trainer.codec import BLOCK, MAGIC_DENSE_INT8, F32Array, decode_payload
from hypertrain.trainer.errors import UnsupportedModel
from hypertrain.trainer.params import param_shapes
from hypertrain.trainer.state import STATE_MAGIC, unpack_state

__all__ = [
    "INPUT_NAME_RE",
    "MODEL_JSON_MAX",
    "TRACE_MAX_ROWS",
    "BadInput",
    "TokenRows",
    "check_input_name",
    "delta_size",
    "parse_delta",
    "parse_model",
    "parse_state",
    "parse_trace",
    "size_cap",
    "state_size",
]

INPUT_NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MODEL_JSON_MAX: Final = 64 * 1024
"""Bytes a ``model.json`` may have."""
TRACE_MAX_ROWS: Final = 4096
"""Rows (sequences) a trace may have."""

TokenRows = npt.NDArray[np.uint16]
"""``[n, seq_len + 1]`` token ids."""


class BadInput(Exception):
    """An input file (or its name) is refused; ``str(e)`` is one line naming the file."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))

    @property
    def message(self) -> str:
        return str(self)


def check_input_name(name: object) -> str:
    """``name`` if it is a valid input-file name (module doc), else :class:`BadInput`."""
    if not isinstance(name, str) or INPUT_NAME_RE.fullmatch(name) is None or ".." in name:
        raise BadInput(
            f"input name {str(name)[:80]!r} is not [A-Za-z0-9][A-Za-z0-9._-]{{0,63}} without '..'"
        )
    return name


def parse_model(data: bytes, name: str = "model.json") -> ModelSpec:
    """The :class:`ModelSpec` of a ``model.json`` (module doc)."""
    if len(data) > MODEL_JSON_MAX:
        raise BadInput(f"{name}: {len(data)} bytes, at most {MODEL_JSON_MAX} allowed")
    try:
        body = parse_json(data)
    except Malformed as e:
        raise BadInput(f"{name}: not a JSON document ({e.detail[:200]})") from None
    if not isinstance(body, dict):
        raise BadInput(f"{name}: not a JSON object")
    try:
        model = structure(ModelSpec, body)
        param_shapes(model)  # refuses what the CPU trainer does not implement
    except (SchemaError, UnsupportedModel) as e:
        raise BadInput(f"{name}: {str(e)[:400]}") from None
    return model


def _header_bytes(name: str, shape: tuple[int, ...]) -> int:
    """``lp(name) || u32le(ndim) || u64le(dim)*ndim || u64le(body length)``."""
    return 8 + len(name.encode("utf-8")) + 4 + 8 * len(shape) + 8


def state_size(model: ModelSpec) -> int:
    """The exact size of a theta-only state blob of ``model``."""
    total = len(STATE_MAGIC) + 4 + 4 + 4
    for tensor, shape in param_shapes(model).items():
        total += _header_bytes(tensor, shape) + 4 * math.prod(shape)
    return total


def delta_size(model: ModelSpec) -> int:
    """The exact size of an ``ht-dense-int8-v1`` payload of ``model``'s parameters."""
    total = len(MAGIC_DENSE_INT8) + 4
    for tensor, shape in param_shapes(model).items():
        n = math.prod(shape)
        total += _header_bytes(tensor, shape) + 4 + 4 * -(-n // BLOCK) + n
    return total


def size_cap(name: str, model: ModelSpec | None) -> int:
    """How many bytes the reader may take of input ``name`` (``model`` None: model.json)."""
    if model is None or name == "model.json":
        return MODEL_JSON_MAX
    if name == "state.bin":
        return state_size(model)
    if name == "delta.bin":
        return delta_size(model)
    if name == "trace.u16":
        return TRACE_MAX_ROWS * 2 * (model.seq_len + 1)
    raise BadInput(f"{name}: not an input file of any scorer")


def _check_like_model(
    name: str, tensors: dict[str, F32Array], model: ModelSpec
) -> dict[str, F32Array]:
    shapes = param_shapes(model)
    got = {k: tuple(a.shape) for k, a in tensors.items()}
    if got != shapes:
        missing = sorted(set(shapes) - set(got))
        extra = sorted(set(got) - set(shapes))
        wrong = sorted(k for k in set(got) & set(shapes) if got[k] != shapes[k])
        raise BadInput(
            f"{name}: tensors do not fit the model (missing {missing[:3]}, unexpected "
            f"{extra[:3]}, wrong shape {[(k, got[k], shapes[k]) for k in wrong[:3]]})"
        )
    for key, array in tensors.items():
        if not np.isfinite(array).all():
            raise BadInput(f"{name}: tensor {key!r} holds NaN or infinite values")
    return tensors


def parse_state(data: bytes, model: ModelSpec, name: str = "state.bin") -> dict[str, F32Array]:
    """Theta of a theta-only state blob that fits ``model`` (module doc)."""
    expected = state_size(model)
    if len(data) != expected:
        raise BadInput(f"{name}: {len(data)} bytes, a theta-only state of the model has {expected}")
    try:
        state = unpack_state(data)
    except Malformed as e:
        raise BadInput(f"{name}: {e}") from None
    if state.m is not None or state.v is not None or state.step is not None:
        raise BadInput(f"{name}: not a theta-only state (optimizer state present)")
    return _check_like_model(name, state.theta, model)


def parse_delta(data: bytes, model: ModelSpec, name: str = "delta.bin") -> dict[str, F32Array]:
    """The decoded delta of a dense-int8 payload that fits ``model`` (module doc)."""
    expected = delta_size(model)
    if len(data) != expected:
        raise BadInput(
            f"{name}: {len(data)} bytes, a dense-int8 payload of the model has {expected}"
        )
    try:
        delta = decode_payload(data)
    except Malformed as e:
        raise BadInput(f"{name}: {e}") from None
    return _check_like_model(name, delta, model)


def parse_trace(
    data: bytes, model: ModelSpec, name: str = "trace.u16", max_rows: int = TRACE_MAX_ROWS
) -> TokenRows:
    """The token rows of a trace (module doc), a fresh ``[n, seq_len + 1]`` uint16 array."""
    row_bytes = 2 * (model.seq_len + 1)
    if not data or len(data) % row_bytes:
        raise BadInput(f"{name}: {len(data)} bytes is not a positive multiple of {row_bytes}")
    n = len(data) // row_bytes
    if n > max_rows:
        raise BadInput(f"{name}: {n} rows, at most {max_rows} allowed")
    rows = np.frombuffer(data, dtype="<u2").astype(np.uint16).reshape(n, model.seq_len + 1)
    top = int(rows.max())
    if top >= model.vocab:
        raise BadInput(f"{name}: token id {top} is not below vocab {model.vocab}")
    return rows
