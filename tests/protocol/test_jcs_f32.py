"""Canonical JSON (RFC 8785) and f32 hex (spec 2.2): properties and refusals."""

from __future__ import annotations

import hashlib
import json
import math
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypertrain.protocol.errors import CanonicalJSONError, Malformed
from hypertrain.protocol.f32 import f32_from_hex, f32_hex, f32_round, is_f32_hex
from hypertrain.protocol.jcs import MAX_SAFE_INT, body_digest, canonical_json, parse_json

# --- an independent JCS for the value space the protocol allows ---------------------------------


def utf16_key(s: str) -> bytes:
    return s.encode("utf-16-be")


def reference_jcs(value: Any) -> str:
    """RFC 8785 restricted to null/bool/int/str/list/dict (no floats), written from the RFC."""
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda kv: utf16_key(kv[0]))
        return "{" + ",".join(reference_jcs(k) + ":" + reference_jcs(v) for k, v in items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(reference_jcs(v) for v in value) + "]"
    if isinstance(value, str):
        out = ['"']
        for ch in value:
            code = ord(ch)
            if ch == '"':
                out.append('\\"')
            elif ch == "\\":
                out.append("\\\\")
            elif ch in "\b\t\n\f\r":
                out.append({"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}[ch])
            elif code < 0x20:
                out.append(f"\\u{code:04x}")
            else:
                out.append(ch)
        out.append('"')
        return "".join(out)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    assert isinstance(value, int)
    return str(value)


TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE_INT, max_value=MAX_SAFE_INT)
    | TEXT
    | st.sampled_from(["\U0001f600", "\ue000", "\u20ac", "\x7f", "\x00", "\u2028"])
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(TEXT, inner, max_size=5),
    max_leaves=30,
)


@given(JSON)
def test_jcs_matches_the_reference_and_round_trips(value: Any) -> None:
    encoded = canonical_json(value)
    assert encoded == reference_jcs(value).encode("utf-8")
    assert json.loads(encoded) == value
    assert canonical_json(json.loads(encoded)) == encoded  # idempotent


@given(st.dictionaries(TEXT, st.integers(0, 9), min_size=2, max_size=8))
def test_keys_come_out_in_utf16_code_unit_order(value: dict[str, int]) -> None:
    keys = [k for k, _ in json.loads(canonical_json(value), object_pairs_hook=list)]
    assert keys == sorted(value, key=utf16_key)


def test_utf16_order_differs_from_code_point_order() -> None:
    # U+1F600 is the surrogate pair D83D DE00, which sorts before U+E000 in UTF-16.
    value = {"\ue000": 1, "\U0001f600": 2}
    assert canonical_json(value) == '{"\U0001f600":2,"\ue000":1}'.encode()
    assert sorted(value) == ["\ue000", "\U0001f600"]  # code point order is the other way


def test_rfc8785_sorting_example() -> None:
    # RFC 8785 section 3.2.3.
    value = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    expected = (
        '{"\\r":"Carriage Return","1":"One","\u0080":"Control",'
        '"\u00f6":"Latin Small Letter O With Diaeresis","\u20ac":"Euro Sign",'
        '"\U0001f600":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}'
    )
    assert canonical_json(value) == expected.encode("utf-8")


def test_escapes_and_literals() -> None:
    value = {"s": '"\\\b\f\n\r\t\x00\x1f\x7f/é', "t": True, "f": False, "n": None, "i": -5}
    assert canonical_json(value) == (
        b'{"f":false,"i":-5,"n":null,"s":"\\"\\\\\\b\\f\\n\\r\\t\\u0000\\u001f\x7f/\xc3\xa9",'
        b'"t":true}'
    )
    assert canonical_json(MAX_SAFE_INT) == b"9007199254740991"
    assert canonical_json(-MAX_SAFE_INT) == b"-9007199254740991"
    assert canonical_json((1, [2])) == b"[1,[2]]"


@pytest.mark.parametrize(
    "value",
    [
        1.5,
        1.0,
        float("nan"),
        float("inf"),
        2**53,
        -(2**53),
        "\ud800",
        "a\udfffb",
        {"\ud800": 1},
        {1: "a"},
        {("a",): 1},
        {"a": [1, {"b": 0.5}]},
        b"bytes",
        {1, 2},
        object(),
    ],
    ids=lambda value: "object()" if type(value) is object else repr(value),  # no address
)
def test_refusals_raise_canonical_json_error(value: Any) -> None:
    with pytest.raises(CanonicalJSONError):
        canonical_json(value)


def test_refusal_names_the_path() -> None:
    with pytest.raises(CanonicalJSONError, match=r"\$\.a\[1\]\.b"):
        canonical_json({"a": [1, {"b": 0.5}]})


def test_canonical_json_error_is_malformed() -> None:
    assert issubclass(CanonicalJSONError, Malformed)


def test_body_digest() -> None:
    body = {"b": 1, "a": "x"}
    assert body_digest(body) == hashlib.sha256(b'{"a":"x","b":1}').hexdigest()


def test_parse_json_is_strict() -> None:
    assert parse_json(b'{"a":[1,"\\u00e9"]}') == {"a": [1, "é"]}
    assert parse_json('{"a":1}') == {"a": 1}
    for bad in (
        b'{"a":1,"a":2}',
        b'{"x":{"a":1,"a":1}}',
        b"NaN",
        b'{"a":Infinity}',
        b"[-Infinity]",
        b'"\xff"',
        b'{"a":',
        b"",
    ):
        with pytest.raises(Malformed):
            parse_json(bad)


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("1" * 4400, "JSON: $: an integer of 4400 characters is beyond +-(2^53-1)"),
        ("[-" + "9" * 17 + "]", "JSON: $[0]: an integer of 18 characters is beyond +-(2^53-1)"),
        (str(MAX_SAFE_INT + 1), f"JSON: $: integer {MAX_SAFE_INT + 1} is beyond +-(2^53-1)"),
        (str(-MAX_SAFE_INT - 1), f"JSON: $: integer {-MAX_SAFE_INT - 1} is beyond +-(2^53-1)"),
        ('{"fingerprint": -0}', "JSON: $.fingerprint: -0 is not allowed (write 0)"),
        ("[1e999]", "JSON: $[0]: number 1e999 is out of range"),
        ("-1E400", "JSON: $: number -1E400 is out of range"),
        ("[" * 65 + "]" * 65, "JSON: nested deeper than 64 levels"),
        ('{"a":' * 65 + "0" + "}" * 65, "JSON: nested deeper than 64 levels"),
        ("[" * 100_000, "JSON: nested deeper than 64 levels"),
        ('"\\ud800"', "JSON: $: a string holds a lone surrogate"),
        ('["ok", {"k": "x\\udfff"}]', "JSON: $[1].k: a string holds a lone surrogate"),
        ('{"\\udc00": 1}', "JSON: $: an object key holds a lone surrogate"),
    ],
)
def test_parse_json_refuses_what_the_wire_never_carries(text: str, detail: str) -> None:
    with pytest.raises(Malformed) as caught:
        parse_json(text)
    assert caught.value.detail == detail


