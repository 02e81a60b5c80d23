"""Delta payloads with committed error feedback (spec/protocol.md section 5.5).

A miner ships ``delta = theta_start - theta_end`` compressed with error feedback::

    acc     = ef_beta * ef_in + delta      (ef_in + delta when ef_beta == 1)
    payload = encode(acc)
    ef_out  = acc - decode(payload)

All arithmetic is elementwise IEEE-754 float32 with round-to-nearest-even, one rounding per
operation and no fused multiply-add, exactly what torch does on CPU for float32 tensors:
``ef_beta`` is first rounded to the nearest float32, then ``t = ef_in * beta`` (rounded),
then ``acc = t + delta`` (rounded). ``ef_in`` defaults to zeros and is still added, so a
``-0.0`` in ``delta`` becomes ``+0.0`` in ``acc``; ``ef_out`` hashes (TH) depend on such bits.

Payload (every integer little-endian, ``lp(x) = u64le(len(x)) || x``)::

    payload = MAGIC || u32le(n_tensors) || tensor*       tensors in strictly increasing
    tensor  = lp(name_utf8) || u32le(ndim) || u64le(dim)*ndim || lp(body)   UTF-8 name order

``MAGIC`` is ``b"ht-dense-int8-v1"`` (encoded and decoded here) or ``b"ht-sparse-v1"``
(recognised, refused as unsupported). A dense-int8 body over ``n = prod(dims)`` values
(``n = 1`` for a 0-d tensor, ``n = 0`` for an empty one) flattened in C order is::

    body = u32le(256) || f32le scale[nblocks] || int8 q[n]        nblocks = ceil(n / 256)

Block ``b`` holds values ``256*b .. min(256*b + 256, n) - 1`` (the last block may be partial).
Per block, in float32: ``scale = amax / 127`` (one correctly rounded f32 division of the block's
largest ``|x|``); ``scale = 1.0`` when that quotient is ``0`` (all-zero blocks, and blocks whose
``amax`` is so small that ``amax / 127`` underflows); then ``q = rint(x / scale)`` (f32 division,
round half to even) clamped to ``[-127, 127]``. Decoding gives ``q * scale`` (f32 product), so
``|acc - decode| <= scale / 2`` up to f32 rounding whenever ``scale`` is a normal float.

Refused with :class:`~hypertrain.protocol.errors.Malformed`: non-float32 or non-finite input,
mismatched ``ef_in``, empty or non-UTF-8 names, more than ``MAX_NDIM`` dimensions or more than
``MAX_ELEMENTS`` elements, and blocks whose ``scale`` would exceed ``MAX_SCALE`` (beyond it
``127 * scale`` overflows float32, so a decoded value would be infinite). The decoder also
refuses unknown magic, truncation, trailing bytes, duplicate or unsorted names, a block size
other than 256, scales that are not finite or not in ``(0, MAX_SCALE]``, and ``q = -128``.
It validates all framing before allocating, and never allocates more than 4 bytes per payload
byte. Pure numpy: torch tensors are accepted as input (converted with ``.numpy()``), never needed.
"""

from __future__ import annotations

import hashlib
import math
import struct
import sys
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from hypertrain.protocol.errors import Malformed
from hypertrain.protocol.tensorhash import th_hex

__all__ = [
    "BLOCK",
    "MAGIC_DENSE_INT8",
    "MAGIC_SPARSE",
    "MAX_ELEMENTS",
    "MAX_NDIM",
    "MAX_SCALE",
    "QMAX",
    "Compressed",
    "F32Array",
    "FrameReader",
    "as_f32",
    "compress",
    "decode_payload",
    "encode_dense_int8",
    "sorted_names",
    "tensor_header",
]

F32Array = npt.NDArray[np.float32]

MAGIC_DENSE_INT8 = b"ht-dense-int8-v1"
MAGIC_SPARSE = b"ht-sparse-v1"
BLOCK = 256
QMAX = 127
MAX_NDIM = 32
MAX_ELEMENTS = 2**40
# The largest float32 s with float32(127 * s) finite: 0x1.020406p+121 (bits 0x7c010203).
MAX_SCALE = np.float32(float.fromhex("0x1.020406p+121"))

