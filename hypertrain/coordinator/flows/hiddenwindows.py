"""Hidden windows and their rotation: the scoring feed's transactions (issue 19 item 5).

The hidden steps of round ``w`` are scored on the run's hidden window of epoch ``e = w // R``
(``R``: ``HYPERTRAIN_HIDDEN_ROTATE_ROUNDS``), or on a newer one when the run has one already
(a late upload is never scored on a retired window): :func:`epoch_for`. Window ``e`` is the
``trace_samples`` holdout samples from sample ``e * trace_samples`` on (wrapping around the
holdout), cut into ``min(HYPERTRAIN_HIDDEN_SLICES, rows)`` slices
(:func:`hypertrain.scoring.slices.slice_bounds`); the feed builds the objects
(:mod:`hypertrain.coordinator.services.scorefeed`) and :func:`open_window` records them.

:func:`open_window` (one write) records the window's objects as private ones and the window
itself; when it is new and ``e > 0`` this is a **rotation**, in the same transaction:

1. the run's older windows are retired (:func:`~hypertrain.compute.slices.retire_windows`:
   their queued slice jobs end unscored, reason ``rotated``; a late post is answered 410);
2. re-scored on the new window: the hidden steps of the round current when the window moves
   (round ``e * R - 1``, the old window's last) and every step whose slices were cut off by 1;
   each keeps its combined score on the old window until its new slices settle
   (:mod:`hypertrain.compute.combined`);
3. the last merged theta (round ``e * R``'s start state) is scored on the new window, as the
   ``delta-loss`` of a zero delta, under the subject ``{run_id, w: e * R, theta: "start"}``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from hypertrain.compute import ComputeSettings, Event
from hypertrain.compute.rows import get_job
from hypertrain.compute.slices import (
    Window,
    enqueue_slices,
    get_window,
    record_window,
    retire_windows,
)
from hypertrain.coordinator.tables.private import mark_private
from hypertrain.store.catalog import record_object
from hypertrain.store.keys import ObjectInfo

__all__ = ["epoch_for", "newest_epoch", "open_window", "theta_subject"]


def newest_epoch(conn: sqlite3.Connection, run_id: str) -> int | None:
    """The run's newest hidden window's epoch, or None before its first."""
    row = conn.execute(
        "SELECT max(epoch) FROM hidden_windows WHERE run_id = ?", (run_id,)
    ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def epoch_for(conn: sqlite3.Connection, run_id: str, w: int, rotate_rounds: int) -> int:
    """The epoch of the window round ``w``'s hidden steps are scored on (module doc)."""
    newest = newest_epoch(conn, run_id)
    return max(w // rotate_rounds, -1 if newest is None else newest)


def theta_subject(run_id: str, w: int) -> dict[str, Any]:
    """The subject of the hidden step that scores round ``w``'s start state (the last merged
    theta when the window rotates)."""
    return {"run_id": run_id, "w": w, "theta": "start"}


def _steps_to_rescore(
    conn: sqlite3.Connection, run_id: str, epoch: int, last_round: int, cut: Sequence[str]
) -> dict[str, str]:
    """``{step subject: a slice job of it}`` of the steps re-scored on rotation (module doc)."""
    rows = conn.execute(
        "SELECT s.step_subject, s.job_id FROM hidden_slice_jobs s JOIN hidden_windows w"
        " USING (window) WHERE w.run_id = ? AND w.epoch < ?"
        " ORDER BY w.epoch, s.step_subject, s.slice",
        (run_id, epoch),
    ).fetchall()
    wanted = set(cut)
    chosen: dict[str, str] = {}
    for step, job_id in rows:
        subject = json.loads(step)
        if step in wanted or (subject.get("w") == last_round and "hotkey" in subject):
            chosen.setdefault(step, job_id)
    return chosen


def open_window(
    conn: sqlite3.Connection,
    window: Window,
    objects: Sequence[ObjectInfo],
    *,
    rotate_rounds: int,
    theta_inputs: Sequence[Mapping[str, Any]] | None,
    now_ms: int,
    settings: ComputeSettings,
) -> tuple[Window, list[Event]]:
    """Record ``window`` and rotate to it when it is new (module doc): ``(the stored window,
    events)``. ``objects``: the window's trace and slices; ``theta_inputs``: the inputs of
    the step that scores the last merged theta (None: not published, not scored)."""
    for info in objects:
        record_object(conn, info, now_ms // 1000)
        mark_private(conn, info.sha256, f"hidden window of run {window.run_id}")
    found = get_window(conn, window.run_id, window.epoch)
    if found is not None:
        return found, []
    stored = record_window(conn, window, now_ms)
    if window.epoch == 0:
        return stored, []
    cut, events = retire_windows(conn, window.run_id, window.epoch, now_ms)
    last_round = window.epoch * rotate_rounds - 1
    for step, job_id in _steps_to_rescore(
        conn, window.run_id, window.epoch, last_round, cut
    ).items():
        inputs = [
            {"name": f.name, "sha256": f.sha256, "size": f.size}
            for f in get_job(conn, job_id).inputs
        ]
        events += enqueue_slices(
            conn,
            subject=json.loads(step),
            window=stored,
            inputs=inputs,
            now_ms=now_ms,
            wait_ms=settings.wait_ms,
            settings=settings,
        )
    if theta_inputs is not None:
        events += enqueue_slices(
            conn,
            subject=theta_subject(window.run_id, window.epoch * rotate_rounds),
            window=stored,
            inputs=theta_inputs,
            now_ms=now_ms,
            wait_ms=settings.wait_ms,
            settings=settings,
        )
    return stored, events
