"""State blobs: theta plus optional optimizer state (m, v, step), pickle-free and deterministic.

Used for a miner's ``start_state.bin`` / ``final_state.bin`` and for public round start states
(theta only). Spec 5.5 names safetensors; we use this small format of our own instead (no
pickle, no ``torch.save``, no dependency), with the same content. Every integer little-endian,
``lp(x) = u64le(len(x)) || x``::

    blob    = b"ht-state" || u32le(1) || u32le(flags) || [u64le(step)]
              || section(theta) || [section(m)] || [section(v)]
    flags   = bit 0: m present, bit 1: v present, bit 2: step present; other bits are 0
    section = u32le(n_tensors) || tensor*                 strictly increasing UTF-8 name order
    tensor  = lp(name_utf8) || u32le(ndim) || u64le(dim)*ndim || lp(raw)
    raw     = the prod(dims) elements as little-endian IEEE-754 float32 in C order

``m`` and ``v``, when present, hold exactly theta's names and shapes. Values are stored bit for
bit (NaN payloads and signed zeros included), so ``unpack_state(pack_state(...))`` is lossless
and the same input always gives the same bytes. :func:`unpack_state` is as strict as the delta
decoder: wrong magic or version, unknown flags, truncation, trailing bytes, duplicate or
unsorted or non-UTF-8 names, a raw length that does not match the shape, or m/v sections that
differ from theta in names or shapes are each a :class:`~hypertrain.protocol.errors.Malformed`.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from hypertrain.protocol.errors import Malformed
from hypertrain.protocol.tensorhash import th_hex
from hypertrain.trainer.codec import F32Array, FrameReader, as_f32, sorted_names, tensor_header

__all__ = [
    "STATE_MAGIC",
    "STATE_VERSION",
    "TrainState",
    "pack_state",
    "read_tensor_section",
    "unpack_state",
    "write_tensor_section",
]

STATE_MAGIC = b"ht-state"
STATE_VERSION = 1
_HAS_M, _HAS_V, _HAS_STEP = 1, 2, 4
_U64_MAX = 2**64 - 1
_F32_LE = np.dtype("<f4")


@attrs.frozen(eq=False)
class TrainState:
    """An unpacked state blob: dicts of float32 arrays (``m``/``v`` None when absent)."""

    theta: dict[str, F32Array]
    m: dict[str, F32Array] | None = None
    v: dict[str, F32Array] | None = None
    step: int | None = None

    def theta_hash(self) -> str:
        """``TH(theta)`` (spec 2.5)."""
        return th_hex(self.theta)


Shapes = dict[str, tuple[int, ...]]
"""Tensor name -> shape."""


def write_tensor_section(what: str, tensors: Mapping[str, Any]) -> tuple[bytes, Shapes]:
    """``u32le(n) || (tensor header || lp(raw f32le))*`` in UTF-8 name order, and the shapes.

    The section layout shared by the state blobs of this module and the aggregator's outer
    state (:mod:`hypertrain.aggregator.outerstate`).
    """
    names = sorted_names(tensors, what)
    shapes: Shapes = {}
    parts = [struct.pack("<I", len(names))]
    for name, raw in names:
        array = as_f32(name, tensors[name], what)
        shapes[name] = array.shape
        parts += [tensor_header(raw, array.shape), struct.pack("<Q", array.nbytes)]
        parts.append(array.astype(_F32_LE, copy=False).tobytes())
    return b"".join(parts), shapes


def _section(what: str, tensors: Mapping[str, Any], like: Shapes | None) -> tuple[bytes, Shapes]:
    body, shapes = write_tensor_section(what, tensors)
    if like is not None and shapes != like:
        raise Malformed(f"{what}: names or shapes differ from theta's")
    return body, shapes


def pack_state(
    theta: Mapping[str, Any],
    m: Mapping[str, Any] | None = None,
    v: Mapping[str, Any] | None = None,
    step: int | None = None,
) -> bytes:
    """The state blob of ``theta`` (and ``m``, ``v``, ``step`` when given); see module doc."""
    if step is not None and (
        isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= _U64_MAX
    ):
        raise Malformed(f"state: step {step!r} is not an integer in [0, 2**64)")
    body, shapes = _section("state theta", theta, None)
    flags = 0
    parts = [body]
    if m is not None:
        flags |= _HAS_M
        parts.append(_section("state m", m, shapes)[0])
    if v is not None:
        flags |= _HAS_V
        parts.append(_section("state v", v, shapes)[0])
    step_bytes = b""
    if step is not None:
        flags |= _HAS_STEP
        step_bytes = struct.pack("<Q", step)
    return STATE_MAGIC + struct.pack("<II", STATE_VERSION, flags) + step_bytes + b"".join(parts)


def read_tensor_section(reader: FrameReader, what: str, section: str) -> dict[str, F32Array]:
    """Read one section written by :func:`write_tensor_section` (Malformed on anything off)."""
    reader.start_section()
    count = reader.u32(f"{section} tensor count")
    if count > reader.remaining // 20:  # a tensor takes at least 20 bytes of framing
        raise Malformed(f"{what}: {count} {section} tensors cannot fit in {reader.remaining} bytes")
    out: dict[str, F32Array] = {}
    for _ in range(count):
        name, shape, n = reader.header()
        raw = reader.lp(f"{section} values of {name!r}")
        if len(raw) != 4 * n:
            raise Malformed(f"{what}: {section} {name!r} has {len(raw)} bytes for shape {shape}")
        out[name] = np.frombuffer(raw, dtype=_F32_LE).astype(np.float32).reshape(shape)
    return out


def _read_section(
    reader: FrameReader, section: str, like: dict[str, F32Array] | None
) -> dict[str, F32Array]:
    out = read_tensor_section(reader, "state", section)
    if like is not None and {k: a.shape for k, a in out.items()} != {
        k: a.shape for k, a in like.items()
    }:
        raise Malformed(f"state: {section} names or shapes differ from theta's")
    return out


def unpack_state(blob: bytes | bytearray | memoryview) -> TrainState:
    """Parse a state blob strictly (module doc); arrays are fresh, writable float32 copies."""
    reader = FrameReader(blob, "state")
    reader.magic(STATE_MAGIC)
    version = reader.u32("version")
    if version != STATE_VERSION:
        raise Malformed(f"state: unsupported version {version}")
    flags = reader.u32("flags")
    if flags & ~(_HAS_M | _HAS_V | _HAS_STEP):
        raise Malformed(f"state: unknown flags {flags:#x}")
    step = reader.u64("step") if flags & _HAS_STEP else None
    theta = _read_section(reader, "theta", None)
    m = _read_section(reader, "m", theta) if flags & _HAS_M else None
    v = _read_section(reader, "v", theta) if flags & _HAS_V else None
    reader.finish()
    return TrainState(theta=theta, m=m, v=v, step=step)
