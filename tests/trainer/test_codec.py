"""Delta payloads (spec 5.5): byte layout, float32 arithmetic, error feedback, strict decoding."""

from __future__ import annotations

import contextlib
import hashlib
import math
import struct
import time
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hypertrain.protocol.errors import Malformed
from hypertrain.protocol.tensorhash import th_hex
from hypertrain.trainer.codec import (
    MAGIC_DENSE_INT8,
    MAX_SCALE,
    F32Array,
    compress,
    decode_payload,
    encode_dense_int8,
)

F32 = np.float32
FLT_MAX = float(np.finfo(F32).max)
MIN_NORMAL = float(np.finfo(F32).smallest_normal)
MIN_SUB = float(np.finfo(F32).smallest_subnormal)


def f32(x: float) -> float:
    """Round a Python float to float32 (exact for one +,-,*,/ of float32 operands)."""
    value: float = struct.unpack("<f", struct.pack("<f", x))[0]
    return value


def lp(b: bytes) -> bytes:
    return struct.pack("<Q", len(b)) + b


def raw_tensor(name: bytes, dims: tuple[int, ...], body: bytes) -> bytes:
    return (
        lp(name)
        + struct.pack("<I", len(dims))
        + b"".join(struct.pack("<Q", d) for d in dims)
        + (lp(body))
    )


def raw_payload(tensors: list[bytes], magic: bytes = MAGIC_DENSE_INT8) -> bytes:
    return magic + struct.pack("<I", len(tensors)) + b"".join(tensors)


def dense_body(scales: list[float], q: list[int], block: int = 256) -> bytes:
    return (
        struct.pack("<I", block)
        + b"".join(struct.pack("<f", s) for s in scales)
        + bytes(x & 0xFF for x in q)
    )


def spec_body(values: list[float]) -> bytes:
    """Independent pure-Python dense-int8 body, written from the spec text."""
    scales, codes = [], []
    for start in range(0, len(values), 256):
        block = values[start : start + 256]
        scale = f32(max(abs(x) for x in block) / 127.0)
        scale = 1.0 if scale == 0.0 else scale
        scales.append(scale)
        codes += [max(-127, min(127, round(f32(x / scale)))) for x in block]
    return dense_body(scales, codes)


