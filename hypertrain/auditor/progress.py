"""What the auditor tells its operator: one line per job and per dispute action, and notes.

Plain mode writes ``hypertrain-auditor: job ID w=W target=HK mode=M -> STATE result=R
first_bad_leaf=N (S.s) [reason]`` on stderr, and for disputes ``dispute ID w=W miner=HK as
ROLE -> STATE [level=L interval=[a,b] N=n] [loser=ROLE op=SPEC] (S.s) [reason]``; ``--json``
writes the :class:`JobReport` or :class:`DisputeReport` as one JSON object per line on stdout
instead (a dispute's object has a ``dispute`` key, a job's a ``job`` key). Notes (idle,
unreachable, shutdown) always go to stderr as ``hypertrain-auditor: ...``.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Literal, TextIO

import attrs

__all__ = ["DisputeReport", "DisputeRole", "DisputeState", "JobReport", "JobState", "Progress"]

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


DisputeRole = Literal["auditor", "referee"]
"""How this auditor takes part: the disputed auditor (a party), or the referee."""
DisputeState = Literal["bisect", "ruled", "taken", "refused", "failed"]
"""What came of it: a Bisect posted, a Resolution posted, the dispute already resolved by
another referee (409), the coordinator refused the post (``reason`` says why), or the
recomputation could not be built or run (``reason``; ``retry`` says whether the next poll
tries again)."""


@attrs.frozen
class DisputeReport:
    """One dispute action, as the progress line reports it."""

    dispute: str
    run_id: str
    role: DisputeRole
    state: DisputeState
    seconds: float
    w: int | None = None
    miner: str | None = None
    level: str | None = None
    interval: tuple[int, int] | None = None
    N: int | None = None
    loser: str | None = None
    op_spec: str | None = None
    retry: bool | None = None
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        out = attrs.asdict(self)
        if self.interval is not None:
            out["interval"] = list(self.interval)
        return out


class Progress:
    """Writes reports and notes (module docstring); ``reports`` keeps every report."""

    def __init__(
        self, *, json_lines: bool = False, out: TextIO | None = None, err: TextIO | None = None
    ) -> None:
        self.json_lines = json_lines
        self._out, self._err = out, err
        self.reports: list[JobReport] = []
        self.disputes: list[DisputeReport] = []

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

    def dispute(self, report: DisputeReport) -> None:
        self.disputes.append(report)
        if self.json_lines:
            self._write(self._out, sys.stdout, json.dumps(report.to_json(), separators=(",", ":")))
            return
        parts = [f"dispute {report.dispute}"]
        parts += [f"{k}={v}" for k in ("w", "miner") if (v := getattr(report, k)) is not None]
        parts += [f"as {report.role}", f"-> {report.state}"]
        if report.level is not None and report.interval is not None:
            a, b = report.interval
            parts.append(f"level={report.level} interval=[{a},{b}] N={report.N}")
        if report.loser is not None:
            parts.append(f"loser={report.loser}")
        if report.op_spec is not None:
            parts.append(f"op={report.op_spec}")
        if report.retry is not None:
            parts.append(f"retry={'yes' if report.retry else 'no'}")
        parts.append(f"({report.seconds:.1f}s)")
        if report.reason:
            parts.append(report.reason)
        self.note(" ".join(parts))
