"""What the scoring feed reads (:mod:`hypertrain.coordinator.services.scorefeed`).

- :func:`unscored_uploads`: uploaded deltas that have no scoring step yet;
- :func:`run_scoring_facts`: a run's manifest and registered dataset.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Final

import attrs

from hypertrain.coordinator.flows.lifecycle import parse_manifest
from hypertrain.coordinator.tables.runs import get_run
from hypertrain.protocol.manifest import RunManifest

__all__ = ["BATCH", "LOOKBACK_ROUNDS", "Upload", "run_scoring_facts", "unscored_uploads"]

BATCH: Final = 64
"""Uploads one pass of the feed takes."""
LOOKBACK_ROUNDS: Final = 16
"""Only uploads of a run's newest rounds are fed (a scan of the whole history every beacon
round would grow with the run; a delta older than this is no longer worth scoring)."""


@attrs.frozen
class Upload:
    """One uploaded delta without scoring jobs."""

    run_id: str
    w: int
    hotkey: str
    delta_hash: str

    @property
    def subject(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "w": self.w, "hotkey": self.hotkey}


def unscored_uploads(conn: sqlite3.Connection, limit: int = BATCH) -> list[Upload]:
    """UPLOADED miners of running runs' last :data:`LOOKBACK_ROUNDS` rounds that have no
    compute job yet, oldest rounds first."""
    rows = conn.execute(
        "SELECT m.run_id, m.w, m.hotkey, m.delta_manifest FROM miners m"
        " JOIN runs r ON r.run_id = m.run_id"
        " WHERE m.status = 'UPLOADED' AND m.delta_manifest IS NOT NULL AND r.status = 'running'"
        " AND m.w >= (SELECT max(w) FROM rounds ro WHERE ro.run_id = m.run_id) - ?"
        " AND NOT EXISTS (SELECT 1 FROM compute_jobs j WHERE j.subject ="
        ' \'{"hotkey":"\' || m.hotkey || \'","run_id":"\' || m.run_id || \'","w":\' || m.w'
        " || '}')"
        " ORDER BY m.run_id, m.w, m.hotkey LIMIT ?",
        (LOOKBACK_ROUNDS, limit),
    ).fetchall()
    return [
        Upload(run_id, w, hotkey, str(json.loads(manifest)["body"]["delta_hash"]))
        for run_id, w, hotkey, manifest in rows
    ]


def run_scoring_facts(conn: sqlite3.Connection, run_id: str) -> tuple[RunManifest, str | None]:
    """The run's manifest and its registered dataset's manifest sha256 (None: none yet)."""
    manifest = parse_manifest(get_run(conn, run_id).manifest_envelope)
    row = conn.execute(
        "SELECT manifest_sha256 FROM run_datasets WHERE run_id = ?", (run_id,)
    ).fetchone()
    return manifest, None if row is None else str(row[0])
