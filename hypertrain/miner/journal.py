"""The miner's restart journal and its durable artifact writes.

``workdir/journal.jsonl`` holds one JSON event per line, ``{"w": int, "phase": str, ...}``, each
appended with ``write`` + ``fsync``. Phases (in round order)::

    accepted -> trained -> committed -> leaves -> uploaded -> manifest_posted
    skipped | aborted       (terminal alternatives)
    served                  one per StateServe the coordinator stored for a segment audit
                            of the round: {"challenge_hash", "t", "blob_sha256"} (any time
                            after "leaves"; see :mod:`hypertrain.miner.auditserve`)

After a MISMATCH (:mod:`hypertrain.miner.disputes`), any time after "leaves"::

    rerun_computed  {"leaves_root", "committed_root"}   the rerun's root, before posting it
    reran           {"classification", "leaves_root"}   the coordinator's classification
    disputed        {"dispute_id", "action"}            the Dispute the coordinator holds
    bisected        {"dispute_id", "level", "interval", "N", "t", "layer"}   one per stage
    dispute_settled {"reason", ...}                     nothing more to do about the round's
                            audit (a verdict, TRANSIENT, or the dispute's outcome: "dispute_id",
                            "state", "loser", "loser_role", "cause", "op_spec")

A line cut short by a crash (no trailing newline, or not JSON) can only be the last one: it is
ignored and truncated away when the journal is loaded, so the next append starts a clean line.

The rule that makes restarts safe: every artifact an event depends on is written with
:func:`write_durable` (temporary file, fsync, rename, fsync of the directory) *before* the event
is appended. A journal line therefore always means its artifacts are complete on disk.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

__all__ = ["JOURNAL_FILE", "PHASES", "TERMINAL_PHASES", "Journal", "write_durable"]

JOURNAL_FILE: Final = "journal.jsonl"
PHASES: Final = (
    "accepted",
    "trained",
    "committed",
    "leaves",
    "uploaded",
    "manifest_posted",
    "skipped",
    "aborted",
    "served",
    "rerun_computed",
    "reran",
    "disputed",
    "bisected",
    "dispute_settled",
)
TERMINAL_PHASES: Final = frozenset({"manifest_posted", "skipped", "aborted"})


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durable(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically and durably (tmp + fsync + rename + dir fsync)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


class Journal:
    """An append-only, fsynced JSONL event log; use :meth:`load`."""

    def __init__(self, path: Path, events: list[dict[str, Any]]) -> None:
        self.path = path
        self._events = events

    @classmethod
    def load(cls, workdir: Path) -> Journal:
        """Load ``workdir/journal.jsonl`` (created if absent), dropping a torn last line."""
        workdir.mkdir(parents=True, exist_ok=True)
        path = workdir / JOURNAL_FILE
        data = path.read_bytes() if path.exists() else b""
        events: list[dict[str, Any]] = []
        good = 0
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break
            try:
                event = json.loads(line)
            except ValueError:
                break
            if not isinstance(event, dict) or not isinstance(event.get("w"), int):
                break
            events.append(event)
            good += len(line)
        if good != len(data):
            with path.open("r+b") as f:
                f.truncate(good)
                os.fsync(f.fileno())
        elif not data:
            path.touch(mode=0o600)
        _fsync_dir(workdir)
        return cls(path, events)

    @property
    def events(self) -> list[dict[str, Any]]:
        """Every event, oldest first (a copy)."""
        return list(self._events)

    def append(self, w: int, phase: str, **extra: Any) -> dict[str, Any]:
        """Append and fsync one event; returns it."""
        if phase not in PHASES:
            raise ValueError(f"unknown journal phase {phase!r}")
        event = {"w": w, "phase": phase, **extra}
        line = json.dumps(event, separators=(",", ":"), sort_keys=True).encode() + b"\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        self._events.append(event)
        return event

    def phases(self, w: int) -> Mapping[str, dict[str, Any]]:
        """The last event of each phase recorded for round ``w``."""
        return {e["phase"]: e for e in self._events if e["w"] == w}

    def served(self, w: int) -> frozenset[tuple[str, int]]:
        """``(challenge_hash, t)`` of every StateServe of round ``w`` recorded as stored."""
        return frozenset(
            (str(e["challenge_hash"]), int(e["t"]))
            for e in self._events
            if e["w"] == w and e["phase"] == "served"
        )

    def all_of(self, w: int, phase: str) -> list[dict[str, Any]]:
        """Every event of ``phase`` recorded for round ``w``, oldest first."""
        return [e for e in self._events if e["w"] == w and e["phase"] == phase]

    def rounds(self) -> list[int]:
        """The rounds with at least one event, ascending."""
        return sorted({int(e["w"]) for e in self._events})

    def unfinished(self) -> list[int]:
        """Rounds with events but no terminal one, ascending."""
        return [w for w in self.rounds() if not TERMINAL_PHASES & set(self.phases(w))]