def scales_of(payload: bytes, name: str) -> F32Array:
    """The scales of tensor ``name`` of a one-or-more-tensor payload (walks the framing)."""
    off = len(MAGIC_DENSE_INT8) + 4
    while True:
        (ln,) = struct.unpack_from("<Q", payload, off)
        this = payload[off + 8 : off + 8 + ln].decode()
        off += 8 + ln
        (ndim,) = struct.unpack_from("<I", payload, off)
        n = math.prod(struct.unpack_from(f"<{ndim}Q", payload, off + 4))
        off += 4 + 8 * ndim
        (blen,) = struct.unpack_from("<Q", payload, off)
        if this == name:
            nblocks = -(-n // 256)
            return np.frombuffer(payload, "<f4", nblocks, off + 12).astype(F32)
        off += 8 + blen


def per_element_scale(scales: F32Array, shape: tuple[int, ...]) -> F32Array:
    n = math.prod(shape)
    return np.repeat(scales, 256)[:n].reshape(shape)


def bound(scale: Any) -> Any:
    """|acc - decode| limit: half a step, f32 rounding of x/scale and q*scale, subnormal slack."""
    return scale.astype(np.float64) * (0.5 + 2.0**-16) + 2.0**-142


# --- byte layout ---------------------------------------------------------------------------

PINNED_INPUT = {
    "w": np.array([[1.0, -2.0, 0.5], [0.25, 127.0, -127.5]], dtype=F32),
    "a.bias": np.arange(-150, 150, dtype=F32) / F32(7.0),  # 300 values: a full and a partial block
    "z": np.zeros((0, 4), dtype=F32),
    "s": np.array(-3.0, dtype=F32),
}
PINNED_SHA256 = "66de5150307ad44ecf63be19dffbc250b62d6124d0d096fd3fbd33c7e1295dcd"


def spec_payload(tensors: dict[str, F32Array]) -> bytes:
    parts = []
    for name in sorted(tensors, key=lambda s: s.encode()):
        array = tensors[name]
        values = [float(x) for x in array.reshape(-1)]
        parts.append(raw_tensor(name.encode(), array.shape, spec_body(values)))
    return raw_payload(parts)


def test_pinned_payload_matches_independent_construction() -> None:
    payload = encode_dense_int8(PINNED_INPUT)
    assert payload == spec_payload(PINNED_INPUT)
    assert payload.startswith(b"ht-dense-int8-v1\x04\x00\x00\x00")
    assert hashlib.sha256(payload).hexdigest() == PINNED_SHA256


def test_layout_of_one_small_tensor_by_hand() -> None:
    # amax 127 -> scale exactly 1.0; 0.5 -> 0, 2.5 -> 2, -1.5 -> -2 (ties to even).
    payload = encode_dense_int8({"t": np.array([127.0, 0.5, 2.5, -1.5], dtype=F32)})
    expected = (
        b"ht-dense-int8-v1"
        + b"\x01\x00\x00\x00"
        + b"\x01\x00\x00\x00\x00\x00\x00\x00t"
        + b"\x01\x00\x00\x00"
        + b"\x04\x00\x00\x00\x00\x00\x00\x00"
        + b"\x0c\x00\x00\x00\x00\x00\x00\x00"
        + b"\x00\x01\x00\x00"
        + b"\x00\x00\x80\x3f"
        + bytes([127, 0, 2, 0xFE])
    )
    assert payload == expected


def test_names_in_utf8_byte_order() -> None:
    # UTF-8 byte order: "B" < "a", and U+FF21 < U+10000 (UTF-16 code units would say otherwise).
    names = ["a", "B", "\U00010000", "\uff21"]
    payload = encode_dense_int8({n: np.zeros(1, dtype=F32) for n in names})
    assert list(decode_payload(payload)) == sorted(names, key=lambda s: s.encode())


def test_zeros_have_scale_one() -> None:
    payload = encode_dense_int8({"z": np.array([0.0, -0.0] * 200, dtype=F32)})
    assert payload == raw_payload([raw_tensor(b"z", (400,), dense_body([1.0, 1.0], [0] * 400))])
    assert np.array_equal(scales_of(payload, "z"), [1.0, 1.0])


def test_underflowing_scale_becomes_one() -> None:
    tiny = np.array([MIN_SUB * 60, -MIN_SUB], dtype=F32)  # 60 * 2^-149 / 127 rounds to 0
    payload = encode_dense_int8({"t": tiny})
    assert np.array_equal(scales_of(payload, "t"), [1.0])
    assert np.array_equal(decode_payload(payload)["t"], [0.0, 0.0])


@pytest.mark.parametrize("n", [0, 1, 255, 256, 257, 511, 512, 513])
def test_body_length_around_block_boundaries(n: int) -> None:
    payload = encode_dense_int8({"t": np.ones(n, dtype=F32)})
    nblocks = -(-n // 256)
    assert len(payload) == 16 + 4 + (8 + 1) + 4 + 8 + 8 + 4 + 4 * nblocks + n
    assert decode_payload(payload)["t"].shape == (n,)


def test_scalar_tensor_is_one_element() -> None:
    payload = encode_dense_int8({"s": np.array(-3.0, dtype=F32)})
    assert payload == raw_payload([raw_tensor(b"s", (), spec_body([-3.0]))])
    out = decode_payload(payload)["s"]
    assert out.shape == ()
    assert out.dtype == F32
    assert float(out) == -3.0


def test_round_half_even_on_exact_ties() -> None:
    # scale = 254/127 = 2 exactly: x = 1, 3, 5, -3, 253 land on 0.5, 1.5, 2.5, -1.5, 126.5.
    x = np.array([254.0, 1.0, 3.0, 5.0, -3.0, 253.0, -7.0, 0.0], dtype=F32)
    out = decode_payload(encode_dense_int8({"t": x}))["t"]
    assert out.tolist() == [254.0, 0.0, 4.0, 4.0, -4.0, 252.0, -8.0, 0.0]


def test_division_is_float32_not_float64() -> None:
    # 0.35 / f32(0.7 / 127) is 63.49999916 exactly but 63.5 in float32: rint gives 64, not 63.
    # 0x3f7efdfc / f32(1 / 127) is 126.50000071 exactly but 126.5 in float32: 126, not 127.
    x = np.array([0x3F7EFDFC], dtype="<u4").view(F32)[0]
    assert encode_dense_int8({"t": np.array([0.7, 0.35], dtype=F32)})[-1] == 64
    assert encode_dense_int8({"t": np.array([1.0, x], dtype=F32)})[-1] == 126
    assert round(f32(0.35) / f32(f32(0.7) / 127)) == 63  # what float64 division would give
    assert round(float(x) / f32(1 / 127)) == 127


def test_matches_torch_reference_formula() -> None:
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(5000) * rng.choice([1e-30, 1e-3, 1.0, 1e20], 5000)).astype(F32)
    x[:40] = np.float32(127.0) * (np.arange(40) - 20) / F32(2.0)  # ties on scale 1.0 blocks
    t = torch.from_numpy(x)
    nblocks = -(-x.size // 256)
    pad = torch.zeros(nblocks * 256, dtype=torch.float32)
    pad[: x.size] = t
    pad = pad.view(nblocks, 256)
    scales = pad.abs().amax(1) / 127.0
    scales = torch.where(scales > 0, scales, torch.ones_like(scales))
    q = torch.round(pad / scales[:, None]).clamp(-127, 127).to(torch.int8).reshape(-1)[: x.size]
    body = struct.pack("<I", 256) + scales.numpy().astype("<f4").tobytes() + q.numpy().tobytes()
    assert encode_dense_int8({"x": x}) == raw_payload([raw_tensor(b"x", (5000,), body)])
    assert encode_dense_int8({"x": t}) == encode_dense_int8({"x": x})


# --- round trips and error bound -----------------------------------------------------------

finite_f32 = st.floats(
    width=32, allow_nan=False, allow_infinity=False, max_value=2.0**120, min_value=-(2.0**120)
)
shapes = st.one_of(
    hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=9),
    st.sampled_from([(255,), (256,), (257,), (2, 256), (3, 0, 5), (513,)]),
)


@settings(max_examples=150, deadline=None)
@given(
    hnp.arrays(F32, shapes, elements=finite_f32),
    st.sampled_from([1.0, 1e-30, 1e-40, 1e30]),
)
def test_round_trip_within_half_a_step(x: F32Array, magnitude: float) -> None:
    with np.errstate(over="ignore", under="ignore"):
        acc = np.array(x * F32(magnitude), dtype=F32)
    acc[~np.isfinite(acc)] = 0
    payload = encode_dense_int8({"t": acc})
    assert encode_dense_int8({"t": acc.copy()}) == payload
    out = decode_payload(payload)["t"]
    assert out.shape == acc.shape
    assert out.dtype == F32
    assert np.isfinite(out).all()
    scale = per_element_scale(scales_of(payload, "t"), acc.shape)
    err = np.abs(acc.astype(np.float64) - out.astype(np.float64))
    assert (err <= bound(scale)).all()
    normal = scale >= MIN_NORMAL
    assert (err[normal] <= scale[normal] * (0.5 + 2.0**-16)).all()


def test_extremes() -> None:
    top = np.float32(127.0) * MAX_SCALE  # the largest encodable magnitude
    x = np.array([top, -top, MIN_NORMAL, -MIN_SUB, 1.0, 0.0], dtype=F32)
    out = decode_payload(encode_dense_int8({"x": x}))["x"]
    assert np.isfinite(out).all()
    assert out[0] == top
    assert out[1] == -top
    assert out[2:].tolist() == [0.0, 0.0, 0.0, 0.0]  # swamped by the block's huge scale
    for v in (MIN_NORMAL, MIN_SUB, -MIN_SUB * 127):
        small = np.array([v, -v / 2, v / 3], dtype=F32)
        payload = encode_dense_int8({"s": small})
        err = np.abs(small.astype(np.float64) - decode_payload(payload)["s"])
        assert (err <= bound(scales_of(payload, "s")[0])).all()


@pytest.mark.parametrize(
    "bad", [FLT_MAX, -FLT_MAX, float(np.nextafter(F32(127) * MAX_SCALE, F32(np.inf)))]
)
def test_values_whose_decode_would_overflow_are_refused(bad: float) -> None:
    with pytest.raises(Malformed, match="too large"):
        encode_dense_int8({"x": np.array([1.0, bad], dtype=F32)})


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_input_is_refused(bad: float) -> None:
    with pytest.raises(Malformed, match="NaN or infinite"):
        encode_dense_int8({"x": np.array([1.0, bad], dtype=F32)})


@pytest.mark.parametrize(
    "tensors",
    [
        {"x": np.zeros(3, dtype=np.float64)},
        {"x": np.zeros(3, dtype=np.float16)},
        {"x": [1.0, 2.0]},
        {"x": torch.zeros(3, dtype=torch.float64)},
        {"": np.zeros(3, dtype=F32)},
        {"\ud800": np.zeros(3, dtype=F32)},
        {7: np.zeros(3, dtype=F32)},
        {"x": np.zeros((1,) * 33, dtype=F32)},
    ],
)
def test_encoder_refuses_bad_input(tensors: dict[Any, Any]) -> None:
    with pytest.raises(Malformed):
        encode_dense_int8(tensors)


def test_any_layout_and_byte_order_encode_alike() -> None:
    x = np.arange(600, dtype=F32).reshape(20, 30) / F32(3)
    want = encode_dense_int8({"x": x})
    assert encode_dense_int8({"x": np.asfortranarray(x)}) == want
    assert encode_dense_int8({"x": x.astype(">f4")}) == want
    assert encode_dense_int8({"x": torch.from_numpy(x.T.copy()).T}) == want


# --- error feedback ------------------------------------------------------------------------


def test_compress_is_encode_of_acc_and_ef_out_is_acc_minus_decode() -> None:
    rng = np.random.default_rng(1)
    delta = {
        "a": rng.standard_normal((30, 20)).astype(F32),
        "b": rng.standard_normal(7).astype(F32),
    }
    ef_in = {k: (rng.standard_normal(v.shape) * 0.01).astype(F32) for k, v in delta.items()}
    beta = 0.9
    c = compress(delta, ef_in, beta)
    acc = {k: ef_in[k] * F32(beta) + delta[k] for k in delta}
    assert c.payload == encode_dense_int8(acc)
    decoded = decode_payload(c.payload)
    for k in delta:
        assert np.array_equal(c.ef_out[k], acc[k] - decoded[k])
    assert c.delta_bytes == len(c.payload)
    assert c.delta_hash() == hashlib.sha256(c.payload).hexdigest()
    assert c.ef_out_hash() == th_hex(c.ef_out)


def test_acc_matches_torch_float32_semantics() -> None:
    rng = np.random.default_rng(2)
    d = rng.standard_normal(4096).astype(F32)
    e = rng.standard_normal(4096).astype(F32)
    for beta in (0.1, 0.9, 0.3333333333333333, 1.0, 0.0):
        td, te = torch.from_numpy(d), torch.from_numpy(e)
        acc = (te * beta + td) if beta != 1.0 else (te + td)
        assert compress({"x": td}, {"x": te}, beta).payload == encode_dense_int8({"x": acc})


def test_default_ef_in_is_zeros_and_signed_zero_follows_the_formula() -> None:
    d = {"x": np.array([-0.0, 0.5, -0.0], dtype=F32)}
    c = compress(d)
    assert c.payload == compress(d, {"x": np.zeros(3, dtype=F32)}).payload
    assert c.payload == encode_dense_int8(d)
    assert np.signbit(c.ef_out["x"]).tolist() == [False, False, False]  # 0 * 0 + -0.0 = +0.0


def test_beta_zero_ignores_ef_in() -> None:
    rng = np.random.default_rng(3)
    d = {"x": rng.standard_normal(300).astype(F32)}
    e = {"x": rng.standard_normal(300).astype(F32) * F32(1e6)}
    assert compress(d, e, 0.0).payload == encode_dense_int8(d)
    assert compress(d, e, 1.0).payload == encode_dense_int8({"x": e["x"] + d["x"]})


def test_error_feedback_tracks_the_sum_over_50_rounds() -> None:
    rng = np.random.default_rng(4)
    shape = (3, 300)
    ef: dict[str, F32Array] | None = None
    sum_delta = np.zeros(shape)
    sum_decoded = np.zeros(shape)
    for _ in range(50):
        delta = (rng.standard_normal(shape) * rng.choice([1e-4, 1e-2, 1.0], shape)).astype(F32)
        c = compress({"w": delta}, ef, 1.0)
        ef = c.ef_out
        sum_delta += delta
        sum_decoded += decode_payload(c.payload)["w"]
        scale = per_element_scale(scales_of(c.payload, "w"), shape)
        assert (np.abs(ef["w"]) <= bound(scale)).all()
        slack = 1e-5 * np.abs(sum_delta).max()  # float32 rounding of acc and ef, 50 rounds
        assert (np.abs(sum_decoded - sum_delta) <= bound(scale) + slack).all()


def test_error_feedback_recovers_what_rounding_drops() -> None:
    # One large value pins scale = 1; 0.3 rounds to 0 every round without feedback.
    delta = {"w": np.array([127.0] + [0.3] * 9, dtype=F32)}
    ef: dict[str, F32Array] | None = None
    total = np.zeros(10)
    for _ in range(20):
        c = compress(delta, ef, 1.0)
        ef = c.ef_out
        total += decode_payload(c.payload)["w"]
    assert np.abs(total[1:] - 6.0).max() <= 0.5
    no_feedback = sum(decode_payload(compress(delta).payload)["w"][1] for _ in range(20))
    assert no_feedback == 0.0


@pytest.mark.parametrize(
    ("ef_in", "beta", "match"),
    [
        ({"y": np.zeros(3, dtype=F32)}, 1.0, "names"),
        ({"x": np.zeros(4, dtype=F32)}, 1.0, "shape"),
        ({"x": np.zeros(3, dtype=np.float64)}, 1.0, "float32"),
        (None, float("nan"), "ef_beta"),
        (None, 1.5, "ef_beta"),
        (None, -0.1, "ef_beta"),
        ({"x": np.full(3, np.inf, dtype=F32)}, 0.0, "NaN or infinite"),
        ({"x": np.full(3, 3e38, dtype=F32)}, 1.0, "NaN or infinite"),
    ],
)
def test_compress_refusals(ef_in: dict[str, F32Array] | None, beta: float, match: str) -> None:
    with pytest.raises(Malformed, match=match):
        compress({"x": np.full(3, 3e38, dtype=F32)}, ef_in, beta)


# --- decoder refusals ----------------------------------------------------------------------

GOOD = raw_tensor(b"t", (2,), dense_body([1.0], [1, -1]))


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (b"ht-dense-int8-v2" + struct.pack("<I", 0), "bad magic"),
        (b"", "bad magic"),
        (raw_payload([GOOD], b"ht-sparse-v1"), "not supported"),
        (raw_payload([GOOD]) + b"\x00", "trailing"),
        (raw_payload([GOOD, GOOD]), "duplicate"),
        (raw_payload([raw_tensor(b"u", (1,), dense_body([1.0], [0])), GOOD]), "out of UTF-8 order"),
        (raw_payload([raw_tensor(b"\xff", (1,), dense_body([1.0], [0]))]), "not valid UTF-8"),
        (raw_payload([raw_tensor(b"", (1,), dense_body([1.0], [0]))]), "empty tensor name"),
        (raw_payload([raw_tensor(b"t", (2,), dense_body([1.0], [1, -1], 255))]), "block size 255"),
        (raw_payload([raw_tensor(b"t", (1,), dense_body([math.nan], [0]))]), "scale"),
        (raw_payload([raw_tensor(b"t", (1,), dense_body([math.inf], [0]))]), "scale"),
        (raw_payload([raw_tensor(b"t", (1,), dense_body([0.0], [0]))]), "scale"),
        (raw_payload([raw_tensor(b"t", (1,), dense_body([-1.0], [0]))]), "scale"),
        (raw_payload([raw_tensor(b"t", (1,), dense_body([3e36], [0]))]), "scale"),
        (raw_payload([raw_tensor(b"t", (1,), dense_body([1.0], [-128]))]), "-128"),
        (raw_payload([raw_tensor(b"t", (3,), dense_body([1.0], [1, -1]))]), "needs"),
        (raw_payload([raw_tensor(b"t", (1,) * 33, dense_body([1.0], [0]))]), "dimensions"),
        (raw_payload([raw_tensor(b"t", (0, 2**63, 2**63), dense_body([], []))]), "too large"),
        (raw_payload([raw_tensor(b"t", (2**39,), dense_body([1.0], [0]))]), "needs"),
        (raw_payload([raw_tensor(b"t", (2**41,), dense_body([1.0], [0]))]), "too large"),
        (MAGIC_DENSE_INT8 + struct.pack("<I", 2**32 - 1) + GOOD, "cannot fit"),
        (
            MAGIC_DENSE_INT8 + struct.pack("<I", 1) + struct.pack("<Q", 2**64 - 1) + bytes(20),
            "truncated",
        ),
    ],
)
def test_decoder_refusals(payload: bytes, match: str) -> None:
    with pytest.raises(Malformed, match=match):
        decode_payload(payload)


