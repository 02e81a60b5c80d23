"""Timing shared by the bench scripts: calls per second of a function, measured in one run."""

from __future__ import annotations

import time
from collections.abc import Callable


def rate(fn: Callable[[], object], seconds: float, *, batch: int = 20) -> float:
    """Calls per second of ``fn`` over about ``seconds``, after a short warm-up.

    ``fn`` runs in batches of ``batch`` calls between clock reads, so cheap functions are not
    dominated by the cost of reading the clock.
    """
    for _ in range(batch):
        fn()
    calls, start = 0, time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(batch):
            fn()
        calls += batch
        now = time.perf_counter()
        if now >= deadline:
            return calls / (now - start)
