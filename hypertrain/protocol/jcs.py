"""Canonical JSON (RFC 8785, "JCS") for everything signed or hashed, and strict JSON parsing.

``canonical_json`` walks the value first and refuses, with the path of the offending item,
anything the protocol does not allow in a preimage: floats (reals travel as f32 hex), integers
beyond +-(2^53-1), strings holding surrogate code points (lone surrogates), non-string keys and
non-JSON types. The walk then hands the value to the ``rfc8785`` package, which sorts keys by
UTF-16 code units and writes the exact bytes.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from typing import Any, cast

import attrs
import rfc8785

from hypertrain.protocol.errors import CanonicalJSONError, Malformed

__all__ = ["MAX_SAFE_INT", "body_digest", "canonical_json", "parse_json"]

MAX_SAFE_INT = 2**53 - 1
_SURROGATE = re.compile("[\ud800-\udfff]")
_MAX_DEPTH = 64
_MAX_INT_DIGITS = len(str(MAX_SAFE_INT))
_MAYBE_REFUSED = re.compile(r"\d{16}|[eE][+-]?\d{3}|-0|\\u[dD][89a-fA-F]")
_NOT_A_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"|[^\[\]{}"]+')
_BRACKET_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def _problem(value: object, depth: int, *, floats: bool) -> tuple[str, str] | None:
    """``(path below value, reason)`` of the first item of ``value`` the protocol refuses, or
    None: nesting deeper than 64 levels, a number literal the parser stood a :class:`_Refused`
    in for, an integer beyond +-(2^53-1), a lone surrogate in a string or key, a key that is
    not a string, a value that is not JSON, and a float unless ``floats`` (parsed bodies may
    hold floats, whose fields the converter checks; preimages may not). The path is built
    only for a refused item (this walk runs on every envelope signed or checked)."""
    if depth > _MAX_DEPTH:
        return "", f"nested deeper than {_MAX_DEPTH} levels"
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, _Refused):
        return "", value.reason
    if isinstance(value, int):
        in_range = -MAX_SAFE_INT <= value <= MAX_SAFE_INT
        return None if in_range else ("", f"integer {value} is beyond +-(2^53-1)")
    if isinstance(value, float):
        return None if floats else ("", "floats are not allowed (send reals as f32 hex)")
    if isinstance(value, str):
        return ("", "a string holds a lone surrogate") if _SURROGATE.search(value) else None
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                return "", f"object key {key!r:.40} is not a string"
            if _SURROGATE.search(key):
                return "", "an object key holds a lone surrogate"
        for key, item in value.items():
            found = _problem(item, depth + 1, floats=floats)
            if found is not None:
                return f".{key:.40}{found[0]}", found[1]
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = _problem(item, depth + 1, floats=floats)
            if found is not None:
                return f"[{index}]{found[0]}", found[1]
        return None
    return "", f"{type(value).__name__} is not a JSON value"


def _refused(value: object, *, floats: bool) -> str | None:
    """``$path: reason`` of the first item of ``value`` the protocol refuses, or None."""
    found = _problem(value, 0, floats=floats)
    return None if found is None else f"${found[0]}: {found[1]}"


def canonical_json(value: object) -> bytes:
    """The RFC 8785 bytes of ``value``; raises CanonicalJSONError naming the refused item."""
    problem = _refused(value, floats=False)
    if problem is not None:
        raise CanonicalJSONError(problem)
    try:
        return rfc8785.dumps(cast(Any, value))
    except rfc8785.CanonicalizationError as e:  # _check refuses these first; kept as a backstop
        raise CanonicalJSONError(f"$: {e}") from e


def body_digest(body: object) -> str:
    """``sha256_hex(JCS(body))``: the digest signatures and run ids are made of."""
    return hashlib.sha256(canonical_json(body)).hexdigest()


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, item in pairs:
        if key in result:
            raise Malformed(f"JSON: duplicate key {key!r:.80}")
        result[key] = item
    return result


def _no_constant(name: str) -> Any:
    raise Malformed(f"JSON: {name} is not allowed")


@attrs.frozen
class _Refused:
    """Stands in the parsed value for a number literal the wire never carries, so that the
    error can name where it was (a hook sees the literal, not its place)."""

    reason: str


def _int_literal(digits: str) -> int | _Refused:
    # Length first: int() of a digit string past Python's limit (4300) raises ValueError.
    if len(digits.lstrip("-")) > _MAX_INT_DIGITS:
        return _Refused(f"an integer of {len(digits)} characters is beyond +-(2^53-1)")
    if digits == "-0":
        return _Refused("-0 is not allowed (write 0)")
    value = int(digits)
    if not -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
        return _Refused(f"integer {digits} is beyond +-(2^53-1)")
    return value


def _float_literal(text: str) -> float | _Refused:
    value = float(text)
    return value if math.isfinite(value) else _Refused(f"number {text:.40} is out of range")


def _depth(text: str) -> int:
    """How deeply the arrays and objects of valid JSON ``text`` nest."""
    brackets = _NOT_A_BRACKET.sub("", text)
    return max(itertools.accumulate(map(_BRACKET_STEP.__getitem__, brackets)), default=0)


def parse_json(data: bytes | str) -> Any:
    """Parse JSON strictly; :class:`Malformed` (400) naming the problem otherwise.

    Refused: bytes that are not UTF-8, duplicate keys, ``NaN``/``Infinity``, numbers that
    overflow a float (``1e999``), integers beyond +-(2^53-1) (a long digit string is refused
    before it is converted), ``-0``, nesting deeper than 64 levels and strings or keys holding
    a lone surrogate (``"\\ud800"``); the detail names where (``JSON: $.a[2]: ...``). Whether
    a number may be negative, a float or in a narrower range is the converter's check of the
    field.
    """
    if isinstance(data, bytes | bytearray | memoryview):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise Malformed(f"JSON: not valid UTF-8 at byte {e.start}") from None
    else:
        text = data
    try:
        value = json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_constant=_no_constant,
            parse_int=_int_literal,
            parse_float=_float_literal,
        )
    except json.JSONDecodeError as e:
        raise Malformed(f"JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise Malformed(f"JSON: nested deeper than {_MAX_DEPTH} levels") from None
    # Cheap tests of the text first, the walks only where they can find something: only text
    # with more than _MAX_DEPTH brackets can nest deeper; a refused literal has 16 digits, a
    # 3-digit exponent or is -0; only a \uD800-\uDFFF escape makes a lone surrogate (strict
    # UTF-8 refuses encoded ones).
    if text.count("[") + text.count("{") > _MAX_DEPTH and _depth(text) > _MAX_DEPTH:
        raise Malformed(f"JSON: nested deeper than {_MAX_DEPTH} levels")
    if _MAYBE_REFUSED.search(text):
        problem = _refused(value, floats=True)
        if problem is not None:
            raise Malformed(f"JSON: {problem}")
    return value
