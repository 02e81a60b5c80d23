"""Input names and the strict parsers of the job's files (no torch, no processes)."""

from __future__ import annotations

import json
import pickle

import attrs
import numpy as np
import pytest

from hypertrain.protocol.converter import unstructure
from hypertrain.scoring.inputs import (
    BadInput,
    check_input_name,
    delta_size,
    parse_delta,
    parse_model,
    parse_state,
    parse_trace,
    state_size,
)
from hypertrain.trainer.params import init_params, param_shapes
from hypertrain.trainer.state import pack_state
from tests.scoring.helpers import scoring_model, synthetic_delta, trace_bytes

MODEL = scoring_model()


@pytest.mark.parametrize("name", ["model.json", "state.bin", "a", "A-b_c.9", "x" * 64, "1"])
def test_valid_input_names(name: str) -> None:
    assert check_input_name(name) == name


@pytest.mark.parametrize(
    "name", ["", "../x", "/abs", "a/b", ".hidden", "a..b", "x" * 65, "a b", "é", None, 5]
)
def test_invalid_input_names_are_refused(name: object) -> None:
    with pytest.raises(BadInput, match="input name"):
        check_input_name(name)


def test_good_files_parse() -> None:
    model = parse_model(json.dumps(unstructure(MODEL)).encode())
    assert model == MODEL
    state = pack_state(init_params(MODEL))
    assert len(state) == state_size(MODEL)
    theta = parse_state(state, MODEL)
    assert {k: v.shape for k, v in theta.items()} == param_shapes(MODEL)
    payload = synthetic_delta(MODEL)
    assert len(payload) == delta_size(MODEL)
    assert set(parse_delta(payload, MODEL)) == set(theta)
    rows = parse_trace(trace_bytes(MODEL, rows=3), MODEL)
    assert rows.shape == (3, MODEL.seq_len + 1)
    assert rows.dtype == np.uint16


def _model_body() -> dict[str, object]:
    return unstructure(MODEL)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (json.dumps(_model_body() | {"extra": 1}).encode(), "extra"),
        (b"[1, 2]", "not a JSON object"),
        (b"\xff\xfe", "not a JSON document"),
        (b'{"a": 1, "a": 2}', "duplicate key"),
        (json.dumps(_model_body() | {"vocab": "259"}).encode(), "vocab"),
        (json.dumps(_model_body() | {"n_experts": 4}).encode(), "experts"),
        (b" " * (64 * 1024 + 1), "at most"),
    ],
)
def test_bad_model_json(data: bytes, problem: str) -> None:
    with pytest.raises(BadInput, match=r"^model\.json: ") as info:
        parse_model(data)
    assert problem in str(info.value)
    assert "\n" not in str(info.value)


def test_state_of_another_shape_is_refused() -> None:
    other = attrs.evolve(MODEL, d_ff=128)
    with pytest.raises(BadInput, match=r"^state\.bin: .* bytes"):
        parse_state(pack_state(init_params(other)), MODEL)
    theta = init_params(MODEL)
    theta["emb.weight"] = theta["emb.weight"].reshape(MODEL.d_model, MODEL.vocab)
    with pytest.raises(BadInput, match=r"^state\.bin: tensors do not fit the model"):
        parse_state(pack_state(theta), MODEL)


def test_pickle_given_as_state_is_refused_unread() -> None:
    data = pickle.dumps(init_params(MODEL))
    with pytest.raises(BadInput, match=r"^state\.bin: "):
        parse_state(data, MODEL)
    padded = data[: state_size(MODEL)].ljust(state_size(MODEL), b"\0")
    with pytest.raises(BadInput, match=r"^state\.bin: .*magic"):
        parse_state(padded, MODEL)


def test_state_with_optimizer_moments_or_nan_is_refused() -> None:
    theta = init_params(MODEL)
    with pytest.raises(BadInput, match=r"^state\.bin: "):
        parse_state(pack_state(theta, m=theta, v=theta, step=1), MODEL)
    theta["norm.weight"][0] = np.nan
    with pytest.raises(BadInput, match=r"^state\.bin: .*NaN"):
        parse_state(pack_state(theta), MODEL)


def test_truncated_or_corrupt_delta_is_refused() -> None:
    payload = synthetic_delta(MODEL)
    with pytest.raises(BadInput, match=r"^delta\.bin: .* bytes"):
        parse_delta(payload[:-1], MODEL)
    broken = bytearray(payload)
    broken[:4] = b"XXXX"
    with pytest.raises(BadInput, match=r"^delta\.bin: .*magic"):
        parse_delta(bytes(broken), MODEL)


@pytest.mark.parametrize("size", [0, 1, 2 * (64 + 1) + 1, 2 * (64 + 1) * 3 - 2])
def test_trace_of_wrong_size_is_refused(size: int) -> None:
    with pytest.raises(BadInput, match=r"^trace\.u16: .* not a positive multiple of 130"):
        parse_trace(b"\0" * size, MODEL)


def test_trace_token_out_of_vocab_and_too_many_rows_are_refused() -> None:
    rows = np.zeros((2, MODEL.seq_len + 1), dtype="<u2")
    rows[1, 5] = MODEL.vocab
    with pytest.raises(BadInput, match=r"^trace\.u16: token id 259 is not below vocab 259"):
        parse_trace(rows.tobytes(), MODEL)
    with pytest.raises(BadInput, match=r"^trace\.u16: 3 rows, at most 2"):
        parse_trace(trace_bytes(MODEL, rows=3), MODEL, max_rows=2)
