"""TH(state), the tensor-state hash of spec 2.5, over numpy and torch float32 tensors."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hypertrain.protocol.errors import Malformed
from hypertrain.protocol.tensorhash import as_f32_le, entry_digest, shape_enc, th_bytes, th_hex


def lp(x: bytes) -> bytes:
    return len(x).to_bytes(8, "little") + x


def hand_entry(name: str, shape: tuple[int, ...], values: list[float]) -> bytes:
    enc = len(shape).to_bytes(4, "little") + b"".join(d.to_bytes(8, "little") for d in shape)
    raw = b"".join(struct.pack("<f", v) for v in values)
    return hashlib.sha256(lp(name.encode("utf-8")) + lp(b"f32") + lp(enc) + lp(raw)).digest()


def test_hand_computed_tiny_state() -> None:
    state = {
        "w": np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32),
        "b": np.array([0.5, -0.25], dtype=np.float32),
        "Z": np.array(7.0, dtype=np.float32),  # 0-d: ndim 0, no dims
        "é": np.zeros((0, 2), dtype=np.float32),  # empty, two-byte UTF-8 name
    }
    entries = {
        "w": hand_entry("w", (2, 3), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
        "b": hand_entry("b", (2,), [0.5, -0.25]),
        "Z": hand_entry("Z", (), [7.0]),
        "é": hand_entry("é", (0, 2), []),
    }
    # Sorted by UTF-8 bytes: "Z" (0x5a) < "b" < "w" < "é" (0xc3 0xa9).
    expected = hashlib.sha256(entries["Z"] + entries["b"] + entries["w"] + entries["é"])
    assert th_bytes(state) == expected.digest()
    assert th_hex(state) == expected.hexdigest()
    # One explicit byte string, so the helper above is pinned as well.
    z_entry = (
        b"\x01" + b"\x00" * 7 + b"Z"
        + b"\x03" + b"\x00" * 7 + b"f32"
        + b"\x04" + b"\x00" * 7 + b"\x00\x00\x00\x00"
        + b"\x04" + b"\x00" * 7 + b"\x00\x00\xe0\x40"
    )  # fmt: skip
    assert entries["Z"] == hashlib.sha256(z_entry).digest()


def test_names_sort_by_utf8_bytes_not_insertion_or_numeric_order() -> None:
    a = np.ones(1, np.float32)
    names = ["layers.10", "layers.9", "B", "a", "\U0001f600", "\ue000"]
    expected = hashlib.sha256(
        b"".join(hand_entry(n, (1,), [1.0]) for n in sorted(names, key=str.encode))
    ).digest()
    assert th_bytes({n: a for n in names}) == expected
    assert th_bytes({n: a for n in reversed(names)}) == expected


def test_empty_state_is_sha256_of_nothing() -> None:
    assert th_hex({}) == hashlib.sha256(b"").hexdigest()


def test_values_shapes_and_names_all_matter() -> None:
    base = th_hex({"x": np.arange(6, dtype=np.float32).reshape(2, 3)})
    assert th_hex({"x": np.arange(6, dtype=np.float32).reshape(3, 2)}) != base
    assert th_hex({"x": np.arange(6, dtype=np.float32)}) != base
    assert th_hex({"y": np.arange(6, dtype=np.float32).reshape(2, 3)}) != base
    changed = np.arange(6, dtype=np.float32).reshape(2, 3)
    changed[1, 2] = np.nextafter(changed[1, 2], np.float32(10))
    assert th_hex({"x": changed}) != base
    # -0.0 and 0.0 differ bitwise, so they hash differently.
    assert th_hex({"x": np.array([0.0], np.float32)}) != th_hex({"x": np.array([-0.0], np.float32)})


def test_torch_and_numpy_agree() -> None:
    gen = torch.Generator().manual_seed(0)
    t = {"a": torch.randn(4, 5, generator=gen), "b": torch.randn(3, generator=gen)}
    n = {k: v.numpy().copy() for k, v in t.items()}
    assert th_hex(t) == th_hex(n)
    mixed = {"a": t["a"], "b": n["b"]}
    assert th_hex(mixed) == th_hex(n)


def test_torch_special_tensors() -> None:
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    reference = th_hex({"x": np.arange(12, dtype=np.float32).reshape(3, 4).T.copy()})
    assert th_hex({"x": base.t()}) == reference  # non-contiguous view
    grad = base.clone().requires_grad_(True)
    assert th_hex({"x": grad}) == th_hex({"x": base})
    assert th_hex({"x": torch.tensor(2.5)}) == th_hex({"x": np.array(2.5, np.float32)})
    assert th_hex({"x": base[:, ::2]}) == th_hex({"x": base[:, ::2].contiguous()})


def test_big_endian_and_fortran_order_hash_like_little_endian_c_order() -> None:
    le = np.arange(24, dtype="<f4").reshape(2, 3, 4) / 7
    be = le.astype(">f4")
    assert be.tobytes() != le.tobytes()
    assert th_hex({"x": be}) == th_hex({"x": le})
    fortran = np.asfortranarray(le)
    assert th_hex({"x": fortran}) == th_hex({"x": le})
    assert th_hex({"x": le[:, ::-1, ::2]}) == th_hex({"x": np.ascontiguousarray(le[:, ::-1, ::2])})
    assert th_hex({"x": np.array(3.0, ">f4")}) == th_hex({"x": np.array(3.0, "<f4")})


def test_normalisation_copies_only_when_needed() -> None:
    a = np.arange(6, dtype="<f4")
    assert as_f32_le("a", a) is a
    t = torch.arange(6, dtype=torch.float32)
    assert np.shares_memory(as_f32_le("t", t), t.numpy())


@pytest.mark.parametrize(
    "tensor",
    [
        np.zeros(3, np.float64),
        np.zeros(3, np.float16),
        np.zeros(3, np.int32),
        np.zeros(3, np.uint32),
        np.zeros(3, np.complex64),
        torch.zeros(3, dtype=torch.float64),
        torch.zeros(3, dtype=torch.bfloat16),
        torch.zeros(3, dtype=torch.float16),
        torch.zeros(3, dtype=torch.int32),
        [1.0, 2.0],
        1.0,
        np.float32(1.0),
        b"\x00\x00\x80\x3f",
    ],
    ids=repr,
)
def test_non_f32_is_refused(tensor: Any) -> None:
    with pytest.raises(Malformed):
        th_hex({"x": tensor})


def test_non_str_names_are_refused() -> None:
    with pytest.raises(Malformed):
        th_hex({1: np.zeros(1, np.float32)})  # type: ignore[dict-item]
    with pytest.raises(Malformed):
        th_hex({b"x": np.zeros(1, np.float32)})  # type: ignore[dict-item]
    with pytest.raises(Malformed):
        th_hex({"\ud800": np.zeros(1, np.float32)})  # not encodable as UTF-8


def test_duplicate_names_are_refused() -> None:
    class Twice(Mapping[str, Any]):
        def __getitem__(self, key: str) -> Any:
            return np.zeros(1, np.float32)

        def __iter__(self) -> Iterator[str]:
            return iter(["x", "x"])

        def __len__(self) -> int:
            return 2

    with pytest.raises(Malformed):
        th_hex(Twice())


def test_state_must_be_a_mapping() -> None:
    with pytest.raises(Malformed):
        th_hex([("x", np.zeros(1, np.float32))])  # type: ignore[arg-type]


def test_entry_digest_from_raw_bytes_matches_arrays() -> None:
    a = np.arange(6, dtype="<f4").reshape(2, 3)
    assert entry_digest("a", (2, 3), a.tobytes()) == hand_entry("a", (2, 3), list(range(6)))
    assert entry_digest("a", (2, 3), a) == entry_digest("a", (2, 3), a.tobytes())
    expected = hashlib.sha256(hand_entry("a", (2, 3), list(range(6)))).digest()
    assert th_bytes({"a": a}) == expected
    with pytest.raises(Malformed):
        entry_digest("a", (2, 3), a.tobytes()[:-4])  # byte count does not match the shape
    with pytest.raises(Malformed):
        entry_digest("a", (2, -3), a.tobytes())


def test_shape_enc() -> None:
    assert shape_enc(()) == b"\x00\x00\x00\x00"
    assert shape_enc((2, 3)) == b"\x02\x00\x00\x00" + (2).to_bytes(8, "little") + (3).to_bytes(
        8, "little"
    )
    for bad in ((-1,), (1.0,), (True,), (2**64,)):
        with pytest.raises(Malformed):
            shape_enc(bad)  # type: ignore[arg-type]


@given(
    hnp.arrays(
        dtype=st.sampled_from([np.dtype("<f4"), np.dtype(">f4")]),
        shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5),
        elements=st.floats(width=32, allow_nan=False),
    )
)
def test_any_f32_array_hashes_its_little_endian_c_order_bytes(array: np.ndarray[Any, Any]) -> None:
    raw = array.astype("<f4").tobytes(order="C")
    enc = len(array.shape).to_bytes(4, "little") + b"".join(
        d.to_bytes(8, "little") for d in array.shape
    )
    entry = hashlib.sha256(lp(b"t") + lp(b"f32") + lp(enc) + lp(raw)).digest()
    assert th_bytes({"t": array}) == hashlib.sha256(entry).digest()
    assert th_bytes({"t": torch.from_numpy(array.astype("<f4"))}) == th_bytes({"t": array})
