"""The one rule for what a token file holds (hypertrain.protocol.tokens.token_in)."""

from __future__ import annotations

import string

from hypothesis import given
from hypothesis import strategies as st

from hypertrain.protocol.tokens import MAX_TOKEN_FILE_BYTES, token_in

VISIBLE = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1)
SPACE = st.text(alphabet=" \t\r\n", max_size=3)


@given(token=VISIBLE, before=SPACE, after=SPACE)
def test_one_visible_ascii_token_is_read_whatever_whitespace_surrounds_it(
    token: str, before: str, after: str
) -> None:
    data = f"{before}{token}{after}".encode("ascii")
    assert token_in(data) == (token.encode("ascii") if len(data) <= MAX_TOKEN_FILE_BYTES else None)


@given(left=VISIBLE, right=VISIBLE, bad=st.sampled_from([" ", "\t", "\x00", "\x7f", "é", "\n"]))
def test_a_byte_that_cannot_go_in_a_header_inside_the_token_refuses_the_file(
    left: str, right: str, bad: str
) -> None:
    assert token_in(f"{left}{bad}{right}".encode()) is None


def test_base64_tokens_and_the_size_bound() -> None:
    assert token_in(b"ab+/cd==\n") == b"ab+/cd=="
    assert token_in(b"") is None
    assert token_in(b" \n") is None
    assert token_in(b"x" * MAX_TOKEN_FILE_BYTES) == b"x" * MAX_TOKEN_FILE_BYTES
    assert token_in(b"x" * (MAX_TOKEN_FILE_BYTES + 1)) is None
    assert token_in(string.punctuation.encode()) == string.punctuation.encode()
