"""The field validators, one by one, and the converter's strictness and error paths."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypertrain.protocol.converter import field_errors, structure, unstructure
from hypertrain.protocol.errors import Malformed, SchemaError
from hypertrain.protocol.jcs import MAX_SAFE_INT
from hypertrain.protocol.messages import Bisect, Chunk, Commit
from hypertrain.protocol.ss58 import ss58_encode
from hypertrain.protocol.validators import (
    Check,
    FieldError,
    f32,
    hex64,
    image_digest,
    int_in,
    int_param,
    list_of,
    one_of,
    optional,
    pos_int,
    sig_hex,
    ss58,
    strict_bool,
    text,
    u_int,
)

ADDRESS = ss58_encode(bytes(32))
BAD_CHECKSUM = ADDRESS[:-1] + ("1" if ADDRESS[-1] != "1" else "2")

CASES: list[tuple[Check, list[object], list[object]]] = [
    (hex64, ["0" * 64, "ab" * 32], ["A" * 64, "0" * 63, "0" * 65, "g" * 64, 5, None, b"0" * 64]),
    (sig_hex, ["0" * 128], ["0" * 64, "0" * 127, "F" * 128, 1]),
    (image_digest, ["sha256:" + "a" * 64], ["a" * 64, "sha256:" + "A" * 64, "sha512:" + "a" * 64]),
    (ss58, [ADDRESS], [BAD_CHECKSUM, "0" * 48, ADDRESS[:45], "I" * 48, 5]),
    (f32, ["0000803f", "00000000"], ["0000803F", "0000803", "0000803f0", 1.0]),
    (u_int, [0, 1, MAX_SAFE_INT], [-1, MAX_SAFE_INT + 1, True, False, 1.0, "1", None]),
    (pos_int, [1, MAX_SAFE_INT], [0, -1, MAX_SAFE_INT + 1, True, 1.0]),
    (strict_bool, [True, False], [0, 1, "true", None]),
    (int_in(2, 1024), [2, 1024], [1, 1025, True]),
    (text(3), ["", "abc"], ["abcd", 3, None]),
    (one_of(["a", 1]), ["a", 1], ["b", True, 1.0, "1"]),
    (optional(u_int), [None, 0], [-1, True]),
]


@pytest.mark.parametrize(("check", "good", "bad"), CASES)
def test_checks(check: Check, good: list[object], bad: list[object]) -> None:
    for value in good:
        check.check("f", value)
    for value in bad:
        with pytest.raises(FieldError) as info:
            check.check("f", value)
        assert info.value.field == "f"
        assert info.value.reason.startswith(check.reason)
        with pytest.raises(Malformed) as param:  # outside a body: a 400 naming it
            check.check_param("f", value)
        assert param.value.detail.startswith(f"f: {check.reason}")


@given(st.integers())
def test_u_and_pos_ranges(value: int) -> None:
    assert u_int.test(value) == (0 <= value <= 2**53 - 1)
    assert pos_int.test(value) == (1 <= value <= 2**53 - 1)


@pytest.mark.parametrize(
    ("raw", "check", "value"),
    [
        ("0", u_int, 0),
        ("007", u_int, 7),
        (str(MAX_SAFE_INT), u_int, MAX_SAFE_INT),
        ("1", pos_int, 1),
    ],
)
def test_int_param_reads_decimal_digits(raw: str, check: Check, value: int) -> None:
    assert int_param("w", raw, check) == value


@pytest.mark.parametrize(
    ("raw", "check"),
    [
        ("9" * 4400, u_int),  # int() itself would raise ValueError (Python's digit limit)
        ("9" * 40, u_int),
        (str(2**63), u_int),
        (str(MAX_SAFE_INT + 1), u_int),
        ("0", pos_int),
        ("", u_int),
        ("-1", u_int),
        ("+1", u_int),
        (" 1", u_int),
        ("1_0", u_int),
        ("\u00b2", u_int),  # str.isdigit() is true, int() refuses it
        ("\u0661", u_int),  # Arabic-Indic one: int() would read it
        ("abc", u_int),
    ],
)
def test_int_param_refuses_anything_else_naming_the_parameter(raw: str, check: Check) -> None:
    with pytest.raises(Malformed) as caught:
        int_param("w", raw, check)
    assert caught.value.detail.startswith(f"w: {check.reason}, got ")


@attrs.frozen
class _Holder:
    items: tuple[str, ...] = attrs.field(
        validator=list_of(hex64, min_len=1, max_len=3, strictly_sorted=True)
    )
    tags: tuple[str, ...] = attrs.field(default=(), validator=list_of(text(5), unique=True))


def test_list_of() -> None:
    a, b = "0" * 64, "1" * 64
    _Holder((a, b))
    for items, reason in [
        ((), "items: must hold 1..3 items, got 0"),
        ((a, a, a, a), "items: must hold 1..3 items, got 4"),
        ((a, "x"), "items[1]: must be 64 lowercase hex chars"),
        ((b, a), "items: items must be sorted ascending and distinct"),
        ((a, a), "items: items must be sorted"),
        ([a], "items: must be an array"),
    ]:
        with pytest.raises(FieldError, match=reason.replace("[", r"\[").replace("]", r"\]")):
            _Holder(items)  # type: ignore[arg-type]
    with pytest.raises(FieldError, match="tags: items must be distinct"):
        _Holder((a,), ("x", "x"))


def test_validators_also_guard_python_construction() -> None:
    with pytest.raises(FieldError, match="off"):
        Chunk(off=-1, len=1, sha256="0" * 64)
    with pytest.raises(FieldError, match="len"):
        Chunk(off=0, len=True, sha256="0" * 64)


def test_converter_error_names_every_failing_path() -> None:
    body: dict[str, Any] = {
        "dispute_id": "X",
        "level": "step",
        "interval": [0, True],
        "N": 2,
        "hashes": ["0" * 64, 5, "0" * 64],
        "party": ADDRESS,
        "extra": 1,
    }
    with pytest.raises(SchemaError) as info:
        structure(Bisect, body)
    detail = info.value.detail
    assert detail.startswith("Bisect body: ")
    for part in (
        "$.interval[1]: expected an int, got a boolean",
        "$.hashes[1]: expected a string, got an int",
        "$: unknown field(s) 'extra'",
    ):
        assert part in detail
    assert info.value.status == 400


def test_field_errors_of_a_validator_failure() -> None:
    with pytest.raises(SchemaError) as info:
        structure(Chunk, {"off": 0, "len": 1, "sha256": "zz"})
    assert info.value.detail == "Chunk body: $.sha256: must be 64 lowercase hex chars, got 'zz'"
    assert field_errors(ValueError("plain")) == ["$: plain"]


def test_unstructure_gives_plain_json() -> None:
    chunk = Chunk(off=0, len=1, sha256="0" * 64)
    assert unstructure(chunk) == {"off": 0, "len": 1, "sha256": "0" * 64}
    with pytest.raises(TypeError):
        unstructure(5)
    bisect = structure(
        Bisect,
        {
            "dispute_id": "0" * 64,
            "level": "op",
            "interval": [1, 2],
            "N": 2,
            "hashes": ["0" * 64] * 3,
            "party": ADDRESS,
        },
    )
    assert bisect.interval == (1, 2)
    assert isinstance(bisect.hashes, tuple)
    assert unstructure(bisect)["interval"] == [1, 2]
    assert type(unstructure(bisect)["hashes"]) is list


def test_commit_refuses_numeric_strings_and_floats() -> None:
    body = {
        "w": "0",
        "hotkey": ADDRESS,
        "leaf_scheme": "ht-leaf-v1",
        "n_leaves": 7.0,
        "leaves_root": "0" * 64,
        "metrics_root": "0" * 64,
        "final_theta_hash": "0" * 64,
        "ef_in_hash": "0" * 64,
        "ef_out_hash": "0" * 64,
        "delta_hash": "0" * 64,
        "delta_bytes": 0,
        "tokens": 0,
    }
    with pytest.raises(SchemaError) as info:
        structure(Commit, body)
    assert "$.w: expected an int, got a string" in info.value.detail
    assert "$.n_leaves: expected an int, got a float" in info.value.detail
