"""OuterState blobs: lossless, deterministic, strictly parsed; hashes are TH of each part."""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hypertrain.aggregator.outerstate import OuterState, pack_outer, state_key, unpack_outer
from hypertrain.protocol.errors import Malformed
from hypertrain.protocol.tensorhash import th_hex

F32 = np.float32


def state() -> OuterState:
    theta = {"w": np.arange(6, dtype=F32).reshape(2, 3), "b": np.array(-0.0, F32)}
    s = OuterState.genesis(theta)
    return OuterState(
        theta=s.theta, u={n: np.asarray(a + F32(1)) for n, a in s.u.items()}, center=s.center
    )


def test_genesis_and_hashes() -> None:
    s = OuterState.genesis({"x": np.ones(3, F32)})
    assert not s.u["x"].any()
    assert not s.center["x"].any()
    assert s.theta_hash() == th_hex({"x": np.ones(3, F32)})
    assert s.outer_state_hash() == s.center_hash() == th_hex({"x": np.zeros(3, F32)})


def test_round_trip_and_determinism() -> None:
    s = state()
    blob = pack_outer(s)
    assert blob == pack_outer(unpack_outer(blob))
    back = unpack_outer(blob)
    assert (back.theta_hash(), back.outer_state_hash(), back.center_hash()) == (
        s.theta_hash(),
        s.outer_state_hash(),
        s.center_hash(),
    )
    assert np.signbit(back.theta["b"])
    assert back.theta["b"].shape == ()
    assert state_key(blob) == hashlib.sha256(blob).hexdigest()


@settings(max_examples=50)
@given(
    hnp.arrays(
        np.float32,
        hnp.array_shapes(min_dims=0, max_dims=3, max_side=4),
        elements=st.floats(width=32),
    )
)
def test_round_trip_any_bits(a: np.ndarray) -> None:
    s = OuterState(theta={"t": a}, u={"t": a}, center={"t": a})
    back = unpack_outer(pack_outer(s))
    assert back.u["t"].view(np.uint32).tobytes() == a.view(np.uint32).tobytes()


def test_pack_refuses_mismatched_sections() -> None:
    s = state()
    with pytest.raises(Malformed):
        pack_outer(OuterState(theta=s.theta, u={"w": s.u["w"]}, center=s.center))


def _blob_with_center(center_section: bytes) -> bytes:
    blob = pack_outer(OuterState.genesis({"x": np.ones(1, F32)}))
    one_section = struct.pack("<I", 1) + struct.pack("<Q", 1) + b"x" + struct.pack("<IQ", 1, 1)
    one_section += struct.pack("<Q", 4) + b"\0\0\0\0"
    assert blob.endswith(one_section)
    return blob[: -len(one_section)] + center_section


@pytest.mark.parametrize(
    "mutate",
    [
        lambda b: b"ht-outeR" + b[8:],
        lambda b: b[:8] + struct.pack("<I", 2) + b[12:],
        lambda b: b[:-1],
        lambda b: b + b"\0",
        lambda b: _blob_with_center(struct.pack("<I", 0)),
        lambda b: _blob_with_center(
            struct.pack("<IQ", 1, 1) + b"y" + struct.pack("<IQQ", 1, 1, 4) + b"\0" * 4
        ),
        lambda b: _blob_with_center(
            struct.pack("<IQ", 1, 1) + b"x" + struct.pack("<IQQ", 1, 1, 3) + b"\0" * 3
        ),
    ],
)
def test_unpack_refuses(mutate) -> None:  # type: ignore[no-untyped-def]
    blob = pack_outer(OuterState.genesis({"x": np.ones(1, F32)}))
    with pytest.raises(Malformed):
        unpack_outer(mutate(blob))
