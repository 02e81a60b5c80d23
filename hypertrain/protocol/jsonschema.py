"""JSON Schema (draft 2020-12, as OpenAPI 3.1 uses it) of the wire classes, from their types.

:class:`SchemaBook` turns a type into a schema and keeps one named schema per attrs class (the
OpenAPI document's ``components.schemas``), so that the documented shape of a body IS the class
the one converter (:mod:`hypertrain.protocol.converter`) reads and writes:

- ``int``: an integer within +-(2^53-1), as the converter reads it; ``str``, ``bool``,
  ``float``, ``None``; ``Any`` and ``object``: anything;
- ``Literal[...]`` and enums: their values; unions: ``anyOf``;
- ``tuple[X, ...]`` (the converter's arrays) and ``list``: arrays; ``tuple[X, Y]``: exactly
  those items; ``dict[str, X]`` and ``Mapping``: objects of X;
- an attrs class: a ``$ref`` to its named schema: its fields under their wire names (a cattrs
  ``override(rename=...)`` is followed), required when they have no default (the converter
  omits a field equal to its default), no other keys (the converter refuses them);
- a field's validators add what they check: a :class:`~hypertrain.protocol.validators.Check`
  its ``schema`` (hex patterns, integer bounds, lengths, enums), a
  :class:`~hypertrain.protocol.validators.ListOf` its array bounds (``attrs.validators.and_``
  is followed).

A rule no keyword says (an SS58 checksum, a signature) is the converter's alone: the schema
is never stricter than the converter, and an answer the converter wrote always conforms.
"""

from __future__ import annotations

import enum
import inspect
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, Union, get_args, get_origin

import attrs
from cattrs.gen import override

from hypertrain.protocol.jcs import MAX_SAFE_INT
from hypertrain.protocol.validators import Check, ListOf

__all__ = ["REF_PREFIX", "SchemaBook"]

REF_PREFIX: Final = "#/components/schemas/"
"""Where a named schema lives in the OpenAPI document."""

_SCALARS: Final[dict[object, dict[str, Any]]] = {
    int: {"type": "integer", "minimum": -MAX_SAFE_INT, "maximum": MAX_SAFE_INT},
    str: {"type": "string"},
    bool: {"type": "boolean"},
    float: {"type": "number"},
    type(None): {"type": "null"},
    Any: {},
    object: {},
}
_NULL: Final = {"type": "null"}
_OVERRIDE: Final = type(override())
"""The class of a cattrs field override (``Annotated[str, override(rename="id")]``)."""


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` narrowed by a validator's keywords (an optional type's non-null branches)."""
    if not extra:
        return base
    if "anyOf" in base and "anyOf" not in extra and "enum" not in extra:
        return {"anyOf": [b if b == _NULL else _merge(b, extra) for b in base["anyOf"]]}
    if "anyOf" in extra or "enum" in extra:
        return dict(extra)
    return {**base, **extra}


def _validator_schemas(validator: object) -> list[Mapping[str, Any]]:
    if isinstance(validator, Check | ListOf):
        return [validator.schema]
    inner = getattr(validator, "_validators", None)  # attrs.validators.and_
    if isinstance(inner, tuple):
        return [s for v in inner for s in _validator_schemas(v)]
    return []


def _wire_name(field: attrs.Attribute[Any], hint: object) -> str | None:
    """The field's JSON key (None: never sent), from a cattrs override in its annotation."""
    for extra in getattr(hint, "__metadata__", ()):
        if isinstance(extra, _OVERRIDE):
            if extra.omit:
                return None
            if extra.rename is not None:
                return extra.rename
    return field.name


class SchemaBook:
    """Schemas of types, with one named schema per attrs class met (module doc)."""

    def __init__(self) -> None:
        self.schemas: dict[str, dict[str, Any]] = {}
        """The named schemas, by name (``components.schemas``)."""
        self._names: dict[type, str] = {}

    def of(self, tp: object) -> dict[str, Any]:
        """The schema of ``tp`` (a ``$ref`` for an attrs class, which is named on first use)."""
        if isinstance(tp, type) and attrs.has(tp):
            return {"$ref": REF_PREFIX + self.name_of(tp)}
        if tp in _SCALARS:
            return dict(_SCALARS[tp])
        origin, args = get_origin(tp), get_args(tp)
        if origin is typing.Annotated:
            return self.of(args[0])
        if origin is Literal:
            return {"enum": list(args)}
        if origin in (Union, types.UnionType):
            return {"anyOf": [self.of(a) for a in args]}
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return {"enum": [member.value for member in tp]}
        if origin is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                return {"type": "array", "items": self.of(args[0])}
            items = [self.of(a) for a in args]
            n = len(items)
            return {"type": "array", "prefixItems": items, "minItems": n, "maxItems": n}
        if origin in (list, Sequence) or tp in (list, tuple):
            return {"type": "array", "items": self.of(args[0])} if args else {"type": "array"}
        if origin in (dict, Mapping) or tp is dict:
            values = self.of(args[1]) if args else {}
            return {"type": "object", "additionalProperties": values}
        raise TypeError(f"no JSON Schema for the type {tp!r}")

    def name_of(self, cls: type) -> str:
        """The name of ``cls``'s schema, built on first use (``<module>.<Name>`` when another
        class already holds its bare name)."""
        name = self._names.get(cls)
        if name is not None:
            return name
        name = cls.__name__
        if name in self.schemas:
            name = f"{cls.__module__.rpartition('.')[2]}.{name}"
        self._names[cls] = name
        self.schemas[name] = {}  # taken before the fields, for a class that nests itself
        self.schemas[name] = self._object(cls)
        return name

    def _object(self, cls: type) -> dict[str, Any]:
        hints = typing.get_type_hints(cls, include_extras=True)
        properties: dict[str, Any] = {}
        required: list[str] = []
        for field in attrs.fields(cls):
            hint = hints[field.name]
            key = _wire_name(field, hint)
            if key is None:
                continue
            schema = self.of(hint)
            for extra in _validator_schemas(field.validator):
                schema = _merge(schema, extra)
            properties[key] = schema
            if field.default is attrs.NOTHING:
                required.append(key)
        described: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            described["required"] = required
        described["additionalProperties"] = False
        doc = inspect.cleandoc(cls.__doc__ or "")
        if doc:
            described["description"] = doc
        return described
