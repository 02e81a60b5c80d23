"""Field validators for the wire types (spec/protocol.md section 2.2).

Each validator is an attrs validator (``attrs.field(validator=hex64)``) that raises
:class:`FieldError` naming the attribute, so a body failing validation reports *which* field is
wrong; the converter turns that into a :class:`~hypertrain.protocol.errors.SchemaError` with the
full field path. The same rules are exposed as plain predicates (``is_hex64``...) for code that
checks a loose value, such as the envelope's shape check.

The building block is :class:`Check`, a predicate plus the reason given when it fails.
:func:`list_of` lifts a check to a bounded tuple (the Python form of a JSON array), naming the
failing index (``roster[3]``).
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Final, get_args

import attrs

from hypertrain.protocol.errors import Malformed
from hypertrain.protocol.f32 import is_f32_hex
from hypertrain.protocol.jcs import MAX_SAFE_INT
from hypertrain.protocol.ss58 import SS58_RE, ss58_decode

__all__ = [
    "HEX64_RE",
    "IMAGE_DIGEST_RE",
    "LABEL_MAX",
    "MAX_ITEMS",
    "MAX_PROOF",
    "SIG_HEX_RE",
    "U53_SCHEMA",
    "Check",
    "FieldError",
    "ListOf",
    "Validator",
    "f32",
    "hex64",
    "image_digest",
    "instance_of",
    "int_in",
    "int_param",
    "is_hex64",
    "is_image_digest",
    "is_label",
    "is_pos_int",
    "is_sig_hex",
    "is_ss58_address",
    "is_u_int",
    "list_of",
    "one_of",
    "one_of_literal",
    "optional",
    "pattern",
    "pos_int",
    "sig_hex",
    "ss58",
    "ss58_public_key",
    "strict_bool",
    "text",
    "u_int",
]

HEX64_RE: Final = re.compile(r"[0-9a-f]{64}")
SIG_HEX_RE: Final = re.compile(r"[0-9a-f]{128}")
IMAGE_DIGEST_RE: Final = re.compile(r"sha256:[0-9a-f]{64}")

MAX_ITEMS: Final = 4096
"""Default upper bound on any array in a body (bodies are also capped at 1 MiB on intake)."""
MAX_PROOF: Final = 64
"""Longest Merkle proof (a tree of 2^64 leaves)."""

Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]


class FieldError(ValueError):
    """A field value refused by a validator; ``field`` is its name (``chunks[2]`` for an item)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def is_hex64(value: object) -> bool:
    """64 lowercase hex chars (a sha256 digest, a run id)."""
    return isinstance(value, str) and HEX64_RE.fullmatch(value) is not None


def is_sig_hex(value: object) -> bool:
    """128 lowercase hex chars (a 64-byte ed25519 signature)."""
    return isinstance(value, str) and SIG_HEX_RE.fullmatch(value) is not None


def is_image_digest(value: object) -> bool:
    """``sha256:`` followed by 64 lowercase hex chars."""
    return isinstance(value, str) and IMAGE_DIGEST_RE.fullmatch(value) is not None


def is_u_int(value: object) -> bool:
    """An int (never a bool) in ``[0, 2^53-1]``."""
    return type(value) is int and 0 <= value <= MAX_SAFE_INT


def is_pos_int(value: object) -> bool:
    """An int (never a bool) in ``[1, 2^53-1]``."""
    return type(value) is int and 1 <= value <= MAX_SAFE_INT


@functools.lru_cache(maxsize=4096)
def ss58_public_key(address: str) -> bytes:
    """:func:`~hypertrain.protocol.ss58.ss58_decode` with a bounded cache (signers recur).

    Raises Malformed like ``ss58_decode``; failures are not cached.
    """
    return ss58_decode(address)


LABEL_MAX: Final = 512
"""The longest :func:`is_label` text."""


