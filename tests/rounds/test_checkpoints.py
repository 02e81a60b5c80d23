"""The checkpoint schedule and status (rounds/checkpoints.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypertrain.rounds.checkpoints import checkpoint_rounds, status_of


def test_every_ten_and_the_last_round() -> None:
    assert checkpoint_rounds(8, 10, None) == []
    assert checkpoint_rounds(9, 10, None) == [9]
    assert checkpoint_rounds(25, 10, None) == [9, 19]
    assert checkpoint_rounds(24, 10, 25) == [9, 19, 24]
    assert checkpoint_rounds(23, 10, 25) == [9, 19]
    assert checkpoint_rounds(19, 10, 20) == [9, 19]  # the last round is on the schedule once
    assert checkpoint_rounds(2, 10, 3) == [2]
    assert checkpoint_rounds(2, 1, 3) == [0, 1, 2]
    with pytest.raises(ValueError, match="every"):
        checkpoint_rounds(3, 0, None)


@given(st.integers(-1, 300), st.integers(1, 40), st.one_of(st.none(), st.integers(1, 300)))
def test_schedule_properties(applied: int, every: int, total: int | None) -> None:
    rounds = checkpoint_rounds(applied, every, total)
    assert rounds == sorted(set(rounds))
    assert all(0 <= w <= applied for w in rounds)
    for w in range(applied + 1):
        exists = total is None or w < total
        wanted = exists and ((w + 1) % every == 0 or (total is not None and w == total - 1))
        assert (w in rounds) == wanted


def test_status() -> None:
    assert status_of(9, 8) == "provisional"
    assert status_of(9, 9) == "final"
    assert status_of(9, 12) == "final"
    assert status_of(0, -1) == "provisional"
