"""State blobs: lossless, deterministic, pickle-free, strictly parsed."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hypertrain.protocol.errors import Malformed
from hypertrain.protocol.tensorhash import th_hex
from hypertrain.trainer.codec import F32Array
from hypertrain.trainer.state import TrainState, pack_state, unpack_state

F32 = np.float32


def lp(b: bytes) -> bytes:
    return struct.pack("<Q", len(b)) + b


def raw_tensor(name: bytes, dims: tuple[int, ...], raw: bytes) -> bytes:
    dims_enc = b"".join(struct.pack("<Q", d) for d in dims)
    return lp(name) + struct.pack("<I", len(dims)) + dims_enc + lp(raw)


def section(tensors: list[bytes]) -> bytes:
    return struct.pack("<I", len(tensors)) + b"".join(tensors)


def blob(flags: int, sections: list[bytes], step: int | None = None, version: int = 1) -> bytes:
    head = b"ht-state" + struct.pack("<II", version, flags)
    return head + (b"" if step is None else struct.pack("<Q", step)) + b"".join(sections)


THETA = {
    "w": np.array([[1.0, -0.0], [np.inf, 2.5]], dtype=F32),
    "b": np.array([np.nan], dtype=F32),
}


def same(a: dict[str, F32Array], b: dict[str, F32Array]) -> bool:
    """Same names, shapes and bits (NaN payloads and signed zeros included)."""
    return a.keys() == b.keys() and all(
        a[k].dtype == F32 and a[k].shape == b[k].shape and a[k].tobytes() == b[k].tobytes()
        for k in a
    )


def test_layout_by_hand() -> None:
    w = np.array([1.0, 2.0], dtype=F32)
    got = pack_state({"w": w}, {"w": w * 2}, None, step=3)
    want = blob(
        0b101,
        [
            section([raw_tensor(b"w", (2,), w.astype("<f4").tobytes())]),
            section([raw_tensor(b"w", (2,), (w * 2).astype("<f4").tobytes())]),
        ],
        step=3,
    )
    assert got == want
    assert pack_state({"w": w}) == blob(0, [section([raw_tensor(b"w", (2,), w.tobytes())])])


@pytest.mark.parametrize("with_m", [False, True])
@pytest.mark.parametrize("with_v", [False, True])
@pytest.mark.parametrize("step", [None, 0, 7, 2**64 - 1])
def test_round_trip(with_m: bool, with_v: bool, step: int | None) -> None:
    m = {k: np.full_like(a, 0.5) for k, a in THETA.items()} if with_m else None
    v = {k: np.full_like(a, 0.25) for k, a in THETA.items()} if with_v else None
    state = unpack_state(pack_state(THETA, m, v, step))
    assert same(state.theta, THETA)
    assert (state.m is None) == (m is None)
    assert (state.v is None) == (v is None)
    if m is not None:
        assert state.m is not None
        assert same(state.m, m)
    if v is not None:
        assert state.v is not None
        assert same(state.v, v)
    assert state.step == step
    assert state.theta["w"].flags.writeable


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=6),
        hnp.arrays(F32, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)),
        max_size=4,
    )
)
def test_round_trip_any_state(theta: dict[str, F32Array]) -> None:
    packed = pack_state(theta, theta, theta, 1)
    state = unpack_state(packed)
    assert same(state.theta, theta)
    assert state.m is not None
    assert same(state.m, theta)
    assert pack_state(state.theta, state.m, state.v, state.step) == packed


def test_deterministic_bytes_whatever_the_input_order_and_layout() -> None:
    a = np.arange(12, dtype=F32).reshape(3, 4)
    one = pack_state({"a": a, "b": a[0]}, step=1)
    two = pack_state({"b": a[0].astype(">f4"), "a": np.asfortranarray(a)}, step=1)
    three = pack_state({"a": torch.from_numpy(a), "b": torch.from_numpy(a[0].copy())}, step=1)
    assert one == two == three


def test_theta_hash_is_th() -> None:
    state = unpack_state(pack_state(THETA))
    assert state.theta_hash() == th_hex(THETA)
    assert TrainState(theta=dict(THETA)).theta_hash() == th_hex(THETA)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"theta": {"x": np.zeros(2, dtype=np.float64)}}, "float32"),
        ({"theta": {"": np.zeros(2, dtype=F32)}}, "name"),
        ({"theta": {"x": np.zeros(2, dtype=F32)}, "m": {"y": np.zeros(2, dtype=F32)}}, "theta"),
        ({"theta": {"x": np.zeros(2, dtype=F32)}, "v": {"x": np.zeros(3, dtype=F32)}}, "theta"),
        ({"theta": {}, "step": -1}, "step"),
        ({"theta": {}, "step": 2**64}, "step"),
        ({"theta": {}, "step": True}, "step"),
        ({"theta": {}, "step": 1.0}, "step"),
    ],
)
def test_pack_refusals(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(Malformed, match=match):
        pack_state(**kwargs)


ONE = raw_tensor(b"x", (1,), b"\x00\x00\x80\x3f")


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"ht-stat" + bytes(20), "bad magic"),
        (blob(0, [section([ONE])], version=2), "version 2"),
        (blob(8, [section([ONE])]), "unknown flags"),
        (blob(0, [section([ONE])]) + b"\x00", "trailing"),
        (blob(0, [section([ONE, ONE])]), "duplicate"),
        (blob(0, [section([raw_tensor(b"y", (), bytes(4)), ONE])]), "out of UTF-8 order"),
        (blob(0, [section([raw_tensor(b"\xc3", (), bytes(4))])]), "UTF-8"),
        (blob(0, [section([raw_tensor(b"", (), bytes(4))])]), "empty"),
        (blob(0, [section([raw_tensor(b"x", (2,), bytes(4))])]), "bytes for shape"),
        (blob(0, [section([raw_tensor(b"x", (1,) * 33, bytes(4))])]), "dimensions"),
        (blob(1, [section([ONE]), section([])]), "m names or shapes"),
        (blob(2, [section([ONE]), section([raw_tensor(b"x", (1, 1), bytes(4))])]), "v names"),
        (blob(1, [section([ONE])]), "truncated"),
        (blob(4, [bytes(4)]), "truncated step"),
        (blob(4, [section([ONE])]), "trailing"),  # the step flag without a step
        (blob(0, [struct.pack("<I", 2**32 - 1)]), "cannot fit"),
    ],
)
def test_unpack_refusals(data: bytes, match: str) -> None:
    with pytest.raises(Malformed, match=match):
        unpack_state(data)


def test_every_truncation_is_refused() -> None:
    full = pack_state(THETA, THETA, THETA, 5)
    for cut in range(len(full)):
        with pytest.raises(Malformed):
            unpack_state(full[:cut])


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_hostile_bytes_only_ever_raise_malformed(data: st.DataObject) -> None:
    packed = bytearray(pack_state(THETA, THETA, None, 5))
    for _ in range(data.draw(st.integers(1, 4))):
        packed[data.draw(st.integers(0, len(packed) - 1))] = data.draw(st.integers(0, 255))
    try:
        state = unpack_state(bytes(packed))
    except Malformed:
        return
    assert all(a.dtype == F32 for a in state.theta.values())
