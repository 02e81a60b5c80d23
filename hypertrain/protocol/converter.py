"""The one wire codec: a strict cattrs converter for every message body (STYLE.md item 9).

``structure(cls, data)`` turns parsed JSON into a validated frozen attrs instance, or raises
:class:`~hypertrain.protocol.errors.SchemaError` whose detail names each failing field by path
(``RoundOpen body: $.roster[1].q_i: must be f32 hex ...``). ``unstructure(obj)`` gives the
JSON-ready dict. The converter is strict where cattrs is lenient by default:

- objects must be JSON objects and unknown keys are refused (``forbid_extra_keys``);
- ints must be ints within +-(2^53-1): never bools, floats or numeric strings;
- strings must be strings and bools must be bools (no ``str(5)``, no ``bool("false")``);
- arrays must be JSON arrays of the declared length; they become tuples;
- ``Literal`` members must match in type and value (``True`` is not ``1``);
- fields that default to ``None`` (the spec's optional † fields) are omitted when ``None``.

``unstructure(structure(cls, x)) == x`` for every body already in canonical model form.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Literal, TypeVar, get_args, get_origin

import attrs
import cattrs
from cattrs.errors import IterableValidationError, IterableValidationNote
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn

from hypertrain.protocol.errors import SchemaError
from hypertrain.protocol.jcs import MAX_SAFE_INT
from hypertrain.protocol.validators import FieldError

__all__ = ["converter", "structure", "unstructure"]

T = TypeVar("T")

_JSON_NAMES: Final = {
    bool: "a boolean",
    int: "an int",
    float: "a float",
    str: "a string",
    list: "an array",
    dict: "an object",
    type(None): "null",
}


def _json_type(value: object) -> str:
    return _JSON_NAMES.get(type(value), type(value).__name__)


def _structure_int(value: object, _tp: object) -> int:
    if type(value) is not int:
        raise TypeError(f"expected an int, got {_json_type(value)}")
    if not -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
        raise ValueError("int beyond +-(2^53-1)")
    return value


def _structure_str(value: object, _tp: object) -> str:
    if type(value) is not str:
        raise TypeError(f"expected a string, got {_json_type(value)}")
    return value


def _structure_bool(value: object, _tp: object) -> bool:
    if type(value) is not bool:
        raise TypeError(f"expected true or false, got {_json_type(value)}")
    return value


def _is_literal(tp: object) -> bool:
    return get_origin(tp) is Literal


def _structure_literal(value: object, tp: object) -> object:
    allowed = get_args(tp)
    if not any(type(value) is type(a) and value == a for a in allowed):
        raise ValueError(f"must be one of {', '.join(repr(a) for a in allowed)}")
    return value


def _is_tuple(tp: object) -> bool:
    return get_origin(tp) is tuple


def _structure_tuple_factory(tp: Any, conv: cattrs.Converter) -> Callable[[Any, Any], Any]:
    args = get_args(tp)
    homogeneous = len(args) == 2 and args[1] is Ellipsis

    def structure_tuple(value: object, _tp: object) -> tuple[Any, ...]:
        if not isinstance(value, list | tuple):
            raise TypeError(f"expected an array, got {_json_type(value)}")
        if homogeneous:
            item_types: tuple[Any, ...] = (args[0],) * len(value)
        elif len(value) != len(args):
            raise ValueError(f"expected an array of {len(args)} items, got {len(value)}")
        else:
            item_types = args
        items: list[Any] = []
        errors: list[Exception] = []
        for index, (item, item_type) in enumerate(zip(value, item_types, strict=True)):
            try:
                items.append(conv.structure(item, item_type))
            except Exception as e:
                e.add_note(IterableValidationNote(f"@ index {index}", index, item_type))
                errors.append(e)
        if errors:
            raise IterableValidationError("while structuring an array", errors, tp)
        return tuple(items)

    return structure_tuple


def _unstructure_tuple_factory(_tp: Any, conv: cattrs.Converter) -> Callable[[Any], Any]:
    def unstructure_tuple(value: tuple[Any, ...]) -> list[Any]:
        return [conv.unstructure(item) for item in value]

    return unstructure_tuple


def _structure_attrs_factory(cls: Any, conv: cattrs.Converter) -> Callable[[Any, Any], Any]:
    inner = make_dict_structure_fn(cls, conv)

    def structure_object(value: object, tp: Any) -> Any:
        if not isinstance(value, dict):
            raise TypeError(f"expected an object, got {_json_type(value)}")
        return inner(value, tp)

    return structure_object


def _unstructure_attrs_factory(cls: Any, conv: cattrs.Converter) -> Callable[[Any], Any]:
    return make_dict_unstructure_fn(cls, conv, _cattrs_omit_if_default=True)


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    conv.register_structure_hook(int, _structure_int)
    conv.register_structure_hook(str, _structure_str)
    conv.register_structure_hook(bool, _structure_bool)
    conv.register_structure_hook_func(_is_literal, _structure_literal)
    conv.register_structure_hook_factory(_is_tuple, _structure_tuple_factory)
    conv.register_unstructure_hook_factory(_is_tuple, _unstructure_tuple_factory)
    conv.register_structure_hook_factory(attrs.has, _structure_attrs_factory)
    conv.register_unstructure_hook_factory(attrs.has, _unstructure_attrs_factory)
    return conv


converter: Final = _make_converter()
"""The converter; prefer :func:`structure` and :func:`unstructure`."""

_FIELD_MARK = "\x00"


def _describe(exc: BaseException, _tp: object) -> str:
    if isinstance(exc, FieldError):
        return f"{exc.field}{_FIELD_MARK}{exc.reason}"
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return f"unknown field(s) {', '.join(repr(k) for k in sorted(exc.extra_fields))}"
    if isinstance(exc, KeyError):
        return "required field missing"
    return str(exc) or type(exc).__name__


def _reformat(line: str) -> str:
    """``desc @ path`` (cattrs) -> ``path: desc``, moving a FieldError's name into the path."""
    desc, _, path = line.rpartition(" @ ")
    if _FIELD_MARK in desc:
        name, _, desc = desc.partition(_FIELD_MARK)
        path = f"{path}.{name}"
    return f"{path}: {desc}"


def field_errors(exc: BaseException) -> list[str]:
    """The ``path: reason`` lines describing a structuring failure."""
    return [_reformat(line) for line in cattrs.transform_error(exc, "$", _describe)]


def structure(cls: type[T], data: object) -> T:
    """Validate parsed JSON ``data`` as a ``cls``; SchemaError names every failing field."""
    try:
        return converter.structure(data, cls)
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as e:
        raise SchemaError(f"{cls.__name__} body: {'; '.join(field_errors(e))}") from None


def unstructure(obj: object) -> dict[str, Any]:
    """The JSON-ready dict of a message body (optional absent fields omitted)."""
    result = converter.unstructure(obj)
    if not isinstance(result, dict):
        raise TypeError(f"{type(obj).__name__} is not a message body")
    return result