def test_every_truncation_is_refused() -> None:
    payload = encode_dense_int8(PINNED_INPUT)
    for cut in range(len(payload)):
        with pytest.raises(Malformed):
            decode_payload(payload[:cut])


@pytest.mark.parametrize("bad", ["text", None, 12, [1, 2]])
def test_non_bytes_are_refused(bad: Any) -> None:
    with pytest.raises(Malformed, match="expected bytes"):
        decode_payload(bad)


def test_bytes_like_inputs_decode() -> None:
    payload = encode_dense_int8(PINNED_INPUT)
    for form in (bytearray(payload), memoryview(payload)):
        out = decode_payload(form)
        assert all(np.array_equal(out[k], decode_payload(payload)[k]) for k in PINNED_INPUT)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_hostile_bytes_only_ever_raise_malformed(data: st.DataObject) -> None:
    payload = bytearray(encode_dense_int8(PINNED_INPUT))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(payload) - 1))
        payload[i] = data.draw(st.integers(0, 255))
    try:
        out = decode_payload(bytes(payload))
    except Malformed:
        return
    assert all(v.dtype == F32 and np.isfinite(v).all() for v in out.values())


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_after_magic_only_raise_malformed(tail: bytes) -> None:
    with contextlib.suppress(Malformed):
        decode_payload(MAGIC_DENSE_INT8 + tail)


