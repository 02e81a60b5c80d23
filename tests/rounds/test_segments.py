"""Segment windows (DESIGN.md section 9): properties and the draw's exact rules."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypertrain.protocol.f32 import f32_hex
from hypertrain.protocol.hashes import segments_seed, uniform_draw
from hypertrain.rounds.segments import segment_reasons, select_segments, window_count

RUN = hashlib.sha256(b"run").hexdigest()
SIG = hashlib.sha256(b"sig").hexdigest()
TARGET = "5HB7kpn92RS7uF9uWn8bXSvPVKFPg8kPUFDd5sbveGjX6Dbi"


def _select(u: int, k: int, q: int, norms: list[str | None] | None = None, w: int = 3):
    return select_segments(RUN, w, SIG, TARGET, u=u, k_segments=k, q_top=q, norms=norms or [])


@given(
    u=st.integers(1, 40),
    k=st.integers(0, 8),
    q=st.integers(0, 4),
    w=st.integers(0, 2**20),
    norms=st.lists(st.one_of(st.none(), st.floats(0, 10, width=32).map(f32_hex)), max_size=41),
)
def test_windows_are_sorted_distinct_in_range_hold_the_final_and_count_right(
    u: int, k: int, q: int, w: int, norms: list[str | None]
) -> None:
    windows = _select(u, k, q, norms, w)
    assert list(windows) == sorted(set(windows))
    assert all(b == a + 1 and 0 <= a < u for a, b in windows)
    assert (u - 1, u) in windows
    assert len(windows) == min(u, 1 + min(k, u - 1) + q)
    assert windows == _select(u, k, q, norms, w)  # a pure function of its inputs


def test_the_draw_is_a_fisher_yates_over_the_pool_with_one_counter() -> None:
    seed = segments_seed(RUN, 3, SIG, TARGET)
    pool, ctr, drawn = list(range(9)), 0, set()
    for j in range(3):
        offset, ctr = uniform_draw(seed, len(pool) - j, ctr)
        pool[j], pool[j + offset] = pool[j + offset], pool[j]
        drawn.add(pool[j])
    expected = sorted(drawn | {9})
    assert _select(10, 3, 0) == tuple((i, i + 1) for i in expected)


def test_top_q_takes_the_largest_committed_norms_of_the_rest_ties_to_the_lower_index() -> None:
    u = 10
    random_part = {a for a, _ in _select(u, 2, 0)}
    rest = [i for i in range(u) if i not in random_part]
    norms: list[str | None] = [f32_hex(0.0)] * (u + 1)
    norms[rest[-1] + 1] = f32_hex(5.0)  # the largest: taken first
    norms[rest[1] + 1] = f32_hex(2.0)
    norms[rest[0] + 1] = f32_hex(2.0)  # ties with rest[1]: the lower index wins
    got = {a for a, _ in _select(u, 2, 2, norms)}
    assert got == random_part | {rest[-1], rest[0]}


def test_a_nan_norm_cannot_hide_a_window() -> None:
    u = 10
    random_part = {a for a, _ in _select(u, 1, 0)}
    hidden = next(i for i in range(u - 1, -1, -1) if i not in random_part)
    norms: list[str | None] = [f32_hex(1.0)] * (u + 1)
    norms[hidden + 1] = "0000c07f"  # NaN
    assert hidden in {a for a, _ in _select(u, 1, 1, norms)}


def test_small_rounds_take_every_window() -> None:
    assert _select(3, 3, 1) == ((0, 1), (1, 2), (2, 3))
    assert _select(1, 3, 1) == ((0, 1),)


def test_window_count_and_reasons() -> None:
    assert window_count(6, 2) == 3
    with pytest.raises(ValueError, match="must divide"):
        window_count(7, 2)
    assert segment_reasons(("probation",)) == ("probation", "final")
    assert segment_reasons(("random", "final")) == ("random", "final")
