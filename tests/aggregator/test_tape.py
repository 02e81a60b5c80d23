"""The event tape ``ht-tape-v1``: build, seal, key, strict parse, verify, replay (spec 7)."""

from __future__ import annotations

import hashlib
from typing import Any

import attrs
import numpy as np
import pytest

from hypertrain.aggregator.merge import Params, aggregate_round
from hypertrain.aggregator.outerstate import OuterState, pack_outer
from hypertrain.aggregator.tape import (
    SignedTape,
    TapeBody,
    build_tape_body,
    parse_signed_tape,
    seal_tape,
    tape_bytes,
    tape_key,
    verify_tape,
)
from hypertrain.aggregator.tape_replay import ReplayReport, TapeMismatch, replay_tape
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.errors import Malformed, SignatureError, UnauthorizedSigner
from hypertrain.protocol.f32 import f32_hex
from hypertrain.protocol.hashes import event_tape_signed_bytes
from hypertrain.protocol.jcs import canonical_json
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import OuterSpec
from hypertrain.trainer.codec import decode_payload, encode_dense_int8

RUN_ID = "ab" * 32
COORD = Keypair.from_seed(b"\x01" * 32)
MINERS = sorted(Keypair.from_seed(bytes([i]) * 32).ss58 for i in (2, 3, 4))


def _h(tag: str) -> str:
    return hashlib.sha256(tag.encode()).hexdigest()


@attrs.frozen
class _Params:
    opt: str = "nesterov"
    lr: float = 0.4
    momentum: float = 0.9
    preclip_norm: float = 10.0
    cclip_tau: float = 1.0
    cclip_iters: int = 1


@attrs.frozen
class _State:
    tag: str

    def theta_hash(self) -> str:
        return _h(self.tag + "/theta")

    def outer_state_hash(self) -> str:
        return _h(self.tag + "/u")

    def center_hash(self) -> str:
        return _h(self.tag + "/center")


@attrs.frozen
class _Flag:
    a: str
    b: str
    overlap: float
    cosine: float


@attrs.frozen
class _Result:
    state_out: _State
    inputs: tuple[tuple[str, str], ...]
    preclipped: tuple[str, ...]
    copy_flags: tuple[_Flag, ...]
    raise_q: tuple[str, ...]


def _body() -> TapeBody:
    third = f32_hex(1 / 3)
    result = _Result(
        state_out=_State("out"),
        inputs=tuple((hk, third) for hk in MINERS[:2]),
        preclipped=(MINERS[1],),
        copy_flags=(_Flag(MINERS[0], MINERS[1], 0.5, 0.25),),
        raise_q=(MINERS[1], MINERS[0]),
    )
    return build_tape_body(
        RUN_ID,
        3,
        _Params(),
        _h("prev-key"),
        _State("prev"),
        result,
        _h("out-key"),
        {hk: _h(f"delta/{hk}") for hk in MINERS},
        [MINERS[2]],
    )


def test_body_json_shape() -> None:
    body = unstructure(_body())
    assert list(body) == [
        "v",
        "run_id",
        "kind",
        "w",
        "region",
        "k",
        "params",
        "prev_state",
        "prev_theta_hash",
        "inputs",
        "excluded",
        "screens",
        "out_state",
        "theta_hash",
        "outer_state_hash",
        "center_hash",
    ]
    assert body["v"] == "ht-tape-v1"
    assert (body["kind"], body["region"], body["k"], body["w"]) == ("global", "", 0, 3)
    assert body["params"] == {
        "opt": "nesterov",
        "lr": f32_hex(0.4),
        "momentum": f32_hex(0.9),
        "preclip_norm": f32_hex(10.0),
        "cclip_tau": f32_hex(1.0),
        "cclip_iters": 1,
    }
    assert body["inputs"][0] == {
        "id": MINERS[0],
        "source": "delta",
        "object": _h(f"delta/{MINERS[0]}"),
        "weight": f32_hex(1 / 3),
    }
    assert body["excluded"] == [MINERS[2]]
    assert body["screens"] == {
        "preclipped": [MINERS[1]],
        "copy_flags": [
            {"a": MINERS[0], "b": MINERS[1], "overlap": "0000003f", "cosine": "0000803e"}
        ],
        "raise_q": MINERS[:2],
    }
    assert body["prev_theta_hash"] == _h("prev/theta")
    assert body["theta_hash"] == _h("out/theta")