# --- size and speed ------------------------------------------------------------------------


def example_state() -> dict[str, F32Array]:
    """The example manifest's dense model: 4 layers, d 256, d_ff 1024, vocab 259."""
    d, ff, vocab = 256, 1024, 259
    shapes: dict[str, tuple[int, ...]] = {"emb.weight": (vocab, d), "head.weight": (d, vocab)}
    shapes["norm.weight"] = (d,)
    for i in range(4):
        p = f"layers.{i:03d}."
        for k in ("wq", "wk", "wv", "wo"):
            shapes[p + k] = (d, d)
        shapes |= {p + "w1": (d, ff), p + "w3": (d, ff), p + "w2": (ff, d)}
        shapes |= {p + "attn_norm": (d,), p + "mlp_norm": (d,)}
    rng = np.random.default_rng(5)
    return {k: (rng.standard_normal(s) * 1e-3).astype(F32) for k, s in shapes.items()}


def test_example_size_and_encode_speed() -> None:
    state = example_state()
    n = sum(a.size for a in state.values())
    assert n == 4_329_216
    # CPU seconds of this process, not wall time: on a busy machine the wall clock also counts
    # the time other processes hold the cores (~0.03 s of CPU here, ~0.1 s of wall at load 8).
    t0 = time.process_time()
    c = compress(state)
    elapsed = time.process_time() - t0
    assert 1.0156 < c.delta_bytes / n < 1.0163  # 1 + 4/256 plus framing
    assert elapsed < 1.0