def test_parse_json_keeps_what_is_within_the_bounds() -> None:
    assert parse_json(f"[{MAX_SAFE_INT}, {-MAX_SAFE_INT}, 0, -1]") == [
        MAX_SAFE_INT,
        -MAX_SAFE_INT,
        0,
        -1,
    ]
    assert parse_json("[1.5e300, -0.0]") == [1.5e300, -0.0]  # floats are the field's check
    assert parse_json("[" * 64 + "]" * 64) is not None
    brackets_in_strings = '{"a": "' + "[" * 200 + '", "b": ["]]]"]}'
    assert parse_json(brackets_in_strings) == {"a": "[" * 200, "b": ["]]]"]}
    assert parse_json('"\\ud83d\\ude00 \\\\ud800"') == "\U0001f600 \\ud800"  # a pair; not an escape


# --- f32 hex ------------------------------------------------------------------------------------

SPEC_EXAMPLES = [
    (0.1, "cdcccc3d"),
    (0.4, "cdcccc3e"),
    (0.9, "6666663f"),
    (0.95, "3333733f"),
    (1.0, "0000803f"),
    (1e-8, "77cc2b32"),
    (3e-4, "52499d39"),
    (0.25, "0000803e"),
    (1.25, "0000a03f"),
    (0.01, "0ad7233c"),
    (0.02, "0ad7a33c"),
    (0.03, "8fc2f53c"),
    (0.0, "00000000"),
]


@pytest.mark.parametrize(("x", "hexed"), SPEC_EXAMPLES)
def test_spec_examples(x: float, hexed: str) -> None:
    assert f32_hex(x) == hexed
    assert f32_from_hex(hexed) == struct.unpack("<f", struct.pack("<f", x))[0]
    assert is_f32_hex(hexed)


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_every_finite_f32_round_trips(x: float) -> None:
    hexed = f32_hex(x)
    assert is_f32_hex(hexed)
    back = f32_from_hex(hexed)
    assert struct.pack("<f", back) == struct.pack("<f", x)  # bitwise, so -0.0 stays -0.0
    assert f32_round(x) == x


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-3e38, max_value=3e38))
def test_encoding_rounds_to_nearest_f32(x: float) -> None:
    assert f32_from_hex(f32_hex(x)) == struct.unpack("<f", struct.pack("<f", x))[0]


def test_integers_and_extremes() -> None:
    assert f32_hex(1) == "0000803f"
    assert f32_hex(-0.0) == "00000080"
    assert f32_hex(3.4028234663852886e38) == "ffff7f7f"  # FLT_MAX
    assert f32_hex(1e-45) == "01000000"  # smallest subnormal


@pytest.mark.parametrize(
    "x",
    [math.nan, math.inf, -math.inf, 1e39, -1e39, 3.4028235677973366e38, 2**200, 10**400],
    ids=repr,
)
def test_f32_hex_refuses_non_finite_and_out_of_range(x: float) -> None:
    with pytest.raises(Malformed):
        f32_hex(x)


@pytest.mark.parametrize("x", [True, "1.0", None, b"\x00\x00\x80\x3f"], ids=repr)
def test_f32_hex_refuses_non_numbers(x: Any) -> None:
    with pytest.raises(Malformed):
        f32_hex(x)


@pytest.mark.parametrize(
    "h",
    ["CDCCCC3D", "cdcccc3", "cdcccc3d0", "zzzzzzzz", " cdcccc3d", "cdcccc3d\n", "", "0x3f800000"],
)
def test_bad_f32_hex_is_refused(h: str) -> None:
    assert not is_f32_hex(h)
    with pytest.raises(Malformed):
        f32_from_hex(h)


def test_non_string_f32_hex_is_refused() -> None:
    assert not is_f32_hex(b"cdcccc3d")
    with pytest.raises(Malformed):
        f32_from_hex(b"cdcccc3d")  # type: ignore[arg-type]