def test_seal_verify_round_trip_and_key() -> None:
    signed = seal_tape(COORD, _body())
    verify_tape(signed, coord_ss58=COORD.ss58)
    raw = tape_bytes(signed)
    assert tape_key(signed) == hashlib.sha256(raw).hexdigest()
    assert tape_key(signed) == tape_key(seal_tape(COORD, _body()))  # ed25519 is deterministic
    again = parse_signed_tape(raw)
    assert again == signed
    assert canonical_json(unstructure(again)) == raw
    assert COORD.sign(event_tape_signed_bytes(unstructure(signed.body), RUN_ID)).hex() == signed.sig


def test_wrong_signer_and_bad_signature() -> None:
    other = Keypair.from_seed(b"\x09" * 32)
    with pytest.raises(UnauthorizedSigner):
        verify_tape(seal_tape(other, _body()), coord_ss58=COORD.ss58)
    signed = seal_tape(COORD, _body())
    forged = attrs.evolve(signed, sig=other.sign(b"x").hex())
    with pytest.raises(SignatureError):
        verify_tape(forged, coord_ss58=COORD.ss58)


def _set(obj: Any, path: list[str | int], value: object) -> None:
    for part in path[:-1]:
        obj = obj[part]
    obj[path[-1]] = value


TAMPER: list[tuple[list[str | int], object]] = [
    (["run_id"], "cd" * 32),
    (["w"], 4),
    (["params", "lr"], f32_hex(0.5)),
    (["params", "cclip_iters"], 2),
    (["params", "opt"], "sparseloco"),
    (["prev_state"], _h("x")),
    (["prev_theta_hash"], _h("x")),
    (["inputs", 0, "object"], _h("x")),
    (["inputs", 1, "weight"], f32_hex(0.5)),
    (["excluded"], []),
    (["screens", "preclipped"], []),
    (["screens", "copy_flags", 0, "cosine"], f32_hex(0.75)),
    (["screens", "raise_q"], [MINERS[0]]),
    (["out_state"], _h("x")),
    (["theta_hash"], _h("x")),
    (["outer_state_hash"], _h("x")),
    (["center_hash"], _h("x")),
]


@pytest.mark.parametrize(("path", "value"), TAMPER, ids=[".".join(map(str, p)) for p, _ in TAMPER])
def test_tampering_any_body_field_breaks_the_signature(
    path: list[str | int], value: object
) -> None:
    data = unstructure(seal_tape(COORD, _body()))
    _set(data["body"], path, value)
    tampered = parse_signed_tape(data)
    with pytest.raises(SignatureError):
        verify_tape(tampered, coord_ss58=COORD.ss58)


@pytest.mark.parametrize(
    "path",
    [
        ["extra"],
        ["body", "extra"],
        ["body", "params", "extra"],
        ["body", "inputs", 0, "extra"],
        ["body", "screens", "extra"],
        ["body", "screens", "copy_flags", 0, "extra"],
    ],
)
def test_parse_refuses_extra_keys(path: list[str | int]) -> None:
    data = unstructure(seal_tape(COORD, _body()))
    _set(data, path, 1)
    with pytest.raises(Malformed, match="unknown field"):
        parse_signed_tape(data)


@pytest.mark.parametrize(
    "path",
    [["sig"], ["body", "v"], ["body", "center_hash"], ["body", "inputs", 0, "weight"]],
)
def test_parse_refuses_missing_keys(path: list[str | int]) -> None:
    data = unstructure(seal_tape(COORD, _body()))
    obj: Any = data
    for part in path[:-1]:
        obj = obj[part]
    del obj[path[-1]]
    with pytest.raises(Malformed, match="required field missing"):
        parse_signed_tape(data)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (["body", "v"], "ht-tape-v2"),
        (["body", "kind"], "regional"),
        (["body", "region"], "eu"),
        (["body", "k"], 1),
        (["body", "w"], True),
        (["body", "inputs", 0, "source"], "regional"),
        (["body", "inputs", 0, "weight"], 0.5),
        (["body", "excluded"], [MINERS[1]]),  # also an input
        (["body", "excluded"], [MINERS[2], MINERS[2]]),
        (["body", "screens", "raise_q"], [MINERS[1], MINERS[0]]),
        (["body", "screens", "copy_flags", 0, "b"], MINERS[0]),
        (["signer"], "not-an-address"),
        (["sig"], "00"),
    ],
)
def test_parse_refuses_bad_values(path: list[str | int], value: object) -> None:
    data = unstructure(seal_tape(COORD, _body()))
    _set(data, path, value)
    with pytest.raises(Malformed):
        parse_signed_tape(data)


