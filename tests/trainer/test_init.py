"""Philox4x32-10, 24-bit uniforms and the pure-function init (spec 5.2)."""

from __future__ import annotations

import math

import attrs
import numpy as np
import pytest

from hypertrain.protocol.f32 import f32_from_hex
from hypertrain.protocol.hashes import rng_ctr
from hypertrain.protocol.tensorhash import th_hex
from hypertrain.protocol.testmode import decoder_param_count
from hypertrain.trainer.errors import UnsupportedModel
from hypertrain.trainer.params import init_params, init_state_hash, param_shapes
from hypertrain.trainer.philox import philox4x32_10, stream_u32, uniform24
from tests.trainer.helpers import tiny_manifest

# Random123 kat_vectors for philox4x32_10 (counter, key, output).
KATS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]

TEST_MODE_INIT_HASH = "cf66f8ef9cec9ca16c2b88107248321c2a9aa5f86b042ca0ba5d67e847d267c2"
"""TH(init_params) of the test-mode manifest's model (d 64, 2 layers, vocab 259, seed 0)."""


@pytest.mark.parametrize(("ctr", "key", "expected"), KATS)
def test_philox_known_answers(
    ctr: tuple[int, ...], key: tuple[int, int], expected: tuple[int, ...]
) -> None:
    out = philox4x32_10(ctr[0], ctr[1], ctr[2], ctr[3], key[0], key[1])
    assert tuple(int(x) for x in out) == expected


def test_philox_is_vectorized_per_counter() -> None:
    c0 = np.array([0, 0x243F6A88], dtype=np.uint64)
    c1 = np.array([0, 0x85A308D3], dtype=np.uint64)
    c2 = np.array([0, 0x13198A2E], dtype=np.uint64)
    c3 = np.array([0, 0x03707344], dtype=np.uint64)
    words = philox4x32_10(c0, c1, c2, c3, 0xA4093822, 0x299F31D0)
    assert [int(w[1]) for w in words] == [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]
    single = philox4x32_10(0, 0, 0, 0, 0xA4093822, 0x299F31D0)
    assert [int(w[0]) for w in words] == [int(w) for w in single]


def test_stream_layout_and_uniform24() -> None:
    key = (7 << 32) | 3
    words = stream_u32(key, 10)
    for i in range(10):
        block = philox4x32_10(i // 4, 0, 0, 0, 3, 7)
        assert int(words[i]) == int(block[i % 4])
    u = uniform24(key, 10)
    assert u.dtype == np.float64
    assert np.array_equal(u, (words >> 8).astype(np.float64) / 2**24)
    big = uniform24(123, 100_000)
    assert big.min() >= 0.0
    assert big.max() < 1.0
    assert np.all(big * 2**24 == np.floor(big * 2**24))  # on the 2^-24 grid
    assert abs(big.mean() - 0.5) < 0.01


def test_param_shapes_and_count() -> None:
    model = tiny_manifest().model
    shapes = param_shapes(model)
    assert list(shapes) == sorted(shapes)
    assert shapes["layers.001.wk"] == (32, 16)  # kv = 2 heads * hd 8
    assert shapes["head.weight"] == (32, 64)
    assert shapes["emb.weight"] == (64, 32)
    assert sum(math.prod(s) for s in shapes.values()) == model.param_count
    assert model.param_count == decoder_param_count(
        vocab=64, n_layers=2, d_model=32, n_heads=4, n_kv_heads=2, d_ff=48
    )


def test_moe_is_refused() -> None:
    model = attrs.evolve(tiny_manifest().model, n_experts=4, top_k_experts=2)
    with pytest.raises(UnsupportedModel, match="mixture-of-experts"):
        param_shapes(model)


def test_init_is_pure_and_follows_the_rule() -> None:
    model = tiny_manifest().model
    a_params, b_params = init_params(model), init_params(model)
    assert th_hex(a_params) == th_hex(b_params) == init_state_hash(model)
    a = f32_from_hex(model.init_std) * math.sqrt(3.0)
    names = list(param_shapes(model))
    for index, name in enumerate(names):
        p = a_params[name]
        assert p.dtype == np.float32
        if name.endswith("_norm") or name == "norm.weight":
            assert np.all(p == 1.0)
            continue
        u = uniform24(rng_ctr(f"init:{model.init_seed}", 0, 0, index), p.size)
        assert np.array_equal(p.ravel(), (a * (2.0 * u - 1.0)).astype(np.float32))
        assert np.abs(p).max() <= a
    assert init_state_hash(attrs.evolve(model, init_seed=1)) != init_state_hash(model)


def test_pinned_init_hash_of_the_test_mode_manifest() -> None:
    from hypertrain.protocol.example import example_manifest
    from hypertrain.protocol.testmode import build_test_mode_manifest

    manifest, _ = build_test_mode_manifest(coord_pubkey=example_manifest().coord_pubkey)
    assert init_state_hash(manifest.model) == TEST_MODE_INIT_HASH