_F32 = np.dtype(np.float32)
_F32_LE = np.dtype("<f4")
_QMAX_F32 = np.float32(QMAX)


def sorted_names(state: Mapping[str, Any], what: str) -> list[tuple[str, bytes]]:
    """``(name, name_utf8)`` pairs in increasing UTF-8 byte order; refuses bad or empty names."""
    out: list[tuple[str, bytes]] = []
    for name in state:
        if not isinstance(name, str) or not name:
            raise Malformed(f"{what}: tensor name {name!r} is not a non-empty string")
        try:
            out.append((name, name.encode("utf-8")))
        except UnicodeEncodeError as e:
            raise Malformed(f"{what}: tensor name {name!r} is not valid UTF-8") from e
    out.sort(key=lambda item: item[1])
    return out


def as_f32(name: str, tensor: Any, what: str) -> F32Array:
    """``tensor`` as a C-contiguous native float32 array (a view when possible).

    Accepts float32 numpy arrays (either byte order) and float32 torch tensors (read through
    ``.numpy()``; torch is never imported here). Refuses other types and dtypes, and shapes
    beyond ``MAX_NDIM`` / ``MAX_ELEMENTS``.
    """
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(tensor, torch.Tensor):
        if tensor.dtype != torch.float32:
            raise Malformed(f"{what}: tensor {name!r} has dtype {tensor.dtype}, not float32")
        try:
            tensor = tensor.detach().cpu().resolve_neg().resolve_conj().numpy()
        except (TypeError, RuntimeError) as e:
            raise Malformed(f"{what}: tensor {name!r} cannot be read as an array ({e})") from e
    if not isinstance(tensor, np.ndarray):
        raise Malformed(f"{what}: {name!r} is a {type(tensor).__name__}, not a float32 array")
    if tensor.dtype.kind != "f" or tensor.dtype.itemsize != 4:
        raise Malformed(f"{what}: tensor {name!r} has dtype {tensor.dtype}, not float32")
    if tensor.ndim > MAX_NDIM or tensor.size > MAX_ELEMENTS:
        raise Malformed(f"{what}: tensor {name!r} of shape {tensor.shape} is too large")
    array: F32Array = tensor.astype(_F32, order="C", copy=False)
    return array


def tensor_header(name_utf8: bytes, shape: tuple[int, ...]) -> bytes:
    """``lp(name_utf8) || u32le(ndim) || u64le(dim)*``, shared by payloads and state blobs."""
    return (
        struct.pack("<Q", len(name_utf8))
        + name_utf8
        + struct.pack(f"<I{len(shape)}Q", len(shape), *shape)
    )


class FrameReader:
    """Strict cursor over untrusted bytes; every problem is a :class:`Malformed` naming it."""

    def __init__(self, data: bytes | bytearray | memoryview, what: str) -> None:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise Malformed(f"{what}: expected bytes, got {type(data).__name__}")
        self._view = memoryview(data).cast("B")
        self._off = 0
        self.what = what
        self._last_name: bytes | None = None

    @property
    def remaining(self) -> int:
        return len(self._view) - self._off

    def take(self, n: int, field: str) -> memoryview:
        if n > self.remaining:
            raise Malformed(
                f"{self.what}: truncated {field} (need {n} bytes, {self.remaining} left)"
            )
        out = self._view[self._off : self._off + n]
        self._off += n
        return out

    def u32(self, field: str) -> int:
        value: int = struct.unpack("<I", self.take(4, field))[0]
        return value

    def u64(self, field: str) -> int:
        value: int = struct.unpack("<Q", self.take(8, field))[0]
        return value

    def lp(self, field: str) -> memoryview:
        return self.take(self.u64(f"length of {field}"), field)

    def magic(self, expected: bytes) -> None:
        if bytes(self._view[: len(expected)]) != expected:
            raise Malformed(f"{self.what}: bad magic {bytes(self._view[:24])!r}")
        self._off = len(expected)

    def header(self) -> tuple[str, tuple[int, ...], int]:
        """One ``tensor_header``: name (strictly after the previous one), shape, element count."""
        raw = bytes(self.lp("tensor name"))
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise Malformed(f"{self.what}: tensor name {raw[:40]!r} is not valid UTF-8") from e
        if not name:
            raise Malformed(f"{self.what}: empty tensor name")
        if self._last_name is not None and raw <= self._last_name:
            problem = "duplicate" if raw == self._last_name else "out of UTF-8 order"
            raise Malformed(f"{self.what}: tensor name {name!r} is {problem}")
        self._last_name = raw
        ndim = self.u32(f"ndim of {name!r}")
        if ndim > MAX_NDIM:
            raise Malformed(f"{self.what}: tensor {name!r} has {ndim} dimensions (max {MAX_NDIM})")
        shape = struct.unpack(f"<{ndim}Q", self.take(8 * ndim, f"dims of {name!r}"))
        if math.prod(max(d, 1) for d in shape) > MAX_ELEMENTS:
            raise Malformed(f"{self.what}: tensor {name!r} shape {shape} is too large")
        return name, shape, math.prod(shape)

    def start_section(self) -> None:
        """Forget the previous name: the next section's names are ordered on their own."""
        self._last_name = None

    def finish(self) -> None:
        if self.remaining:
            raise Malformed(f"{self.what}: {self.remaining} trailing bytes")


