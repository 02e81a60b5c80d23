"""What the auditor tells its operator: one line per job, and a few notes.

Plain mode writes ``hypertrain-auditor: job ID w=W target=HK mode=M -> STATE result=R
first_bad_leaf=N (S.s) [reason]`` on stderr; ``--json`` writes the :class:`JobReport` as one
JSON object per line on stdout instead. Notes (idle, unreachable, shutdown) always go to
stderr as ``hypertrain-auditor: ...``.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Literal, TextIO

import attrs

__all__ = ["JobReport", "JobState", "Progress"]

JobState = Literal["done", "failed", "handed-back", "lease-lost"]
"""How a leased job ended: a verdict posted, ``fail`` posted, another run's job handed back
(``fail`` with retry), or the lease lost (expired and requeued: nothing posted)."""


@attrs.frozen
class JobReport:
    """One leased job, as the progress line reports it."""

    job: str
    run_id: str
    state: JobState
    seconds: float
    w: int | None = None
    target: str | None = None
    mode: str | None = None
    result: str | None = None
    first_bad_leaf: int | None = None
    retry: bool | None = None
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


class Progress:
    """Writes reports and notes (module docstring); ``reports`` keeps every report."""

    def __init__(
        self, *, json_lines: bool = False, out: TextIO | None = None, err: TextIO | None = None
    ) -> None:
        self.json_lines = json_lines
        self._out, self._err = out, err
        self.reports: list[JobReport] = []

    def _write(self, stream: TextIO | None, default: TextIO, line: str) -> None:
        target = stream if stream is not None else default
        target.write(line + "\n")
        target.flush()

    def note(self, message: str) -> None:
        self._write(self._err, sys.stderr, f"hypertrain-auditor: {' '.join(message.split())}")

    def job(self, report: JobReport) -> None:
        self.reports.append(report)
        if self.json_lines:
            self._write(self._out, sys.stdout, json.dumps(report.to_json(), separators=(",", ":")))
            return
        parts = [f"job {report.job}"]
        parts += [f"{k}={v}" for k in ("w", "target", "mode") if (v := getattr(report, k))
                  is not None]  # fmt: skip
        parts.append(f"-> {report.state}")
        if report.result is not None:
            parts.append(f"result={report.result}")
            leaf = "-" if report.first_bad_leaf is None else report.first_bad_leaf
            parts.append(f"first_bad_leaf={leaf}")
        if report.retry is not None:
            parts.append(f"retry={'yes' if report.retry else 'no'}")
        parts.append(f"({report.seconds:.1f}s)")
        if report.reason:
            parts.append(report.reason)
        self.note(" ".join(parts))