def test_parse_refuses_unsorted_inputs_and_non_json() -> None:
    data = unstructure(seal_tape(COORD, _body()))
    data["body"]["inputs"].reverse()
    with pytest.raises(Malformed, match="sorted"):
        parse_signed_tape(data)
    with pytest.raises(Malformed):
        parse_signed_tape(b"[1, 2")
    with pytest.raises(Malformed):
        parse_signed_tape(b"[]")


def test_build_refuses_input_without_delta_hash() -> None:
    body = _body()
    result = _Result(_State("out"), ((MINERS[0], f32_hex(1.0)),), (), (), ())
    with pytest.raises(Malformed, match="no delta hash"):
        build_tape_body(RUN_ID, 0, _Params(), _h("p"), _State("p"), result, _h("o"), {}, [])
    assert isinstance(seal_tape(COORD, body), SignedTape)


# --- replay of a real merge ---------------------------------------------------------------------


def _outer(preclip_norm: float = 1.5, lr: float = 0.4) -> Params:
    spec = {
        "opt": "nesterov",
        "lr": f32_hex(lr),
        "momentum": f32_hex(0.9),
        "topk_frac": f32_hex(1.0),
        "bits": 8,
        "ef_beta": f32_hex(0.0),
        "preclip_norm": f32_hex(preclip_norm),
        "cclip_tau": f32_hex(1.0),
        "cclip_iters": 2,
        "center": "prev_outer_update",
    }
    return Params.from_outer(structure(OuterSpec, spec))


def _delta(rng: np.random.Generator, scale: float) -> dict[str, np.ndarray[Any, Any]]:
    return {
        "b.weight": (rng.standard_normal((2, 3)) * scale).astype(np.float32),
        "a.bias": (rng.standard_normal(5) * scale).astype(np.float32),
    }


@attrs.define
class _Round:
    """A merged round: the object store, the prev state and the tape the coordinator sealed."""

    store: dict[str, bytes]
    prev: OuterState
    signed: SignedTape
    params: Params
    spare_object: str

    def load(self, key: str) -> bytes:
        return self.store[key]

    def replay(self, signed: SignedTape | None = None) -> ReplayReport:
        return replay_tape(
            signed or self.signed,
            coord_ss58=COORD.ss58,
            load_object=self.load,
            outer_params=self.params,
        )

    def resealed(self, path: list[str | int], value: object) -> SignedTape:
        data = unstructure(self.signed)
        _set(data["body"], path, value)
        return seal_tape(COORD, parse_signed_tape(data).body)


def _put(store: dict[str, bytes], data: bytes) -> str:
    key = hashlib.sha256(data).hexdigest()
    store[key] = data
    return key


@pytest.fixture
def merged() -> _Round:
    rng = np.random.default_rng(7)
    store: dict[str, bytes] = {}
    # round 1 starts from a state with non-zero u and center
    genesis = OuterState.genesis(_delta(rng, 1.0))
    prev = OuterState(genesis.theta, u=_delta(rng, 0.1), center=_delta(rng, 0.2))
    prev_key = _put(store, pack_outer(prev))
    # MINERS[0] is large (preclipped), MINERS[1] copies MINERS[0], MINERS[2] is excluded
    first = _delta(rng, 1.0)
    raw = {MINERS[0]: first, MINERS[1]: first, MINERS[2]: _delta(rng, 0.3)}
    hashes = {hk: _put(store, encode_dense_int8(d)) for hk, d in raw.items()}
    spare = _put(store, encode_dense_int8(_delta(rng, 0.3)))
    extra = Keypair.from_seed(b"\x05" * 32).ss58
    raw[extra] = _delta(rng, 0.3)
    hashes[extra] = _put(store, encode_dense_int8(raw[extra]))
    decoded = {hk: decode_payload(store[hashes[hk]]) for hk in raw}
    params = _outer()
    excluded = [MINERS[2]]
    result = aggregate_round(prev, decoded, params, excluded=excluded)
    out_key = _put(store, pack_outer(result.state_out))
    body = build_tape_body(RUN_ID, 1, params, prev_key, prev, result, out_key, hashes, excluded)
    return _Round(store, prev, seal_tape(COORD, body), params, spare)


