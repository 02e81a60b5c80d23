"""The external aggregator's local state directory (``hypertrain aggregate --state-dir``).

Layout::

    objects/<sha256>            every object of every merged step (OuterState blobs, start
                                states, tapes), content addressed
    runs/<run_id>/<w>.json      {"w", "tape_key", "out_state", "theta_start_sha256",
                                 "theta_hash"} of each round this aggregator merged

Promises: a file is written to a temporary name and renamed into place, so a crash leaves
either the whole file or none; an object is read back only if its bytes hash to its key
(otherwise it counts as absent). Small synchronous file I/O: the blobs are one model's state.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import attrs
from attrs import frozen

from hypertrain.aggregator.step import Step
from hypertrain.protocol.validators import is_hex64

__all__ = ["MergedRound", "StateDir"]


@frozen
class MergedRound:
    """What the state directory remembers of one merged round."""

    w: int
    tape_key: str
    out_state: str
    theta_start_sha256: str
    theta_hash: str


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp")
    with open(temp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)


class StateDir:
    """The directory (module doc); created on first write."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _object_path(self, sha256: str) -> Path:
        if not is_hex64(sha256):
            raise ValueError(f"not an object key: {sha256!r}")
        return self.root / "objects" / sha256

    def get(self, sha256: str) -> bytes | None:
        """The object ``sha256``, or None when absent or damaged."""
        try:
            data = self._object_path(sha256).read_bytes()
        except FileNotFoundError:
            return None
        return data if hashlib.sha256(data).hexdigest() == sha256 else None

    def put(self, data: bytes) -> str:
        """Store ``data``; returns its key."""
        key = hashlib.sha256(data).hexdigest()
        if self.get(key) is None:
            _write_atomic(self._object_path(key), data)
        return key

    def _round_path(self, run_id: str, w: int) -> Path:
        if not is_hex64(run_id):
            raise ValueError(f"not a run id: {run_id!r}")
        return self.root / "runs" / run_id / f"{w}.json"

    def save(self, step: Step) -> MergedRound:
        """Store the step's objects, then its record (so a record always has its objects)."""
        for blob in step.objects:
            self.put(blob)
        merged = MergedRound(
            step.w, step.tape_key, step.out_state, step.theta_start_sha256, step.theta_hash
        )
        record = attrs.asdict(merged)
        _write_atomic(self._round_path(step.run_id, step.w), json.dumps(record).encode())
        return merged

    def merged(self, run_id: str, w: int) -> MergedRound | None:
        """The record of round ``w``, or None (also when its objects are gone)."""
        try:
            record = json.loads(self._round_path(run_id, w).read_text())
            merged = MergedRound(
                int(record["w"]),
                str(record["tape_key"]),
                str(record["out_state"]),
                str(record["theta_start_sha256"]),
                str(record["theta_hash"]),
            )
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return None
        if self.get(merged.out_state) is None or self.get(merged.theta_start_sha256) is None:
            return None
        return merged
