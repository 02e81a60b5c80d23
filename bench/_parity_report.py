"""bench/parity.py's figures: the per-arm summary, its markdown table and the loss plot."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
from _parity_run import Arm, Run


@attrs.frozen
class Summary:
    """One arm over its seeds: final held-out loss mean and spread, gap to data-parallel."""

    arm: Arm
    runs: tuple[Run, ...]
    baseline: float  # the data-parallel mean of the same model

    @property
    def mean(self) -> float:
        return statistics.fmean(r.final for r in self.runs)

    @property
    def spread(self) -> float:
        """Half the range over the seeds (0 with one seed)."""
        finals = [r.final for r in self.runs]
        return (max(finals) - min(finals)) / 2

    @property
    def gap(self) -> float:
        return self.mean / self.baseline - 1

    @property
    def wall_s(self) -> float:
        return statistics.fmean(r.wall_s for r in self.runs)


def summarise(runs: Sequence[Run]) -> list[Summary]:
    """One summary per arm, in the order the arms first ran."""
    by_arm: dict[Arm, list[Run]] = {}
    for run in runs:
        by_arm.setdefault(run.arm, []).append(run)
    dp = {
        arm.model: statistics.fmean(r.final for r in rs)
        for arm, rs in by_arm.items()
        if arm.kind == "dp"
    }
    return [Summary(arm, tuple(rs), dp[arm.model]) for arm, rs in by_arm.items()]


def _clips(s: Summary) -> str:
    if s.arm.kind == "dp":
        return "-"
    merged = sum(r.merged for r in s.runs)
    pre = sum(r.preclipped for r in s.runs)
    cc = sum(r.cclipped for r in s.runs)
    return f"{pre}/{merged} pre, {cc}/{merged} cc"


def table(summaries: Sequence[Summary]) -> str:
    """The markdown table of every arm (mean +- half-range over seeds, gap in percent)."""
    lines = [
        "| arm | seeds | held-out loss | gap to DP | tokens | wall s/run | clipped | "
        "max norm, to center |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        norm, diff = max(r.max_norm for r in s.runs), max(r.max_diff for r in s.runs)
        norms = "-" if s.arm.kind == "dp" else f"{norm:.3g}, {diff:.3g}"
        lines.append(
            f"| {s.arm.label} | {len(s.runs)} | {s.mean:.4f} ± {s.spread:.4f} | "
            f"{s.gap:+.2%} | {s.runs[0].tokens:,} | {s.wall_s:.0f} | {_clips(s)} | {norms} |"
        )
    return "\n".join(lines)


def dump(runs: Sequence[Run], path: Path) -> None:
    """Every run as JSON (arm fields, seed, points, figures)."""
    rows = [attrs.asdict(r) for r in runs]
    path.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


def load(path: Path) -> list[Run]:
    rows: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    out = []
    for row in rows:
        arm = Arm(**row.pop("arm"))
        points = tuple((int(t), float(v)) for t, v in row.pop("points"))
        out.append(Run(arm=arm, points=points, **row))
    return out


def plot(summaries: Sequence[Summary], best: Sequence[Arm], path: Path) -> None:
    """Held-out loss against tokens (mean over seeds) of data-parallel and the ``best`` arms."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=100)
    for s in summaries:
        if s.arm.kind != "dp" and s.arm not in best:
            continue
        tokens = [t for t, _ in s.runs[0].points]
        losses = [statistics.fmean(r.points[i][1] for r in s.runs) for i in range(len(tokens))]
        style = "-" if s.arm.kind == "dp" else "--"
        ax.plot(tokens[1:], losses[1:], style, marker=".", label=f"{s.arm.label} ({s.mean:.3f})")
    ax.set_xlabel("tokens (all miners together)")
    ax.set_ylabel("held-out loss (nats/token)")
    ax.set_title("DiLoCo (4 miners, the protocol's merge) against data-parallel AdamW")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
