"""The re-score draw rule (hypertrain/compute/draws.py): its rate over many step ids is the
permille, it is exact at the edges, and it depends on a round's randomness, which the draw
round guarantees did not exist while the nodes answered."""

from __future__ import annotations

import hashlib
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypertrain.compute import draw_round, is_drawn
from hypertrain.compute.draws import rescore_hash

IDS = 20_000
RANDOMNESS = st.binary(min_size=32, max_size=32).map(bytes.hex)


@settings(max_examples=25, deadline=None)
@given(randomness=RANDOMNESS, permille=st.integers(min_value=1, max_value=999))
def test_the_draw_rate_over_many_step_ids_is_the_permille(randomness: str, permille: int) -> None:
    drawn = sum(is_drawn(randomness, f"j{i:016x}", permille) for i in range(IDS))
    p = permille / 1000
    sigma = math.sqrt(IDS * p * (1 - p))
    assert abs(drawn - IDS * p) <= 6 * sigma + 1


def test_the_default_rate_over_many_rounds_and_ids() -> None:
    rounds = [hashlib.sha256(b"round %d" % r).hexdigest() for r in range(40)]
    drawn = sum(is_drawn(r, f"j{i}", 50) for r in rounds for i in range(1000))
    assert abs(drawn - 2000) <= 6 * math.sqrt(40_000 * 0.05 * 0.95)


@given(randomness=RANDOMNESS, job=st.text(min_size=1, max_size=40))
def test_the_edges_are_exact(randomness: str, job: str) -> None:
    assert not is_drawn(randomness, job, 0)
    assert is_drawn(randomness, job, 1000)
    value = int.from_bytes(rescore_hash(randomness, job), "big")
    for permille in (1, 50, 999):
        assert is_drawn(randomness, job, permille) == (value * 1000 < permille * 2**256)


@settings(max_examples=50)
@given(job=st.text(min_size=1, max_size=40))
def test_a_step_id_alone_does_not_tell_whether_it_is_drawn(job: str) -> None:
    """Over rounds' randomness the same step is drawn and not drawn: the outcome is not a
    function of what a node knows when it answers (its job id)."""
    outcomes = {is_drawn(hashlib.sha256(b"%d" % r).hexdigest(), job, 500) for r in range(64)}
    assert outcomes == {True, False}


@given(latest=st.integers(min_value=0, max_value=2**40), due=st.integers(0, 2**40))
def test_the_draw_round_is_after_every_round_published_or_stored(latest: int, due: int) -> None:
    r = draw_round(latest, due)
    assert r > latest
    assert r > due
    assert r == max(latest, due) + 1


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        is_drawn("ab", "j1", 50)
    with pytest.raises(ValueError, match="permille"):
        is_drawn("00" * 32, "j1", 1001)
