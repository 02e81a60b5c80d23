"""OuterState ``{theta, u, center}`` and its pickle-free blob (spec/protocol.md section 7).

``theta`` is the global model, ``u`` the outer (Nesterov) momentum and ``center`` the previous
outer update ``g_{w-1}`` that CenteredClip centres on. Hashes: ``theta_hash = TH(theta)``,
``outer_state_hash = TH(u)``, ``center_hash = TH(center)``; store key ``sha256(blob)``.

Spec 7 names safetensors; like ``trainer/state.py`` we use our own framing with the same content
(its ``tensor_header`` / ``FrameReader``). Every integer little-endian,
``lp(x) = u64le(len(x)) || x``::

    blob    = b"ht-outer" || u32le(1) || section(theta) || section(u) || section(center)
    section = u32le(n_tensors) || tensor*                 strictly increasing UTF-8 name order
    tensor  = lp(name_utf8) || u32le(ndim) || u64le(dim)*ndim || lp(raw)
    raw     = the prod(dims) elements as little-endian IEEE-754 float32 in C order

``u`` and ``center`` hold exactly theta's names and shapes. Values are stored bit for bit, so
``unpack_outer(pack_outer(s))`` is lossless and packing is deterministic. :func:`unpack_outer`
refuses (:class:`~hypertrain.protocol.errors.Malformed`) wrong magic or version, truncation,
trailing bytes, duplicate/unsorted/non-UTF-8 names, raw lengths that do not match the shape and
``u``/``center`` sections that differ from theta in names or shapes.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping

import attrs
import numpy as np

from hypertrain.protocol.errors import Malformed
from hypertrain.protocol.tensorhash import th_hex
from hypertrain.trainer.codec import F32Array, FrameReader, as_f32
from hypertrain.trainer.state import read_tensor_section, write_tensor_section

__all__ = ["OUTER_MAGIC", "OUTER_VERSION", "OuterState", "pack_outer", "state_key", "unpack_outer"]

OUTER_MAGIC = b"ht-outer"
OUTER_VERSION = 1
_F32_LE = np.dtype("<f4")
_SECTIONS = ("theta", "u", "center")

Tensors = dict[str, F32Array]


def _shapes(tensors: Mapping[str, F32Array]) -> dict[str, tuple[int, ...]]:
    return {name: tuple(a.shape) for name, a in tensors.items()}


@attrs.frozen(eq=False)
class OuterState:
    """The aggregator's state between rounds: dicts of float32 arrays with equal names/shapes.

    The arrays are treated as immutable: every function here returns fresh arrays.
    """

    theta: Tensors
    u: Tensors
    center: Tensors

    @classmethod
    def genesis(cls, theta: Mapping[str, F32Array]) -> OuterState:
        """Init ``theta`` (copied to float32) with zero ``u`` and ``center``."""
        th = {
            n: np.array(as_f32(n, a, "genesis theta"), dtype=np.float32) for n, a in theta.items()
        }
        zeros = {n: np.zeros_like(a) for n, a in th.items()}
        return cls(theta=th, u=zeros, center={n: np.zeros_like(a) for n, a in th.items()})

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """``{name: shape}`` of theta (the model's)."""
        return _shapes(self.theta)

    def theta_hash(self) -> str:
        """``TH(theta)``."""
        return th_hex(self.theta)

    def outer_state_hash(self) -> str:
        """``TH(u)``."""
        return th_hex(self.u)

    def center_hash(self) -> str:
        """``TH(center)``."""
        return th_hex(self.center)


def pack_outer(state: OuterState) -> bytes:
    """The deterministic blob of ``state`` (module doc); refuses mismatched u/center."""
    shapes = _shapes(state.theta)
    if _shapes(state.u) != shapes or _shapes(state.center) != shapes:
        raise Malformed("outer state: u or center differ from theta in names or shapes")
    body = b"".join(write_tensor_section(f"outer {s}", getattr(state, s))[0] for s in _SECTIONS)
    return OUTER_MAGIC + struct.pack("<I", OUTER_VERSION) + body


def unpack_outer(blob: bytes | bytearray | memoryview) -> OuterState:
    """Parse an outer-state blob strictly (module doc); arrays are fresh float32 copies."""
    reader = FrameReader(blob, "outer state")
    reader.magic(OUTER_MAGIC)
    version = reader.u32("version")
    if version != OUTER_VERSION:
        raise Malformed(f"outer state: unsupported version {version}")
    theta, u, center = (read_tensor_section(reader, "outer state", s) for s in _SECTIONS)
    reader.finish()
    shapes = _shapes(theta)
    for name, section in (("u", u), ("center", center)):
        if _shapes(section) != shapes:
            raise Malformed(f"outer state: {name} names or shapes differ from theta's")
    return OuterState(theta=theta, u=u, center=center)


def state_key(blob: bytes | bytearray | memoryview) -> str:
    """Store key of a blob: ``sha256(blob)`` as 64 lowercase hex chars."""
    return hashlib.sha256(blob).hexdigest()
