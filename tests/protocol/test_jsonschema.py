"""The JSON Schema of the wire classes (:mod:`hypertrain.protocol.jsonschema`): what each type
and validator says, and that the converter's own output always conforms (the schema is never
stricter than the converter) while the values the converter refuses for a keyword it states
are refused by the schema too."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import attrs
import jsonschema_rs
import pytest
from cattrs.gen import override

from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.example import example_bodies, example_manifest
from hypertrain.protocol.jsonschema import REF_PREFIX, SchemaBook
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.messages import MESSAGE_TYPES
from hypertrain.protocol.validators import hex64, int_in, list_of, optional, ss58, text, u_int

HEX = "ab" * 32
MINER = Keypair.from_seed(bytes([1]) * 32).ss58
AUDITOR = Keypair.from_seed(bytes([2]) * 32).ss58


@attrs.frozen
class Inner:
    """An inner body."""

    n: int = attrs.field(validator=int_in(1, 5))


@attrs.frozen(kw_only=True)
class Outer:
    """A body of every kind of field."""

    key: str = attrs.field(validator=hex64)
    name: Annotated[str, override(rename="id")] = attrs.field(validator=text(8))
    kind: Literal["a", "b"]
    pair: tuple[int, str]
    keys: tuple[str, ...] = attrs.field(validator=list_of(ss58, min_len=1, max_len=3, unique=True))
    inner: Inner
    inners: tuple[Inner, ...] = ()
    extra: dict[str, Any] = attrs.field(factory=dict)
    size: int | None = attrs.field(default=None, validator=optional(u_int))


def _validator(book: SchemaBook, cls: type) -> Any:
    schema = {"$ref": REF_PREFIX + book.name_of(cls), "components": {"schemas": book.schemas}}
    return jsonschema_rs.validator_for(schema)


def test_the_schema_of_a_class_says_what_its_types_and_validators_check() -> None:
    book = SchemaBook()
    book.of(Outer)
    outer = book.schemas["Outer"]
    props = outer["properties"]
    assert outer["required"] == ["key", "id", "kind", "pair", "keys", "inner"]
    assert outer["additionalProperties"] is False
    assert outer["description"] == "A body of every kind of field."
    assert props["key"] == {"type": "string", "pattern": "^[0-9a-f]{64}$"}
    assert props["id"] == {"type": "string", "maxLength": 8}
    assert props["kind"] == {"enum": ["a", "b"]}
    assert props["pair"]["prefixItems"] == [
        {"type": "integer", "minimum": -(2**53 - 1), "maximum": 2**53 - 1},
        {"type": "string"},
    ]
    assert props["keys"]["minItems"] == 1
    assert props["keys"]["maxItems"] == 3
    assert props["keys"]["uniqueItems"] is True
    assert props["keys"]["items"]["pattern"].startswith("^[1-9A-HJ-NP-Za-km-z]")
    assert props["inner"] == {"$ref": REF_PREFIX + "Inner"}
    assert props["inners"]["items"] == {"$ref": REF_PREFIX + "Inner"}
    assert props["extra"] == {"type": "object", "additionalProperties": {}}
    assert props["size"] == {
        "anyOf": [{"type": "integer", "minimum": 0, "maximum": 2**53 - 1}, {"type": "null"}]
    }
    assert book.schemas["Inner"]["properties"]["n"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 5,
    }


def test_a_value_the_converter_writes_conforms_and_one_it_refuses_does_not() -> None:
    book = SchemaBook()
    valid = _validator(book, Outer)
    good = Outer(
        key=HEX,
        name="x",
        kind="a",
        pair=(1, "y"),
        keys=(MINER,),
        inner=Inner(2),
        inners=(Inner(5),),
        size=3,
    )
    value = unstructure(good)
    assert valid.is_valid(value)
    for field, bad in (
        ("key", "AB" * 32),
        ("id", "123456789"),
        ("kind", "c"),
        ("pair", [1]),
        ("keys", []),
        ("inner", {"n": 6}),
        ("size", -1),
        ("unknown", 1),
    ):
        assert not valid.is_valid({**value, field: bad}), field


def test_two_classes_of_one_name_get_two_schemas() -> None:
    from hypertrain.compute.wire import LeaseRequest as NodeLease
    from hypertrain.coordinator.flows.worker import LeaseRequest as AuditLease

    book = SchemaBook()
    first, second = book.name_of(NodeLease), book.name_of(AuditLease)
    assert first == "LeaseRequest"
    assert second == "worker.LeaseRequest"
    assert book.schemas[first] != book.schemas[second]


def test_a_type_with_no_json_form_is_refused() -> None:
    with pytest.raises(TypeError, match="no JSON Schema"):
        SchemaBook().of(bytes)


@pytest.mark.parametrize("name", sorted(MESSAGE_TYPES))
def test_every_message_type_accepts_the_spec_example(name: str) -> None:
    bodies = {"RunManifest": unstructure(example_manifest()), **example_bodies(MINER, AUDITOR)}
    book = SchemaBook()
    valid = _validator(book, MESSAGE_TYPES[name])
    errors = [e.message for e in valid.iter_errors(bodies[name])]
    assert errors == []
