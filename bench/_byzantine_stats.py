"""What the merge sees in one round of bench/byzantine.py: norms, cosines and clipping.

Per round, over the uploads as the aggregator receives them and the centre ``c`` CenteredClip
starts from (the previous round's outer update ``g``):

- ``|d|``: the honest deltas' L2 norms (min / median / max);
- ``cos``: the cosines between every two honest deltas (min / mean / max);
- ``|mean|``: the norm of the honest deltas' mean (what a plain mean merge of them gives);
- ``|p-c|``: the norm of ``preclip(delta) - c`` for the honest deltas, what ``cclip_tau`` is
  compared with in CenteredClip's first iteration (min / median / max);
- ``bad |d|``, ``bad |p-c|``: the same medians for the attackers' uploads;
- ``|g|``: the norm of the merged update ``g``;
- ``pre h/b``, ``clip h/b``: honest and attacking uploads that preclip scaled down, and that
  CenteredClip's last iteration still scaled down (``s < 1``: at convergence, an honest upload
  clipped there pulls ``g`` away from the mean).

Norms and dots are float64 over the flattened tensors (figures for a reader, not the protocol's
exactly rounded ones).
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Mapping

import attrs
import numpy as np

from hypertrain.aggregator.merge import MergeResult, Params, preclip
from hypertrain.rounds.audit import Q_ONE
from hypertrain.trainer.codec import F32Array

Vec = np.ndarray


def _flat(tensors: Mapping[str, F32Array]) -> Vec:
    return np.concatenate([np.asarray(tensors[n], np.float64).ravel() for n in sorted(tensors)])


def _three(values: list[float], mid: str = "median") -> tuple[float, float, float]:
    if not values:
        return (float("nan"),) * 3
    middle = statistics.median(values) if mid == "median" else statistics.fmean(values)
    return (min(values), middle, max(values))


@attrs.frozen
class RoundStats:
    """One round's figures (module doc)."""

    w: int
    norms: tuple[float, float, float]
    cosines: tuple[float, float, float]
    mean_norm: float
    to_center: tuple[float, float, float]
    bad_norm: float
    bad_to_center: float
    g_norm: float
    preclipped: tuple[int, int]
    clipped: tuple[int, int]

    def line(self) -> str:
        """The figures in the columns of :func:`stats_header`."""

        def three(t: tuple[float, float, float]) -> str:
            return "/".join(f"{x:.3f}" for x in t)

        return (
            f"{self.w:>3}  {three(self.norms):<20}{three(self.cosines):<20}{self.mean_norm:>7.3f}"
            f"  {three(self.to_center):<20}{self.bad_norm:>9.3f}{self.bad_to_center:>10.3f}"
            f"{self.g_norm:>7.3f}  {self.preclipped[0]:>2}/{self.preclipped[1]:<2}"
            f"    {self.clipped[0]:>2}/{self.clipped[1]:<2}"
        )


def stats_header() -> str:
    """The column names of :meth:`RoundStats.line`."""
    return (
        f"{'w':>3}  {'|d| min/med/max':<20}{'cos min/mean/max':<20}{'|mean|':>7}"
        f"  {'|p-c| min/med/max':<20}{'bad |d|':>9}{'bad |p-c|':>10}{'|g|':>7}"
        f"  {'pre h/b':<8}{'clip h/b'}"
    )


def round_stats(
    w: int,
    deltas: Mapping[str, Mapping[str, F32Array]],
    bad: Collection[str],
    center: Mapping[str, F32Array],
    params: Params,
    result: MergeResult,
) -> RoundStats:
    """The figures of round ``w``: ``deltas`` as uploaded, ``center`` the one the merge
    ``result`` started from, ``bad`` the attackers' ids."""
    kept = [h for h, _ in result.inputs]
    honest = [h for h in kept if h not in bad]
    attackers = [h for h in kept if h in bad]
    vec = {h: _flat(deltas[h]) for h in kept}
    c = _flat(center)
    pre = {h: _flat(preclip(deltas[h], float(params.preclip_norm))[0]) for h in kept}
    norms = {h: float(np.linalg.norm(v)) for h, v in vec.items()}
    cosines = [
        float(vec[a] @ vec[b]) / (norms[a] * norms[b])
        for i, a in enumerate(honest)
        for b in honest[i + 1 :]
        if norms[a] and norms[b]
    ]
    mean = np.mean([vec[h] for h in honest], axis=0) if honest else np.zeros_like(c)
    to_c = {h: float(np.linalg.norm(pre[h] - c)) for h in kept}
    clipped = {h for h, s in result.scales.items() if s and s[-1] != Q_ONE}
    nan = float("nan")
    return RoundStats(
        w=w,
        norms=_three([norms[h] for h in honest]),
        cosines=_three(cosines, "mean"),
        mean_norm=float(np.linalg.norm(mean)),
        to_center=_three([to_c[h] for h in honest]),
        bad_norm=statistics.median([norms[h] for h in attackers]) if attackers else nan,
        bad_to_center=statistics.median([to_c[h] for h in attackers]) if attackers else nan,
        g_norm=float(np.linalg.norm(_flat(result.g))),
        preclipped=(
            sum(h not in bad for h in result.preclipped),
            sum(h in bad for h in result.preclipped),
        ),
        clipped=(len(clipped - set(bad)), len(clipped & set(bad))),
    )