def is_label(value: object) -> bool:
    """Non-empty printable text of at most :data:`LABEL_MAX` characters without leading or
    trailing blanks (a license id, a dataset's name or attribution)."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= LABEL_MAX
        and value == value.strip()
        and value.isprintable()
    )


def is_ss58_address(value: object) -> bool:
    """A prefix-42 SS58 address with a valid checksum (cached decode)."""
    if not isinstance(value, str) or SS58_RE.fullmatch(value) is None:
        return False
    try:
        ss58_public_key(value)
    except Malformed:
        return False
    return True


@attrs.frozen
class Check:
    """A predicate and the reason reported when it fails; usable as an attrs validator.

    ``schema``: the same rule as JSON Schema keywords (``pattern``, ``minimum``...), merged into
    the field's schema by :mod:`hypertrain.protocol.jsonschema`; empty where none says it.
    """

    test: Callable[[Any], bool]
    reason: str
    schema: Mapping[str, Any] = attrs.field(factory=dict, eq=False, kw_only=True)

    def __call__(self, _inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
        self.check(attribute.name, value)

    def check(self, name: str, value: object) -> None:
        """Raise :class:`FieldError` for ``name`` unless ``value`` passes (validators inside a
        body, where the converter turns it into a 400 naming the field's path)."""
        if not self.test(value):
            raise FieldError(name, f"{self.reason}, got {_show(value)}")

    def check_param(self, name: str, value: object) -> None:
        """Check a value a peer sent outside a body (a path segment, a query parameter):
        :class:`~hypertrain.protocol.errors.Malformed`, a 400 naming ``name``, unless it
        passes. (A bare FieldError there would be an unexpected error: a 500.)"""
        if not self.test(value):
            raise Malformed(f"{name}: {self.reason}, got {_show(value)}")


_MAX_DIGITS: Final = len(str(MAX_SAFE_INT))
"""Digits of the longest decimal :func:`int_param` reads (2^53-1 has 16)."""


def int_param(name: str, raw: str, check: Check) -> int:
    """A decimal integer a peer sent outside a body (a path segment, a query parameter, a
    header), checked by ``check`` (:data:`u_int`, :data:`pos_int`...).

    Only 1 to 16 ASCII digits are read at all (no sign, no blanks, no ``_``, no other
    script's digits), so a long digit string never reaches ``int()`` (whose own limit would
    raise ValueError: a 500): :class:`~hypertrain.protocol.errors.Malformed`, a 400 naming
    ``name``, otherwise.
    """
    if not (0 < len(raw) <= _MAX_DIGITS and raw.isascii() and raw.isdigit()):
        raise Malformed(f"{name}: {check.reason}, got {_show(raw)}")
    value = int(raw)
    check.check_param(name, value)
    return value


def pattern(regex: re.Pattern[str]) -> dict[str, str]:
    """The JSON Schema of a string matching ``regex`` whole."""
    return {"type": "string", "pattern": f"^{regex.pattern}$"}


def _int_range(low: int, high: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": low, "maximum": high}


U53_SCHEMA: Final = _int_range(0, MAX_SAFE_INT)
"""The JSON Schema of :data:`u_int` (a ``<u53:...>`` path parameter)."""


hex64: Final = Check(is_hex64, "must be 64 lowercase hex chars", schema=pattern(HEX64_RE))
sig_hex: Final = Check(is_sig_hex, "must be 128 lowercase hex chars", schema=pattern(SIG_HEX_RE))
image_digest: Final = Check(
    is_image_digest,
    "must be sha256: and 64 lowercase hex chars",
    schema=pattern(IMAGE_DIGEST_RE),
)
ss58: Final = Check(
    is_ss58_address,
    "must be an SS58 address (prefix 42, valid checksum)",
    schema=pattern(SS58_RE),
)
f32: Final = Check(
    is_f32_hex, "must be f32 hex (8 lowercase hex chars)", schema=pattern(re.compile("[0-9a-f]{8}"))
)
u_int: Final = Check(is_u_int, "must be an int in [0, 2^53-1]", schema=U53_SCHEMA)
pos_int: Final = Check(
    is_pos_int, "must be an int in [1, 2^53-1]", schema=_int_range(1, MAX_SAFE_INT)
)
strict_bool: Final = Check(lambda v: type(v) is bool, "must be true or false")


def int_in(low: int, high: int) -> Check:
    """An int (never a bool) in ``[low, high]``."""
    return Check(
        lambda v: type(v) is int and low <= v <= high,
        f"must be an int in [{low}, {high}]",
        schema=_int_range(low, high),
    )


def text(max_len: int) -> Check:
    """A string of at most ``max_len`` characters."""
    return Check(
        lambda v: isinstance(v, str) and len(v) <= max_len,
        f"must be a string of <= {max_len} chars",
        schema={"type": "string", "maxLength": max_len},
    )


def one_of(values: Collection[object]) -> Check:
    """Exactly one of ``values`` (same type too, so ``True`` is not ``1``)."""
    allowed = tuple(values)
    shown = ", ".join(repr(v) for v in allowed)
    return Check(
        lambda v: any(type(v) is type(a) and v == a for a in allowed),
        f"must be one of {shown}",
        schema={"enum": list(allowed)},
    )


def one_of_literal(literal: Any) -> Check:
    """:func:`one_of` the members of a ``typing.Literal``."""
    return one_of(get_args(literal))


def instance_of(cls: type) -> Check:
    """An instance of ``cls`` (items of nested arrays are validated by their own class)."""
    return Check(lambda v: isinstance(v, cls), f"must be a {cls.__name__}")


def optional(check: Check) -> Check:
    """``None`` or a value passing ``check``."""
    schema = {"anyOf": [dict(check.schema), {"type": "null"}]} if check.schema else {}
    return Check(lambda v: v is None or check.test(v), f"{check.reason} (or null)", schema=schema)


def _ordered(items: Iterable[Any]) -> bool:
    values = list(items)
    return all(a < b for a, b in itertools.pairwise(values))


@attrs.frozen
class ListOf:
    """A bounded tuple whose items pass ``item``; failures name the index (``hashes[3]``).
    An attrs validator (:func:`list_of` builds it) whose bounds the JSON Schema reads."""

    item: Check
    min_len: int = 0
    max_len: int = MAX_ITEMS
    unique: bool = False
    strictly_sorted: bool = False

    def __call__(self, _inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
        name = attribute.name
        if not isinstance(value, tuple):
            raise FieldError(name, f"must be an array, got {_show(value)}")
        if not self.min_len <= len(value) <= self.max_len:
            raise FieldError(
                name, f"must hold {self.min_len}..{self.max_len} items, got {len(value)}"
            )
        for index, element in enumerate(value):
            self.item.check(f"{name}[{index}]", element)
        if self.unique and len(set(value)) != len(value):
            raise FieldError(name, "items must be distinct")
        if self.strictly_sorted and not _ordered(value):
            raise FieldError(name, "items must be sorted ascending and distinct")

    @property
    def schema(self) -> dict[str, Any]:
        """The array's JSON Schema keywords (bounds, distinct items, the items' rule)."""
        schema: dict[str, Any] = {"type": "array", "minItems": self.min_len}
        schema["maxItems"] = self.max_len
        if self.unique or self.strictly_sorted:
            schema["uniqueItems"] = True
        if self.item.schema:
            schema["items"] = dict(self.item.schema)
        return schema


def list_of(
    item: Check,
    *,
    min_len: int = 0,
    max_len: int = MAX_ITEMS,
    unique: bool = False,
    strictly_sorted: bool = False,
) -> Validator:
    """A bounded tuple whose items pass ``item``; failures name the index (``hashes[3]``)."""
    return ListOf(item, min_len, max_len, unique, strictly_sorted)
