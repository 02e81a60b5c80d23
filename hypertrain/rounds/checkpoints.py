"""When the daemon publishes a checkpoint, and its status (issue 16; spec 7 "Checkpoints").

A checkpoint covers rounds ``0..w`` (the whole lineage from genesis, so anyone can replay it
from the run's initial state). Round ``w`` gets one when ``(w + 1)`` is a multiple of ``every``
(``HYPERTRAIN_CHECKPOINT_EVERY``, default 10: rounds 9, 19, ...) and when it is the run's last
round (``total_rounds - 1``). It is written *provisional* as soon as round ``w`` is merged and
rewritten while a rollback changes a tape in range; it turns *final* once every round in range
is final (rounds become final in order, so once round ``w`` is), and never changes again.
"""

from __future__ import annotations

from typing import Final, Literal

__all__ = ["DEFAULT_CHECKPOINT_EVERY", "CheckpointStatus", "checkpoint_rounds", "status_of"]

DEFAULT_CHECKPOINT_EVERY: Final = 10

CheckpointStatus = Literal["provisional", "final"]


def checkpoint_rounds(applied_through: int, every: int, total_rounds: int | None) -> list[int]:
    """Every checkpoint round ``w <= applied_through`` of a run, ascending (module doc)."""
    if every < 1:
        raise ValueError(f"every must be >= 1, got {every}")
    last = None if total_rounds is None else total_rounds - 1
    if last is not None:
        applied_through = min(applied_through, last)  # no round after the last one exists
    rounds = list(range(every - 1, applied_through + 1, every))
    if last is not None and 0 <= last <= applied_through and last % every != every - 1:
        rounds.append(last)
    return rounds


def status_of(w: int, last_final_w: int) -> CheckpointStatus:
    """``final`` once round ``w`` (and so every round before it) is final."""
    return "final" if last_final_w >= w else "provisional"
