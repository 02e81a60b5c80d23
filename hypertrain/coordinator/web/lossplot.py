"""The dashboard's held-out loss chart as inline SVG, drawn by hand (pure: no I/O, no script).

:func:`loss_chart` draws ``(t, loss of theta(t))`` points: a polyline through them and one
``<circle class="pt">`` per point (with ``data-t`` and ``data-loss`` and a ``<title>`` tooltip),
the axes' ranges as labels, and nothing from a third party. The y axis spans the points' own
range (padded, so one point or equal losses still draw), the x axis their ``t``. Without
points it says so in the SVG itself. Every number comes in as an int or a float and is written
with a fixed format; nothing here is text from the database.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

__all__ = ["CHART_HEIGHT", "CHART_WIDTH", "loss_chart"]

CHART_WIDTH: Final = 640
CHART_HEIGHT: Final = 220
_LEFT: Final = 56
_RIGHT: Final = 16
_TOP: Final = 14
_BOTTOM: Final = 30


def _span(values: Sequence[float]) -> tuple[float, float]:
    low, high = min(values), max(values)
    pad = (high - low) * 0.08 or max(abs(high) * 0.05, 1e-3)
    return low - pad, high + pad


def _scale(value: float, low: float, high: float, start: float, length: float) -> float:
    return start + (value - low) / (high - low) * length if high > low else start + length / 2


def loss_chart(points: Sequence[tuple[int, float]]) -> str:
    """The SVG of ``points`` (sorted by ``t``; non-finite losses are left out)."""
    shown = [(t, loss) for t, loss in points if math.isfinite(loss)]
    head = (
        f'<svg id="loss-chart" class="chart" viewBox="0 0 {CHART_WIDTH} {CHART_HEIGHT}"'
        f' width="{CHART_WIDTH}" height="{CHART_HEIGHT}" role="img"'
        ' aria-label="held-out loss of theta(t) by t" xmlns="http://www.w3.org/2000/svg">'
    )
    width = CHART_WIDTH - _LEFT - _RIGHT
    height = CHART_HEIGHT - _TOP - _BOTTOM
    frame = f'<rect x="{_LEFT}" y="{_TOP}" width="{width}" height="{height}" class="frame"/>'
    if not shown:
        return (
            f'{head}{frame}<text x="{_LEFT + width / 2:.0f}" y="{_TOP + height / 2:.0f}"'
            ' text-anchor="middle" class="empty">no held-out loss yet</text></svg>'
        )
    t_low, t_high = float(shown[0][0]), float(shown[-1][0])
    y_low, y_high = _span([loss for _, loss in shown])
    xy = [
        (
            _scale(float(t), t_low, t_high, _LEFT, width),
            _TOP + height - _scale(loss, y_low, y_high, 0, height),  # lower losses lower
        )
        for t, loss in shown
    ]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
    dots = "".join(
        f'<circle class="pt" cx="{x:.1f}" cy="{y:.1f}" r="3.5" data-t="{t}"'
        f' data-loss="{loss:.6f}"><title>theta({t}): {loss:.4f}</title></circle>'
        for (t, loss), (x, y) in zip(shown, xy, strict=True)
    )
    bottom = CHART_HEIGHT - _BOTTOM
    labels = (
        f'<text x="{_LEFT - 6}" y="{_TOP + 10}" text-anchor="end">{y_high:.3f}</text>'
        f'<text x="{_LEFT - 6}" y="{bottom}" text-anchor="end">{y_low:.3f}</text>'
        f'<text x="{_LEFT}" y="{bottom + 18}">t = {shown[0][0]}</text>'
        f'<text x="{CHART_WIDTH - _RIGHT}" y="{bottom + 18}" text-anchor="end">'
        f"t = {shown[-1][0]}</text>"
    )
    return f'{head}{frame}{labels}<polyline class="line" points="{line}"/>{dots}</svg>'
