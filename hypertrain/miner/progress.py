"""Progress lines on stderr: one per phase change, and per inner step while training.

Format: ``hypertrain-miner: round W: PHASE key=value ...``. Step lines carry ``step=t/H``,
``loss`` and ``tokens_per_s`` (measured with the injected monotonic clock, real time by default).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """Writes progress lines to ``stream`` (default stderr)."""

    def __init__(
        self,
        stream: TextIO | None = None,
        monotonic: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._stream = stream
        self._monotonic = monotonic
        self._step_started = 0.0
        self.lines: list[str] = []

    def _write(self, line: str) -> None:
        self.lines.append(line)
        stream = self._stream if self._stream is not None else sys.stderr
        stream.write(line + "\n")
        stream.flush()

    def phase(self, w: int, phase: str, **info: object) -> None:
        """Report that round ``w`` entered ``phase``."""
        extra = "".join(f" {k}={v}" for k, v in info.items())
        self._write(f"hypertrain-miner: round {w}: {phase}{extra}")
        self._step_started = self._monotonic()

    def step_reporter(self, w: int, tokens_per_step: int) -> Callable[[int, int, float], None]:
        """A training callback ``(t, H, loss)`` that writes one line per step."""
        self._step_started = self._monotonic()

        def report(t: int, total: int, loss: float) -> None:
            now = self._monotonic()
            elapsed = max(now - self._step_started, 1e-9)
            self._step_started = now
            self._write(
                f"hypertrain-miner: round {w}: training step={t}/{total} loss={loss:.4f} "
                f"tokens_per_s={tokens_per_step / elapsed:.0f}"
            )

        return report
