"""The demo's live table and summary, from round views (pure: no I/O, no clock).

A :class:`RoundRow` is what one ``GET /v1/runs/{id}/rounds/{w}`` view says about round ``w``:
its state, how many rostered miners uploaded, and once the daemon merged it the update's norm,
how many deltas were preclipped and the held-out loss of the merged weights
(``heldout_loss_after``: the loss of theta(w + 1)); and how the scoring steps of its deltas
(``jobs``) were settled: by two agreeing nodes, by a third copy, or by the daemon's fallback.
:class:`Table` turns a stream of views into printed lines: a round's line is printed when its
text differs from the last one printed for that round, so the table is live and never repeats
itself. :func:`verdict` decides the demo's exit status.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

__all__ = ["HEADER", "RoundRow", "Table", "Verdict", "summary_lines", "verdict"]

HEADER: Final = (
    "round  state          uploaded  update norm  clipped  held-out loss  scored agree/3rd/fb"
)
_SETTLED_HOW: Final = ("agreement", "third-copy", "fallback")


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@attrs.frozen
class RoundRow:
    """One round of the table (module doc)."""

    w: int
    state: str
    uploaded: int
    rostered: int
    update_norm: float | None = None
    clipped: int | None = None
    heldout_loss: float | None = None
    """Loss of the round's start weights theta(w)."""
    heldout_loss_after: float | None = None
    """Loss of the merged weights theta(w + 1)."""
    jobs: int = 0
    """Scoring steps of the round's deltas (two per upload: public and hidden trace)."""
    settled: tuple[int, int, int] = (0, 0, 0)
    """Steps settled by agreement, by a third copy and by the daemon's fallback."""

    @classmethod
    def from_view(cls, view: Mapping[str, Any]) -> RoundRow:
        miners = view.get("miners") or []
        clipped = view.get("clipped")
        jobs = [j for j in view.get("scoring_jobs") or [] if isinstance(j, dict)]
        hows = [j.get("how") for j in jobs if j.get("state") == "settled"]
        return cls(
            w=int(view["w"]),
            state=str(view["state"]),
            uploaded=sum(1 for m in miners if m.get("status") == "UPLOADED"),
            rostered=len(miners),
            update_norm=_number(view.get("update_norm")),
            clipped=clipped if isinstance(clipped, int) else None,
            heldout_loss=_number(view.get("heldout_loss")),
            heldout_loss_after=_number(view.get("heldout_loss_after")),
            jobs=len(jobs),
            settled=(
                hows.count("agreement"),
                hows.count("third-copy"),
                hows.count("fallback"),
            ),
        )

    @property
    def merged(self) -> bool:
        """The daemon merged the round (its update norm is known)."""
        return self.update_norm is not None

    @property
    def scored(self) -> bool:
        """Every scoring step of every upload is settled (or there is nothing to score)."""
        return self.jobs >= 2 * self.uploaded and sum(self.settled) >= self.jobs

    @property
    def complete(self) -> bool:
        """Merged, evaluated and scored: nothing about the round will change in the table."""
        return self.merged and self.heldout_loss_after is not None and self.scored

    def line(self) -> str:
        norm = "-" if self.update_norm is None else f"{self.update_norm:.4f}"
        clipped = "-" if self.clipped is None else str(self.clipped)
        loss = "-" if self.heldout_loss_after is None else f"{self.heldout_loss_after:.4f}"
        uploaded = f"{self.uploaded}/{self.rostered}"
        scored = "/".join(str(n) for n in self.settled) + f" of {self.jobs}"
        return (
            f"{self.w:5d}  {self.state:<13}  {uploaded:>8}  {norm:>11}  {clipped:>7}"
            f"  {loss:>13}  {scored:>19}"
        )


@attrs.define
class Table:
    """The latest row of every round seen so far (module doc)."""

    printed: dict[int, RoundRow] = attrs.field(factory=dict)

    def update(self, row: RoundRow) -> str | None:
        """The line to print for ``row``, or None when it says nothing new."""
        previous = self.printed.get(row.w)
        self.printed[row.w] = row
        line = row.line()
        return None if previous is not None and previous.line() == line else line

    def latest(self) -> list[RoundRow]:
        """The last printed row of every round, by round."""
        return [self.printed[w] for w in sorted(self.printed)]


@attrs.frozen
class Verdict:
    """Whether the demo did what it promises (exit 0), and why not."""

    ok: bool
    reason: str


def verdict(rows: Sequence[RoundRow], rounds: int, initial_loss: float | None) -> Verdict:
    """OK when ``rounds`` rounds were merged and the held-out loss of the last merge's weights
    is below the loss of theta(0); otherwise the first reason it is not."""
    merged = [row for row in rows if row.merged]
    if len(merged) < rounds:
        return Verdict(False, f"only {len(merged)} of {rounds} rounds were applied")
    final = merged[rounds - 1].heldout_loss_after
    if initial_loss is None or final is None:
        return Verdict(False, "the daemon did not report the held-out loss")
    if not (math.isfinite(final) and final < initial_loss):
        return Verdict(False, f"held-out loss did not fall: {initial_loss:.4f} -> {final:.4f}")
    return Verdict(True, f"{rounds} rounds applied and the held-out loss fell")


def summary_lines(
    rows: Sequence[RoundRow], rounds: int, initial_loss: float | None, seconds: float
) -> list[str]:
    """The closing summary: rounds, deltas merged and clipped, the loss from theta(0) on."""
    merged = [row for row in rows if row.merged][:rounds]
    uploaded = sum(row.uploaded for row in merged)
    offered = sum(row.rostered for row in merged)
    clipped = sum(row.clipped or 0 for row in merged)
    settled = [sum(row.settled[i] for row in merged) for i in range(3)]
    lines = [
        f"summary: {len(merged)}/{rounds} rounds applied in {seconds:.1f} s;"
        f" {uploaded}/{offered} deltas uploaded, {clipped} preclipped",
        f"summary: {sum(row.jobs for row in merged)} scoring steps; settled by agreement"
        f" {settled[0]}, by a third copy {settled[1]}, by the fallback {settled[2]}",
    ]
    final = merged[-1].heldout_loss_after if merged else None
    if initial_loss is not None and final is not None:
        change = 100.0 * (final - initial_loss) / initial_loss
        lines.append(
            f"summary: held-out loss {initial_loss:.4f} at theta(0) -> {final:.4f}"
            f" at theta({len(merged)}) ({change:+.1f}%)"
        )
    return lines