@attrs.frozen(eq=False)
class Compressed:
    """What :func:`compress` hands back: the payload bytes and the new error-feedback state."""

    payload: bytes
    ef_out: dict[str, F32Array]

    @property
    def delta_bytes(self) -> int:
        return len(self.payload)

    def delta_hash(self) -> str:
        """``sha256_hex(payload)``, the commit's ``delta_hash``."""
        return hashlib.sha256(self.payload).hexdigest()

    def ef_out_hash(self) -> str:
        """``TH(ef_out)``, the commit's ``ef_out_hash``."""
        return th_hex(self.ef_out)


def _quantise(name: str, flat: F32Array) -> tuple[F32Array, npt.NDArray[np.int8]]:
    """Scales and int8 codes of one flattened tensor (float32 arithmetic, see module doc)."""
    n = flat.size
    nblocks = -(-n // BLOCK)
    padded = np.zeros(nblocks * BLOCK, dtype=_F32)
    padded[:n] = flat
    blocks = padded.reshape(nblocks, BLOCK)
    scales: F32Array = np.abs(blocks).max(axis=1, initial=np.float32(0)) / _QMAX_F32
    scales[scales == 0] = 1
    if (scales > MAX_SCALE).any():
        raise Malformed(f"dense-int8: tensor {name!r} has values too large to encode")
    q = np.rint(blocks / scales[:, None])
    np.clip(q, -QMAX, QMAX, out=q)
    return scales, q.astype(np.int8).reshape(-1)[:n]


def _dequantise(scales: F32Array, q: npt.NDArray[np.int8], shape: tuple[int, ...]) -> F32Array:
    values: F32Array = q.astype(_F32) * np.repeat(scales, BLOCK)[: q.size]
    return values.reshape(shape)


def _dense_body(name: str, flat: F32Array) -> tuple[bytes, F32Array, npt.NDArray[np.int8]]:
    if not np.isfinite(flat).all():
        raise Malformed(f"dense-int8: tensor {name!r} holds NaN or infinite values")
    scales, q = _quantise(name, flat)
    body = struct.pack("<I", BLOCK) + scales.astype(_F32_LE).tobytes() + q.tobytes()
    return body, scales, q


def _frame(parts: list[tuple[bytes, tuple[int, ...], bytes]]) -> bytes:
    out = [MAGIC_DENSE_INT8, struct.pack("<I", len(parts))]
    for name_utf8, shape, body in parts:
        out += [tensor_header(name_utf8, shape), struct.pack("<Q", len(body)), body]
    return b"".join(out)


def encode_dense_int8(tensors: Mapping[str, Any]) -> bytes:
    """The ``ht-dense-int8-v1`` payload of ``{name: float32 array or tensor}``."""
    parts = []
    for name, raw in sorted_names(tensors, "dense-int8"):
        array = as_f32(name, tensors[name], "dense-int8")
        body, _, _ = _dense_body(name, array.reshape(-1))
        parts.append((raw, array.shape, body))
    return _frame(parts)


def compress(
    delta: Mapping[str, Any], ef_in: Mapping[str, Any] | None = None, ef_beta: float = 0.0
) -> Compressed:
    """Error-feedback compression of ``delta`` into a dense-int8 payload (module doc).

    ``ef_in`` must hold exactly ``delta``'s names and shapes (zeros when ``None``);
    ``ef_beta`` must be finite and in ``[0, 1]``; it is rounded to float32 first.
    """
    if not (isinstance(ef_beta, int | float) and 0.0 <= ef_beta <= 1.0):
        raise Malformed(f"compress: ef_beta {ef_beta!r} is not a real in [0, 1]")
    beta = np.float32(ef_beta)
    if ef_in is not None and set(ef_in) != set(delta):
        raise Malformed(f"compress: ef_in names {sorted(ef_in)} differ from delta names")
    parts = []
    ef_out: dict[str, F32Array] = {}
    for name, raw in sorted_names(delta, "compress"):
        d = as_f32(name, delta[name], "compress")
        e = np.zeros_like(d) if ef_in is None else as_f32(name, ef_in[name], "compress ef_in")
        if e.shape != d.shape:
            raise Malformed(f"compress: ef_in {name!r} has shape {e.shape}, delta {d.shape}")
        with np.errstate(over="ignore", invalid="ignore"):
            acc = e + d if beta == 1 else e * beta + d
        body, scales, q = _dense_body(name, acc.reshape(-1))
        parts.append((raw, d.shape, body))
        ef_out[name] = acc - _dequantise(scales, q, d.shape)
    return Compressed(payload=_frame(parts), ef_out=ef_out)


def _decode_dense_body(reader: FrameReader, name: str, shape: tuple[int, ...], n: int) -> F32Array:
    body_len = reader.u64(f"body length of {name!r}")
    nblocks = -(-n // BLOCK)
    if body_len != 4 + 4 * nblocks + n:
        raise Malformed(
            f"dense-int8: body of {name!r} is {body_len} bytes, shape {shape} needs "
            f"{4 + 4 * nblocks + n}"
        )
    block = reader.u32(f"block size of {name!r}")
    if block != BLOCK:
        raise Malformed(f"dense-int8: tensor {name!r} has block size {block}, not {BLOCK}")
    scales = np.frombuffer(reader.take(4 * nblocks, f"scales of {name!r}"), dtype=_F32_LE)
    q = np.frombuffer(reader.take(n, f"values of {name!r}"), dtype=np.int8)
    if not (np.isfinite(scales).all() and (scales > 0).all() and (scales <= MAX_SCALE).all()):
        raise Malformed(f"dense-int8: tensor {name!r} has a scale that is not in (0, MAX_SCALE]")
    if (q == -QMAX - 1).any():
        raise Malformed(f"dense-int8: tensor {name!r} holds the int8 value -128")
    return _dequantise(scales.astype(_F32), q, shape)


def decode_payload(payload: bytes | bytearray | memoryview) -> dict[str, F32Array]:
    """``{name: float32 array}`` of a payload, dispatching on its magic; strict (module doc)."""
    reader = FrameReader(payload, "payload")
    head = bytes(memoryview(payload)[: len(MAGIC_DENSE_INT8)])
    if head.startswith(MAGIC_SPARSE):
        raise Malformed("payload: codec ht-sparse-v1 is not supported")
    reader.magic(MAGIC_DENSE_INT8)
    count = reader.u32("tensor count")
    if count > reader.remaining // 20:  # a tensor takes at least 20 bytes of framing
        raise Malformed(f"payload: {count} tensors cannot fit in {reader.remaining} bytes")
    out: dict[str, F32Array] = {}
    for _ in range(count):
        name, shape, n = reader.header()
        out[name] = _decode_dense_body(reader, name, shape, n)
    reader.finish()
    return out
