"""The segment windows of a segment audit (spec 6.2, settled in DESIGN.md section 9).

The coordinator draws them when it seals an AuditChallenge and every auditor derives them again
from the challenge and the committed preimages, so both must compute exactly this:

- ``u = H / J`` windows ``[i, i + 1]`` in leaf units, ``i = 0 .. u - 1``;
- ``seed = segments_seed(run_id, w, beacon_sig_sha256, target)``;
- ``chosen = {u - 1}``: the final window, always;
- ``pool`` = the other windows in ascending order; for ``j`` in ``0 .. min(k_segments,
  len(pool)) - 1``: ``r = j + uniform(len(pool) - j)``, swap ``pool[j]`` and ``pool[r]``, add
  ``pool[j]`` to ``chosen``. ``uniform`` is :func:`~hypertrain.protocol.hashes.uniform_draw`,
  its counter running across all draws from 0;
- then the ``Q_top`` remaining windows with the largest committed ``norm_f32`` of leaf
  ``i + 1`` (ties to the lower index; a missing preimage counts as norm 0, a NaN as infinity:
  a miner cannot hide a window behind a non-number);
- the windows sorted by ``i``.

The reasons of a segments challenge get ``final`` added (:func:`segment_reasons`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from hypertrain.protocol.f32 import f32_from_hex
from hypertrain.protocol.hashes import segments_seed, uniform_draw

__all__ = ["Window", "segment_reasons", "select_segments", "window_count"]

Window = tuple[int, int]


def window_count(H: int, J: int) -> int:  # noqa: N803 (spec names)
    """``u = H / J``: the number of windows of a round (``J`` divides ``H``)."""
    if J <= 0 or H <= 0 or H % J:
        raise ValueError(f"J={J} must divide H={H}")
    return H // J


def select_segments(
    run_id: str,
    w: int,
    beacon_sig_sha256: str,
    target: str,
    *,
    u: int,
    k_segments: int,
    q_top: int,
    norms: Sequence[str | None],
) -> tuple[Window, ...]:
    """The windows of ``target``'s segment audit in round ``w`` (module doc).

    ``norms[k]`` is the committed ``norm_f32`` (f32 hex) of leaf ``k`` (``k = 0 .. u``), or None
    where the preimage is missing; a shorter list counts the rest as missing.
    """
    if u < 1:
        raise ValueError("a round has at least one window")
    seed = segments_seed(run_id, w, beacon_sig_sha256, target)
    chosen = {u - 1}
    pool = list(range(u - 1))
    ctr = 0
    for j in range(min(k_segments, len(pool))):
        offset, ctr = uniform_draw(seed, len(pool) - j, ctr)
        r = j + offset
        pool[j], pool[r] = pool[r], pool[j]
        chosen.add(pool[j])

    def norm(i: int) -> float:
        value = norms[i + 1] if i + 1 < len(norms) else None
        if value is None:
            return 0.0
        x = float(f32_from_hex(value))
        return math.inf if math.isnan(x) else x

    remaining = sorted(set(range(u)) - chosen, key=lambda i: (-norm(i), i))
    chosen.update(remaining[:q_top])
    return tuple((i, i + 1) for i in sorted(chosen))


def segment_reasons(reasons: Sequence[str]) -> tuple[str, ...]:
    """``reasons`` with ``final`` appended (once) for a segments challenge."""
    return tuple(reasons) if "final" in reasons else (*reasons, "final")
