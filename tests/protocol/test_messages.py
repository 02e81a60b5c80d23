"""Message bodies: every type round trips, and every field refuses what the spec refuses."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.errors import SchemaError
from hypertrain.protocol.example import (
    SPEC_AUDITOR_SS58,
    SPEC_COORD_SS58,
    SPEC_EXAMPLE_RUN_ID,
    example_manifest,
)
from hypertrain.protocol.jcs import canonical_json
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.messages import (
    MESSAGE_TYPES,
    SIGNER_BOUND_TYPES,
    Accept,
    Commit,
    DeltaManifest,
    Dispute,
    LeafPreimage,
    StateServe,
)
from tests.protocol.wire_samples import bodies, json_path, leaves, replaced

SPEC_TYPES = [
    "RunManifest",
    "RoundOpen",
    "Accept",
    "Commit",
    "Receipt",
    "DeltaManifest",
    "AuditChallenge",
    "StateServe",
    "ReplayVerdict",
    "Dispute",
    "Bisect",
    "Resolution",
    "Forfeit",
    "Rollback",
    "Finalize",
]
ALL_TYPES = {**MESSAGE_TYPES, "LeafPreimage": LeafPreimage}


def _schema_error(cls: type[Any], body: object) -> str:
    with pytest.raises(SchemaError) as info:
        structure(cls, body)
    return info.value.detail


def test_the_fifteen_types() -> None:
    assert sorted(MESSAGE_TYPES) == sorted(SPEC_TYPES)
    assert all(MESSAGE_TYPES[name].__name__ == name for name in SPEC_TYPES)
    bound = {Commit, Accept, DeltaManifest, StateServe, Dispute}
    assert bound == SIGNER_BOUND_TYPES
    with pytest.raises(TypeError):
        MESSAGE_TYPES["Evil"] = Commit  # type: ignore[index]


@pytest.mark.parametrize("name", sorted(ALL_TYPES))
def test_round_trip(name: str) -> None:
    body = bodies()[name]
    message: Any = structure(ALL_TYPES[name], body)
    assert attrs.has(type(message))
    assert unstructure(message) == body
    assert canonical_json(unstructure(message)) == canonical_json(body)
    assert structure(ALL_TYPES[name], unstructure(message)) == message
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        message.__setattr__(next(iter(body)), None)


@pytest.mark.parametrize("name", sorted(ALL_TYPES))
def test_every_int_field_refuses_bools_floats_strings_and_big_ints(name: str) -> None:
    body, cls = bodies()[name], ALL_TYPES[name]
    int_paths = [p for p, v in leaves(body) if type(v) is int]
    assert int_paths or name in {"Dispute", "Resolution"}
    for path in int_paths:
        where = json_path(path)
        for bad in (True, False, 1.0, "1", None, [1]):
            detail = _schema_error(cls, replaced(body, path, bad))
            assert where in detail, (bad, detail)
        for big in (2**53, -(2**53), 2**64):
            assert where in _schema_error(cls, replaced(body, path, big))


@pytest.mark.parametrize("name", sorted(ALL_TYPES))
def test_every_string_and_bool_field_refuses_other_types(name: str) -> None:
    body, cls = bodies()[name], ALL_TYPES[name]
    for path, value in leaves(body):
        if isinstance(value, str):
            assert json_path(path) in _schema_error(cls, replaced(body, path, 5))
            assert json_path(path) in _schema_error(cls, replaced(body, path, [value]))
        elif isinstance(value, bool):
            assert json_path(path) in _schema_error(cls, replaced(body, path, 1))
            assert json_path(path) in _schema_error(cls, replaced(body, path, "true"))


def _objects(
    value: Any, path: tuple[Any, ...] = ()
) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    found: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    if isinstance(value, dict):
        found.append((path, value))
        for key, item in value.items():
            found += _objects(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _objects(item, (*path, index))
    return found


@pytest.mark.parametrize("name", sorted(ALL_TYPES))
def test_extra_and_missing_keys_are_refused_by_name(name: str) -> None:
    body, cls = bodies()[name], ALL_TYPES[name]
    for path, obj in _objects(body):
        extra = dict(obj, zz_extra=1)
        detail = _schema_error(cls, replaced(body, path, extra) if path else extra)
        assert f"{json_path(path)}: unknown field(s) 'zz_extra'" in detail
        for key in obj:
            smaller = {k: v for k, v in obj.items() if k != key}
            detail = _schema_error(cls, replaced(body, path, smaller) if path else smaller)
            assert f"{json_path((*path, key))}: required field missing" in detail


@pytest.mark.parametrize("name", sorted(ALL_TYPES))
def test_arrays_and_objects_must_be_json_arrays_and_objects(name: str) -> None:
    body, cls = bodies()[name], ALL_TYPES[name]
    assert "$: expected an object" in _schema_error(cls, [body])
    for path, obj in _objects(body):
        for key, item in obj.items():
            if isinstance(item, list):
                detail = _schema_error(cls, replaced(body, (*path, key), "abc"))
                assert f"{json_path((*path, key))}: expected an array" in detail
            elif isinstance(item, dict):
                detail = _schema_error(cls, replaced(body, (*path, key), [1]))
                assert f"{json_path((*path, key))}: expected an object" in detail


def test_the_spec_example_manifest_reproduces_the_reference_run_id() -> None:
    manifest = example_manifest(coord_pubkey=SPEC_COORD_SS58, auditors=[SPEC_AUDITOR_SS58])
    assert manifest.run_id() == SPEC_EXAMPLE_RUN_ID
    assert example_manifest().run_id() != SPEC_EXAMPLE_RUN_ID  # our ed25519 addresses differ
    assert example_manifest().run_id() == example_manifest().run_id()


def test_optional_manifest_fields_are_omitted_not_null() -> None:
    body = bodies()["RunManifest"]
    assert "od" not in body["model"]
    assert "source" not in body["dataset"]
    assert "profile" not in body["reference_spec"]
    assert "assign_unit" not in body["dataset"]
    body["dataset"].update(
        source={"mix_id": "mix-1", "registry_sha256": "ab" * 32},
        assign_unit=5,
        unit_sha256_root="cd" * 32,
    )
    manifest = structure(RunManifest, body)
    assert manifest.dataset.assign_unit == 5
    assert unstructure(manifest) == body
    body["dataset"]["unit_sha256_root"] = None
    detail = _schema_error(RunManifest, body)
    assert "$.dataset.assign_unit: assign_unit and unit_sha256_root go together" in detail
    nulled = bodies()["RunManifest"]
    nulled["reference_spec"]["profile"] = None
    assert "profile" not in unstructure(structure(RunManifest, nulled))["reference_spec"]
