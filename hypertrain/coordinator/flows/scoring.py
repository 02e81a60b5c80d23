"""The scoring feed's transactions (:mod:`hypertrain.coordinator.services.scorefeed`).

- :func:`run_scoring_facts` (read): a run's manifest and registered dataset;
- :func:`enqueue_scoring` (write): an outbox row's ``delta-loss`` steps enqueued and the row
  taken out of the outbox, together: a daemon stopped anywhere either enqueued them and
  forgot the row, or did neither and feeds the row again after its restart.

The outbox rows themselves are written by :func:`hypertrain.coordinator.flows.miner.post_delta`
(:mod:`hypertrain.coordinator.tables.scoring`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any, Final

from hypertrain.compute import ComputeSettings, Event, enqueue_step
from hypertrain.compute.slices import Window, enqueue_slices
from hypertrain.coordinator.flows.lifecycle import parse_manifest
from hypertrain.coordinator.tables.runs import get_run
from hypertrain.coordinator.tables.scoring import Upload, drop_upload
from hypertrain.protocol.manifest import RunManifest
from hypertrain.scoring.registry import DELTA_LOSS

__all__ = ["BATCH", "enqueue_scoring", "run_scoring_facts"]

BATCH: Final = 64
"""Outbox rows one pass of the feed takes."""


def run_scoring_facts(conn: sqlite3.Connection, run_id: str) -> tuple[RunManifest, str | None]:
    """The run's manifest and its registered dataset's manifest sha256 (None: none yet)."""
    manifest = parse_manifest(get_run(conn, run_id).manifest_envelope)
    row = conn.execute(
        "SELECT manifest_sha256 FROM run_datasets WHERE run_id = ?", (run_id,)
    ).fetchone()
    return manifest, None if row is None else str(row[0])


def enqueue_scoring(
    conn: sqlite3.Connection,
    upload: Upload,
    steps: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    now_ms: int,
    settings: ComputeSettings,
    hidden: Window | None = None,
) -> list[Event]:
    """Enqueue ``upload``'s ``delta-loss`` ``steps`` (step -> the job's inputs) with the
    settings' wait window and drop its outbox row, in one transaction; the events to publish.
    A step enqueued before is kept as it is (``enqueue_step`` is idempotent per subject and
    step). With a ``hidden`` window, the ``hidden`` step is cut into that window's slices
    (:func:`~hypertrain.compute.slices.enqueue_slices`; its inputs' trace is the window's)."""
    events: list[Event] = []
    if hidden is not None and "hidden" in steps:
        events += enqueue_slices(
            conn,
            subject=upload.subject,
            window=hidden,
            inputs=steps["hidden"],
            now_ms=now_ms,
            wait_ms=settings.wait_ms,
            settings=settings,
        )
        steps = {step: inputs for step, inputs in steps.items() if step != "hidden"}
    for step, inputs in steps.items():
        _, more = enqueue_step(
            conn,
            challenge_id=DELTA_LOSS.id,
            subject=upload.subject,
            step=step,
            inputs=inputs,
            now_ms=now_ms,
            wait_ms=settings.wait_ms,
            settings=settings,
        )
        events += more
    drop_upload(conn, upload)
    return events