def test_replay_of_a_real_merge(merged: _Round) -> None:
    body = merged.signed.body
    assert len(body.inputs) == 3
    assert body.excluded == (MINERS[2],)
    assert len(body.screens.preclipped) == 2
    assert len(body.screens.copy_flags) == 1
    assert len(body.screens.raise_q) == 2
    report = merged.replay()
    assert report.tape_key == tape_key(merged.signed)
    assert (report.w, report.n_inputs, report.out_state) == (1, 3, body.out_state)
    assert report.state.theta_hash() == body.theta_hash
    assert hashlib.sha256(pack_outer(report.state)).hexdigest() == body.out_state
    again = parse_signed_tape(tape_bytes(merged.signed))
    assert merged.replay(again).out_state == body.out_state


def _mismatch(merged: _Round, signed: SignedTape) -> str:
    with pytest.raises(TapeMismatch) as info:
        merged.replay(signed)
    return info.value.field


def test_replay_detects_a_swapped_delta_object(merged: _Round) -> None:
    small = next(i for i, item in enumerate(merged.signed.body.inputs) if item.id not in MINERS)
    signed = merged.resealed(["inputs", small, "object"], merged.spare_object)
    assert _mismatch(merged, signed) == "out_state"
    copied = merged.signed.body.screens.preclipped[0]
    big = next(i for i, item in enumerate(merged.signed.body.inputs) if item.id == copied)
    signed = merged.resealed(["inputs", big, "object"], merged.spare_object)
    assert _mismatch(merged, signed).startswith("screens.preclipped")


def test_replay_detects_a_store_returning_other_bytes(merged: _Round) -> None:
    key = merged.signed.body.inputs[0].object
    merged.store[key] = merged.store[merged.spare_object]
    assert _mismatch(merged, merged.signed) == "inputs[0].object"


def test_replay_detects_a_changed_weight(merged: _Round) -> None:
    signed = merged.resealed(["inputs", 1, "weight"], f32_hex(0.5))
    assert _mismatch(merged, signed) == "inputs[1].weight"


def test_replay_detects_a_wrong_out_state(merged: _Round) -> None:
    signed = merged.resealed(["out_state"], merged.signed.body.prev_state)
    assert _mismatch(merged, signed) == "out_state"


def test_replay_detects_a_wrong_prev_theta_hash(merged: _Round) -> None:
    signed = merged.resealed(["prev_theta_hash"], _h("x"))
    assert _mismatch(merged, signed) == "prev_theta_hash"


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (["screens", "preclipped"], [], "screens.preclipped"),
        (["screens", "copy_flags", 0, "cosine"], f32_hex(0.5), "screens.copy_flags[0].cosine"),
        (["screens", "raise_q"], [], "screens.raise_q"),
        (["theta_hash"], _h("x"), "theta_hash"),
        (["center_hash"], _h("x"), "center_hash"),
    ],
)
def test_replay_names_the_first_differing_field(
    merged: _Round, path: list[str | int], value: object, field: str
) -> None:
    assert _mismatch(merged, merged.resealed(path, value)) == field


def test_replay_checks_params_and_signature(merged: _Round) -> None:
    with pytest.raises(TapeMismatch, match=r"params\.lr"):
        replay_tape(
            merged.signed,
            coord_ss58=COORD.ss58,
            load_object=merged.load,
            outer_params=_outer(lr=0.5),
        )
    data = unstructure(merged.signed)
    data["body"]["w"] = 2
    with pytest.raises(SignatureError):
        merged.replay(parse_signed_tape(data))
    with pytest.raises(UnauthorizedSigner):
        replay_tape(
            merged.signed, coord_ss58=MINERS[0], load_object=merged.load, outer_params=merged.params
        )


def test_replay_refuses_a_prev_state_that_is_not_a_state(merged: _Round) -> None:
    signed = merged.resealed(["prev_state"], merged.spare_object)
    assert _mismatch(merged, signed) == "prev_state"


def test_replay_refuses_objects_that_are_not_fitting_deltas(merged: _Round) -> None:
    signed = merged.resealed(["inputs", 0, "object"], merged.signed.body.prev_state)
    assert _mismatch(merged, signed) == "inputs[0].object"
    wrong = _put(merged.store, encode_dense_int8({"a.bias": np.ones(5, dtype=np.float32)}))
    signed = merged.resealed(["inputs", 0, "object"], wrong)
    assert _mismatch(merged, signed) == "inputs"


def test_tape_params_agree_with_merge_params(merged: _Round) -> None:
    assert unstructure(merged.signed.body)["params"] == merged.params.to_tape()
