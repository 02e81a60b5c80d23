"""Canonical JSON (RFC 8785, "JCS") for everything signed or hashed, and strict JSON parsing.

``canonical_json`` walks the value first and refuses, with the path of the offending item,
anything the protocol does not allow in a preimage: floats (reals travel as f32 hex), integers
beyond +-(2^53-1), strings holding surrogate code points (lone surrogates), non-string keys and
non-JSON types. The walk then hands the value to the ``rfc8785`` package, which sorts keys by
UTF-16 code units and writes the exact bytes.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, cast

import rfc8785

from hypertrain.protocol.errors import CanonicalJSONError, Malformed

__all__ = ["MAX_SAFE_INT", "body_digest", "canonical_json", "parse_json"]

MAX_SAFE_INT = 2**53 - 1
_SURROGATE = re.compile("[\ud800-\udfff]")
_MAX_DEPTH = 64


def _check(value: object, path: str, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise CanonicalJSONError(f"{path}: nested deeper than {_MAX_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if -MAX_SAFE_INT <= value <= MAX_SAFE_INT:
            return
        raise CanonicalJSONError(f"{path}: integer {value} is beyond +-(2^53-1)")
    if isinstance(value, float):
        raise CanonicalJSONError(f"{path}: floats are not allowed (send reals as f32 hex)")
    if isinstance(value, str):
        if _SURROGATE.search(value):
            raise CanonicalJSONError(f"{path}: string holds a lone surrogate")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise CanonicalJSONError(f"{path}: object key {key!r} is not a string")
            if _SURROGATE.search(key):
                raise CanonicalJSONError(f"{path}: object key holds a lone surrogate")
            _check(item, f"{path}.{key}", depth + 1)
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check(item, f"{path}[{index}]", depth + 1)
        return
    raise CanonicalJSONError(f"{path}: {type(value).__name__} is not a JSON value")


def canonical_json(value: object) -> bytes:
    """The RFC 8785 bytes of ``value``; raises CanonicalJSONError naming the refused item."""
    _check(value, "$", 0)
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
            raise Malformed(f"JSON: duplicate key {key!r}")
        result[key] = item
    return result


def _no_constant(name: str) -> Any:
    raise Malformed(f"JSON: {name} is not allowed")


def parse_json(data: bytes | str) -> Any:
    """Parse JSON strictly: UTF-8 only, no duplicate keys, no NaN/Infinity; Malformed otherwise."""
    if isinstance(data, bytes | bytearray | memoryview):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise Malformed(f"JSON: not valid UTF-8 at byte {e.start}") from None
    else:
        text = data
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise Malformed(f"JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise Malformed("JSON: nested too deeply") from None
