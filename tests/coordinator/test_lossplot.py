"""The dashboard's hand-drawn SVG loss chart (pure): one point per finite loss, later ``t`` to
the right, higher loss higher up, every point inside the frame, and a chart without points that
says so."""

from __future__ import annotations

import math
import re

import pytest

from hypertrain.coordinator.web.lossplot import CHART_HEIGHT, CHART_WIDTH, loss_chart


def _dots(svg: str) -> list[tuple[float, float, int]]:
    return [
        (float(x), float(y), int(t))
        for x, y, t in re.findall(
            r'<circle class="pt" cx="([\d.]+)" cy="([\d.]+)"[^>]* data-t="(\d+)"', svg
        )
    ]


def test_points_go_right_with_t_and_up_with_the_loss() -> None:
    dots = _dots(loss_chart([(0, 5.5), (1, 5.0), (2, 4.0), (5, 4.5)]))
    assert [t for _, _, t in dots] == [0, 1, 2, 5]
    xs, ys = [x for x, _, _ in dots], [y for _, y, _ in dots]
    assert xs == sorted(xs)
    assert len(set(xs)) == 4
    assert ys[0] < ys[1] < ys[3] < ys[2]  # SVG's y grows downwards: the lowest loss is lowest
    assert all(0 < x < CHART_WIDTH and 0 < y < CHART_HEIGHT for x, y in zip(xs, ys, strict=True))


@pytest.mark.parametrize("points", [[(3, 4.25)], [(0, 2.0), (1, 2.0)]])
def test_one_point_or_equal_losses_still_draw(points: list[tuple[int, float]]) -> None:
    dots = _dots(loss_chart(points))
    assert len(dots) == len(points)
    assert len({y for _, y, _ in dots}) == 1
    assert all(0 < y < CHART_HEIGHT for _, y, _ in dots)


def test_non_finite_losses_are_left_out_and_no_points_say_so() -> None:
    assert [t for _, _, t in _dots(loss_chart([(0, math.nan), (1, 3.0), (2, math.inf)]))] == [1]
    empty = loss_chart([])
    assert _dots(empty) == []
    assert "no held-out loss yet" in empty
    assert empty.startswith('<svg id="loss-chart"')
    assert empty.endswith("</svg>")
