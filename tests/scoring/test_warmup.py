"""The warm-up passes (in this process, configured): they read the synthetic inputs through the
real parsers and scorers, start no thread (a fork after them loses nothing) and change no
result."""

from __future__ import annotations

import os
from pathlib import Path

from hypertrain.scoring.registry import DELTA_LOSS
from hypertrain.scoring.sandbox import score_inline


def _threads() -> set[str]:
    """This process's thread ids (a thread another test left may end meanwhile: compare ids,
    not counts)."""
    return set(os.listdir("/proc/self/task"))


def test_warm_up_starts_no_thread_and_changes_no_result(
    job: dict[str, Path], configured: None
) -> None:
    from hypertrain.scoring.warmup import warm_spare, warm_up  # torch

    before = score_inline(DELTA_LOSS, job)
    threads = _threads()
    warm_up()
    warm_spare()
    assert _threads() - threads == set()  # none started (and still running)
    after = score_inline(DELTA_LOSS, job)
    assert before.ok
    assert after.result == before.result
