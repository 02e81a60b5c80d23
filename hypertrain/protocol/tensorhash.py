"""TH(state): the hash of a ``{name: float32 tensor}`` state (spec/protocol.md section 2.5).

Layout, with ``lp(x) = u64le(len(x)) || x``::

    shape_enc = u32le(ndim) || u64le(dim_0) || ... || u64le(dim_{ndim-1})
    entry     = sha256(lp(name_utf8) || lp(b"f32") || lp(shape_enc) || lp(raw_le_bytes))
    TH        = sha256(entry_a || entry_b || ...)   entries sorted by UTF-8 name bytes

``raw_le_bytes`` are the elements in C (row-major) order as little-endian IEEE-754 float32. The
dtype string is always ``"f32"``: only float32 state is hashed, anything else is refused. TH of
an empty state is ``sha256(b"")``.

Accepted tensors: numpy arrays of dtype float32 in either byte order and any memory layout
(normalised to ``'<f4'`` C order, copying only when needed) and torch float32 tensors (detached,
moved to CPU, viewed through ``.numpy()`` without a copy when contiguous). Each tensor is hashed
in one streaming SHA-256 pass over its buffer; there are no per-element Python loops.

This module imports neither torch nor trio; a torch tensor is recognised only when torch is
already imported by the caller.
"""

from __future__ import annotations

import hashlib
import itertools
import struct
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hypertrain.protocol.errors import Malformed

__all__ = ["DTYPE_F32", "as_f32_le", "entry_digest", "shape_enc", "th_bytes", "th_hex"]

DTYPE_F32 = "f32"
_F32_LE = np.dtype("<f4")
_U64_MAX = 2**64 - 1


def _lp_header(length: int) -> bytes:
    return struct.pack("<Q", length)


def shape_enc(shape: Sequence[int]) -> bytes:
    """``u32le(ndim) || u64le(dim)*``; refuses negative or non-int dims."""
    dims = tuple(shape)
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int | np.integer) or not 0 <= d <= _U64_MAX:
            raise Malformed(f"TH: bad dimension {d!r} in shape {dims!r}")
    return struct.pack(f"<I{len(dims)}Q", len(dims), *(int(d) for d in dims))


def entry_digest(name: str, shape: Sequence[int], raw_le: Any, dtype: str = DTYPE_F32) -> bytes:
    """One 32-byte TH entry from already-serialised parts (``raw_le``: any C-contiguous buffer).

    For callers that hold the raw little-endian bytes (a safetensors blob, say) and want TH
    without building arrays. ``raw_le`` must hold exactly ``prod(shape) * 4`` bytes for f32.
    """
    if not isinstance(name, str):
        raise Malformed(f"TH: tensor name {name!r} is not a string")
    try:
        name_utf8 = name.encode("utf-8")
    except UnicodeEncodeError:
        raise Malformed(f"TH: tensor name {name!r} is not valid UTF-8") from None
    dtype_utf8 = dtype.encode("utf-8")
    enc = shape_enc(shape)
    view = memoryview(raw_le)
    if not view.c_contiguous:
        raise Malformed(f"TH: the buffer of {name!r} is not C-contiguous")
    if dtype == DTYPE_F32:
        count = 1
        for d in shape:
            count *= int(d)
        if view.nbytes != 4 * count:
            raise Malformed(f"TH: {name!r} has {view.nbytes} bytes for shape {tuple(shape)!r}")
    h = hashlib.sha256()
    h.update(_lp_header(len(name_utf8)) + name_utf8)
    h.update(_lp_header(len(dtype_utf8)) + dtype_utf8)
    h.update(_lp_header(len(enc)) + enc)
    h.update(_lp_header(view.nbytes))
    h.update(view)
    return h.digest()


def _from_torch(name: str, tensor: Any) -> np.ndarray[Any, np.dtype[np.float32]] | None:
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(tensor, torch.Tensor):
        return None
    if tensor.dtype != torch.float32:
        raise Malformed(f"TH: tensor {name!r} has dtype {tensor.dtype}, only float32 is hashed")
    try:
        array: np.ndarray[Any, np.dtype[np.float32]] = (
            tensor.detach().cpu().resolve_neg().resolve_conj().numpy()
        )
    except (TypeError, RuntimeError) as e:  # sparse, meta or otherwise unviewable tensors
        raise Malformed(f"TH: tensor {name!r} cannot be read as a dense array ({e})") from None
    return array


def as_f32_le(name: str, tensor: Any) -> np.ndarray[Any, np.dtype[np.float32]]:
    """``tensor`` as a C-contiguous little-endian float32 numpy array (a view when possible).

    Refuses (Malformed) anything that is not a float32 numpy array or torch tensor.
    """
    array = _from_torch(name, tensor)
    if array is None:
        if not isinstance(tensor, np.ndarray):
            raise Malformed(
                f"TH: tensor {name!r} is a {type(tensor).__name__}, not a float32 array/tensor"
            )
        array = tensor
    if array.dtype.kind != "f" or array.dtype.itemsize != 4:
        raise Malformed(f"TH: tensor {name!r} has dtype {array.dtype}, only float32 is hashed")
    # astype keeps the shape (0-d included) and copies only for byte order or layout changes.
    return array.astype(_F32_LE, order="C", copy=False)


def th_bytes(state: Mapping[str, Any]) -> bytes:
    """TH of ``state`` as 32 raw bytes (the form ``tensor_root`` concatenates)."""
    if not isinstance(state, Mapping):
        raise Malformed(f"TH: state must be a mapping of name to tensor, got {type(state)}")
    entries: list[tuple[bytes, bytes]] = []
    for name, tensor in state.items():
        if not isinstance(name, str):
            raise Malformed(f"TH: tensor name {name!r} is not a string")
        array = as_f32_le(name, tensor)
        digest = entry_digest(name, array.shape, array)
        entries.append((name.encode("utf-8"), digest))
    entries.sort(key=lambda item: item[0])
    for (a, _), (b, _) in itertools.pairwise(entries):
        if a == b:  # a plain dict cannot hold two, but other mappings might
            raise Malformed(f"TH: duplicate tensor name {a.decode('utf-8')!r}")
    return hashlib.sha256(b"".join(digest for _, digest in entries)).digest()


def th_hex(state: Mapping[str, Any]) -> str:
    """TH of ``state`` as 64 lowercase hex chars (``theta_hash``, ``final_theta_hash``, ...)."""
    return th_bytes(state).hex()
