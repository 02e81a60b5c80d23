"""Envelopes: sealing, and every tampering giving its own error class, in intake order."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.envelope import (
    ENVELOPE_KEYS,
    NEVER,
    Envelope,
    json_equal,
    seal,
    signed_bytes,
    verify,
)
from hypertrain.protocol.errors import (
    CanonicalJSONError,
    Expired,
    Malformed,
    ProtocolError,
    RunMismatch,
    SchemaError,
    SignatureError,
    UnauthorizedSigner,
)
from hypertrain.protocol.jcs import body_digest, canonical_json, parse_json
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.messages import MESSAGE_TYPES, Accept, Commit
from tests.protocol.wire_samples import AUDITOR, COORD, MINER, OTHER, OTHER_RUN_ID, RUN_ID, bodies

EXP = 1000


def _sealed(type_name: str = "Commit", key: Keypair = MINER, **kw: Any) -> dict[str, Any]:
    body = kw.pop("body", bodies()[type_name])
    return seal(key, type_name, kw.pop("run_id", RUN_ID), body, kw.pop("exp", EXP)).to_json()


def _refused(raw: object, error: type[ProtocolError], **kw: Any) -> str:
    with pytest.raises(error) as info:
        verify(raw, **kw)
    assert type(info.value) is error
    return info.value.detail


def _resigned(raw: dict[str, Any], key: Keypair = MINER) -> dict[str, Any]:
    """Sign ``raw`` again as it stands (to get past the signature check on purpose)."""
    sig = key.sign(signed_bytes(raw["type"], raw["body"], raw["exp_drand"], raw["run_id"]))
    return {**raw, "signer": key.ss58, "sig": sig.hex()}


def test_signed_bytes_layout() -> None:
    body = bodies()["Commit"]
    expected = f"hypertrain/1|Commit|{body_digest(body)}|{EXP}|{RUN_ID}".encode()
    assert signed_bytes("Commit", body, EXP, RUN_ID) == expected


@pytest.mark.parametrize("type_name", sorted(MESSAGE_TYPES))
def test_every_type_seals_and_verifies(type_name: str) -> None:
    key = MINER if type_name != "Resolution" else AUDITOR
    raw = _sealed(type_name, key)
    assert set(raw) == ENVELOPE_KEYS
    assert raw["v"] == "ht/1"
    assert raw["signer"] == key.ss58
    verified = verify(raw, expected_run_id=RUN_ID, now_round=EXP)
    assert verified.message == structure(MESSAGE_TYPES[type_name], bodies()[type_name])
    assert verified.body_digest == body_digest(raw["body"])
    assert verify(parse_json(Envelope(**raw).encode())).message == verified.message


def test_seal_takes_a_message_instance_and_normalises_dicts() -> None:
    message = structure(Commit, bodies()["Commit"])
    envelope = seal(MINER, "Commit", RUN_ID, message, NEVER)
    assert envelope.body == bodies()["Commit"]
    assert envelope.exp_drand == 2**53 - 1
    manifest = bodies()["RunManifest"]
    manifest["dataset"]["source"] = None  # optional fields are omitted, never null
    sealed = seal(COORD, "RunManifest", RUN_ID, manifest, EXP)
    assert "source" not in sealed.body["dataset"]
    verify(sealed.to_json())


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("Commit", RUN_ID, {"w": 0}, EXP), SchemaError),
        (("Accept", RUN_ID, "Commit-instance", EXP), SchemaError),
        (("Nope", RUN_ID, {}, EXP), Malformed),
        (("Commit", RUN_ID.upper(), "commit", EXP), Malformed),
        (("Commit", RUN_ID, "commit", 0), Malformed),
        (("Commit", RUN_ID, "commit", True), Malformed),
        (("Commit", RUN_ID, "commit", 2**53), Malformed),
    ],
)
def test_seal_refuses(args: tuple[Any, ...], error: type[Exception]) -> None:
    type_name, run_id, body, exp = args
    if body == "commit":
        body = bodies()["Commit"]
    elif body == "Commit-instance":
        body = structure(Commit, bodies()["Commit"])
    with pytest.raises(error):
        seal(MINER, type_name, run_id, body, exp)


def test_type_relabelled() -> None:
    raw = _sealed("Accept")
    raw["type"] = "Commit"
    _refused(raw, SignatureError)
    raw = _sealed("Dispute")
    raw["type"] = "Accept"  # the signature fails before the body is even looked at
    _refused(raw, SignatureError)


def test_body_changed() -> None:
    raw = _sealed()
    raw["body"]["tokens"] += 1
    _refused(raw, SignatureError)


def test_run_id_swapped() -> None:
    raw = _sealed()
    raw["run_id"] = OTHER_RUN_ID
    _refused(raw, RunMismatch, expected_run_id=RUN_ID)
    _refused(raw, SignatureError)
    _refused(_sealed(), RunMismatch, expected_run_id=OTHER_RUN_ID)


def test_exp_changed() -> None:
    raw = _sealed()
    raw["exp_drand"] = EXP + 1
    _refused(raw, SignatureError)


def test_expiry() -> None:
    raw = _sealed()
    verify(raw, now_round=EXP)
    verify(raw, now_round=1)
    assert "expired at round 1000 (now 1001)" in _refused(raw, Expired, now_round=EXP + 1)


def test_signer_allow_list() -> None:
    raw = _sealed("RoundOpen", COORD)
    allowed = {"RoundOpen": {COORD.ss58}}

    def only(type_name: str, signer: str) -> bool:
        return signer in allowed.get(type_name, set())

    assert verify(raw, signer_allowed=only).envelope.signer == COORD.ss58
    _refused(_sealed("RoundOpen", OTHER), UnauthorizedSigner, signer_allowed=only)


@pytest.mark.parametrize(
    "type_name", ["Commit", "Accept", "DeltaManifest", "StateServe", "Dispute"]
)
def test_signer_binding(type_name: str) -> None:
    raw = _sealed(type_name, OTHER)  # a valid signature by a key that is not the body's hotkey
    assert "body hotkey is not the signer" in _refused(raw, UnauthorizedSigner)


def test_types_without_binding_accept_any_signer() -> None:
    verify(_sealed("Forfeit", OTHER))  # hotkey is the forfeiting miner, signer is K_coord
    verify(_sealed("AuditChallenge", COORD))


def test_signature_of_another_key() -> None:
    raw = _sealed(key=OTHER)
    raw["signer"] = MINER.ss58
    _refused(raw, SignatureError)


def test_non_canonical_body_form() -> None:
    body = bodies()["RunManifest"]
    body["reference_spec"]["profile"] = None  # structures fine, but the model form omits it
    raw = _resigned(
        {"v": "ht/1", "type": "RunManifest", "run_id": RUN_ID, "body": body, "exp_drand": EXP},
        COORD,
    )
    structure(MESSAGE_TYPES["RunManifest"], body)
    assert "not in canonical model form" in _refused(raw, SchemaError)


def test_invalid_body_with_a_valid_signature() -> None:
    raw = _sealed()
    raw["body"]["w"] = True
    assert "$.w: expected an int, got a boolean" in _refused(_resigned(raw), SchemaError)
    raw["body"] = {**bodies()["Commit"], "extra": 1}
    assert "unknown field(s) 'extra'" in _refused(_resigned(raw), SchemaError)


def _shape_cases() -> list[tuple[str, Any]]:
    sig = _sealed()["sig"]
    return [
        ("extra key", lambda r: r.update(extra=1)),
        ("missing key", lambda r: r.pop("sig")),
        ("missing body", lambda r: r.pop("body")),
        ("short sig", lambda r: r.update(sig=sig[:-2])),
        ("long sig", lambda r: r.update(sig=sig + "00")),
        ("upper sig", lambda r: r.update(sig=sig.upper())),
        ("sig not str", lambda r: r.update(sig=5)),
        ("version", lambda r: r.update(v="ht/2")),
        ("unknown type", lambda r: r.update(type="LeafPreimage")),
        ("type not str", lambda r: r.update(type=["Commit"])),
        ("run_id upper", lambda r: r.update(run_id=RUN_ID.upper())),
        ("run_id short", lambda r: r.update(run_id=RUN_ID[:-1])),
        ("exp bool", lambda r: r.update(exp_drand=True)),
        ("exp zero", lambda r: r.update(exp_drand=0)),
        ("exp string", lambda r: r.update(exp_drand=str(EXP))),
        ("exp float", lambda r: r.update(exp_drand=float(EXP))),
        ("exp huge", lambda r: r.update(exp_drand=2**53)),
        ("signer checksum", lambda r: r.update(signer=r["signer"][:-1] + "1")),
        ("signer not str", lambda r: r.update(signer=None)),
        ("body not object", lambda r: r.update(body=[1])),
        ("body with float", lambda r: r["body"].update(tokens=1.5)),
    ]


@pytest.mark.parametrize(("name", "mutate"), _shape_cases(), ids=[c[0] for c in _shape_cases()])
def test_shape_is_malformed(name: str, mutate: Any) -> None:
    raw: dict[str, Any] = _sealed()
    mutate(raw)
    with pytest.raises(Malformed) as info:
        verify(raw, expected_run_id=OTHER_RUN_ID, now_round=EXP + 10)  # shape comes first
    assert type(info.value) in (Malformed, CanonicalJSONError)
    assert info.value.status == 400


def test_shape_errors_name_the_keys() -> None:
    raw = _sealed()
    raw.pop("sig")
    raw["extra"] = 1
    assert _refused(raw, Malformed) == "envelope: missing key(s) sig; unknown key(s) extra"


def test_not_an_object() -> None:
    not_objects: list[object] = [[], "x", None, 5]
    for raw in not_objects:
        _refused(raw, Malformed)


def test_intake_order() -> None:
    raw = _sealed()
    raw["body"]["w"] = "bad"
    # wrong run beats bad signature beats expiry beats allow-list beats schema
    _refused(raw, RunMismatch, expected_run_id=OTHER_RUN_ID, now_round=EXP + 1)
    _refused(raw, SignatureError, now_round=EXP + 1, signer_allowed=lambda t, s: False)
    raw = _resigned(raw)
    _refused(raw, Expired, now_round=EXP + 1, signer_allowed=lambda t, s: False)
    _refused(raw, UnauthorizedSigner, signer_allowed=lambda t, s: False)
    _refused(raw, SchemaError)


def test_replay_keys() -> None:
    b = bodies()

    def key(type_name: str, signer: Keypair = MINER) -> tuple[str, ...]:
        return verify(_sealed(type_name, signer)).replay_key

    assert key("Commit") == (RUN_ID, "0", "Commit", MINER.ss58, MINER.ss58)
    assert key("Accept") == (RUN_ID, "0", "Accept", MINER.ss58, MINER.ss58)
    assert key("Receipt", COORD) == (
        RUN_ID,
        "0",
        "Receipt",
        COORD.ss58,
        b["Receipt"]["commit_hash"],
    )
    challenge = key("AuditChallenge", COORD)
    assert challenge == (RUN_ID, "0", "AuditChallenge", COORD.ss58, MINER.ss58)
    assert key("RoundOpen", COORD) == (RUN_ID, "0", "RoundOpen", COORD.ss58, "")
    assert key("Finalize", COORD) == (RUN_ID, "0", "Finalize", COORD.ss58, "")
    dispute = (RUN_ID, "-", "Dispute", MINER.ss58, b["Dispute"]["verdict_hash"])
    assert key("Dispute") == dispute
    verdict = body_digest(b["ReplayVerdict"])
    assert key("ReplayVerdict", AUDITOR) == (RUN_ID, "-", "ReplayVerdict", AUDITOR.ss58, verdict)
    manifest = body_digest(b["RunManifest"])
    assert key("RunManifest", COORD) == (RUN_ID, "-", "RunManifest", COORD.ss58, manifest)
    # the key ignores the expiry: a resend with a new exp_drand is the same message
    again = verify(_sealed("Commit", exp=EXP + 5)).replay_key
    assert again == key("Commit")


def test_envelope_round_trips_as_json() -> None:
    raw = _sealed()
    envelope = verify(copy.deepcopy(raw)).envelope
    assert envelope.to_json() == raw
    assert parse_json(envelope.encode()) == raw
    assert unstructure(verify(raw).message) == raw["body"]
    assert isinstance(verify(raw).message, Commit)
    assert not isinstance(verify(raw).message, Accept)


_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=4)
_scalars = st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | _text
_keys = _text
_json = st.recursive(
    _scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3)
)


@given(_json, _json)
def test_json_equal_is_jcs_equality(a: object, b: object) -> None:
    assert json_equal(a, b) == (canonical_json(a) == canonical_json(b))
    assert json_equal(a, a)


def test_json_equal_is_strict_about_types() -> None:
    assert not json_equal({"a": 1}, {"a": True})
    assert not json_equal([0], [False])
    assert json_equal({"a": (1, 2)}, {"a": [1, 2]})
    assert not json_equal({"a": 1}, {"a": 1, "b": None})
