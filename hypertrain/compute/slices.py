"""Hidden-trace shards in the compute book (issue 19 items 4 and 5; ``0021_hidden_slices.sql``).

A hidden scoring step is not one job: it is ``S`` jobs, one per slice of its hidden window
(:mod:`hypertrain.scoring.slices` cuts the window), each an ordinary two-copy ``delta-loss``
job of step ``hidden`` whose trace input is the slice. Promises:

- :func:`record_window` stores a :class:`Window` (its whole trace's sha256, its slices' input
  files); :func:`get_window` reads the run's window of an epoch back.
- :func:`enqueue_slices` enqueues the ``S`` slice jobs of one hidden step on a window with
  :func:`~hypertrain.compute.jobs.enqueue_step` (the slice job's subject is the step's subject
  plus ``slice``, ``slices`` and ``window``, so it is idempotent like any step) and records
  each in ``hidden_slice_jobs``. A retired window is refused (``Conflict``): slices of an old
  window are never used for a new step.
- One slice of a window per node: the lease query leaves out the copies of a slice job whose
  window the node holds another slice of (:data:`LEASE_GUARD`, one search of the holders'
  primary key per candidate copy), and the lease that grants a slice copy binds the node to
  that slice of the window (:func:`bind_holder`, in the same transaction). Copies of other
  steps of the same slice stay open to it (the rows are the same). :func:`check_input`
  refuses (403) the input of a slice job whose window the node is bound to another slice of,
  whatever lease it shows.
- :func:`check_slice_answer`: an ok answer for a slice must carry its per-sequence losses (the
  coordinator combines them, 400 otherwise), and a post that names a window (``window``)
  must name the job's own (409 otherwise: the node scored a stale slice).
- :func:`retire_windows` (rotation): the run's windows of earlier epochs are retired; their
  slice jobs still ``queued`` end ``unscored`` (reason ``rotated``; queued and leased copies
  cancelled, pay 0; a late post is answered 410), those the fallback already holds complete
  there. It returns the steps to re-score on the new window.

The step's own score is derived from its slice jobs when it is read
(:mod:`hypertrain.compute.combined`), so a slice whose settled result is replaced (a trusted
re-score) changes the step's combined score with it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from hypertrain.compute.answers import Answer
from hypertrain.compute.combined import step_id_of
from hypertrain.compute.jobs import canonical_subject, enqueue_step
from hypertrain.compute.model import DEFAULT_SETTINGS, ComputeSettings, Event, Job
from hypertrain.compute.rows import JOB_COLUMNS_J, job_from_row
from hypertrain.compute.transitions import end_unscored
from hypertrain.compute.wire import InputFile
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.errors import Conflict, Forbidden, Malformed
from hypertrain.scoring.registry import DELTA_LOSS

__all__ = [
    "LEASE_GUARD",
    "ROTATED",
    "SliceJob",
    "Window",
    "bind_holder",
    "check_input",
    "check_slice_answer",
    "enqueue_slices",
    "get_window",
    "record_window",
    "retire_windows",
    "slice_of",
    "unbind_holder",
]

ROTATED: Final = "rotated"
"""The reason of a slice job that ended unscored because its window was rotated out."""

LEASE_GUARD: Final = (
    " AND NOT EXISTS (SELECT 1 FROM hidden_slice_jobs s JOIN hidden_slice_holders h"
    "                 ON h.window = s.window AND h.node_id = ? AND h.slice != s.slice"
    "                 WHERE s.job_id = j.job_id)"
)
"""The lease query's condition (one parameter: the node id): not a slice of a window the node
holds another slice of."""


@attrs.frozen(kw_only=True)
class Window:
    """One hidden window of a run: ``rows`` holdout samples from ``first_sample`` on."""

    window: str
    """The sha256 of the whole window's trace (never sent to a node)."""
    run_id: str
    epoch: int
    first_sample: int
    rows: int
    slices: tuple[InputFile, ...]
    """The slices' trace files (name ``trace.u16``), in slice order."""
    retired_ms: int | None = None


@attrs.frozen
class SliceJob:
    """One ``hidden_slice_jobs`` row."""

    job_id: str
    step_subject: str
    window: str
    slice: int
    slices: int


def record_window(conn: sqlite3.Connection, window: Window, now_ms: int) -> Window:
    """Store ``window`` unless its run has one for that epoch; the stored one."""
    conn.execute(
        "INSERT INTO hidden_windows (window, run_id, epoch, first_sample, rows, slices,"
        " created_ms) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        (
            window.window,
            window.run_id,
            window.epoch,
            window.first_sample,
            window.rows,
            json.dumps([unstructure(f) for f in window.slices]),
            now_ms,
        ),
    )
    found = get_window(conn, window.run_id, window.epoch)
    assert found is not None
    return found


def get_window(conn: sqlite3.Connection, run_id: str, epoch: int) -> Window | None:
    """The run's window of ``epoch``, or None before it was made."""
    row = conn.execute(
        "SELECT window, first_sample, rows, slices, retired_ms FROM hidden_windows"
        " WHERE run_id = ? AND epoch = ?",
        (run_id, epoch),
    ).fetchone()
    if row is None:
        return None
    window, first, rows, slices, retired = row
    files = tuple(structure(InputFile, f) for f in json.loads(slices))
    return Window(
        window=window,
        run_id=run_id,
        epoch=epoch,
        first_sample=first,
        rows=rows,
        slices=files,
        retired_ms=retired,
    )


def slice_subject(step_subject: Mapping[str, Any], window: str, k: int, n: int) -> dict[str, Any]:
    """The subject of slice ``k`` of ``n`` of a hidden step on ``window``."""
    return {**step_subject, "slice": k, "slices": n, "window": window}


def enqueue_slices(
    conn: sqlite3.Connection,
    *,
    subject: Mapping[str, Any],
    window: Window,
    inputs: Sequence[Mapping[str, Any]],
    now_ms: int,
    wait_ms: int,
    settings: ComputeSettings = DEFAULT_SETTINGS,
) -> list[Event]:
    """Enqueue the slice jobs of the hidden step ``subject`` on ``window`` (module doc);
    ``inputs`` are the step's ``delta-loss`` inputs, whose ``trace.u16`` each slice replaces."""
    if window.retired_ms is not None:
        raise Conflict(f"hidden window {window.window} was rotated out; score on the current one")
    step_text = canonical_subject(subject)
    events: list[Event] = []
    n = len(window.slices)
    for k, trace in enumerate(window.slices):
        files = [dict(item) for item in inputs]
        names = [f.get("name") for f in files]
        if trace.name not in names:
            raise Malformed(f"inputs: a hidden step reads {trace.name}")
        files[names.index(trace.name)] = unstructure(trace)
        job_id, more = enqueue_step(
            conn,
            challenge_id=DELTA_LOSS.id,
            subject=slice_subject(subject, window.window, k, n),
            step="hidden",
            inputs=files,
            now_ms=now_ms,
            wait_ms=wait_ms,
            settings=settings,
        )
        conn.execute(
            "INSERT INTO hidden_slice_jobs (job_id, step_subject, window, slice, slices, step_id)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (job_id, step_text, window.window, k, n, step_id_of(step_text, window.window)),
        )
        events += more
    return events


def slice_of(conn: sqlite3.Connection, job_id: str) -> SliceJob | None:
    """The slice record of ``job_id``, or None for a job that is not a slice."""
    row = conn.execute(
        "SELECT job_id, step_subject, window, slice, slices FROM hidden_slice_jobs"
        " WHERE job_id = ?",
        (job_id,),
    ).fetchone()
    return None if row is None else SliceJob(*row)


def bind_holder(conn: sqlite3.Connection, sliced: SliceJob, node_id: str, now_ms: int) -> None:
    """Bind ``node_id`` to slice ``sliced`` of its window (a no-op for a node bound to that
    slice already); the lease transaction calls it with each grant of a slice job."""
    conn.execute(
        "INSERT INTO hidden_slice_holders (window, node_id, slice, bound_ms) VALUES (?, ?, ?, ?)"
        " ON CONFLICT DO NOTHING",
        (sliced.window, node_id, sliced.slice, now_ms),
    )


def unbind_holder(conn: sqlite3.Connection, job_id: str, node_id: str, copy_id: str) -> None:
    """Undo :func:`bind_holder` for a grant whose answer never reached ``node_id`` (copy
    ``copy_id`` of ``job_id`` went back): the node holds that window's slice no longer, unless
    it holds or held another copy of a slice job of the window."""
    conn.execute(
        "DELETE FROM hidden_slice_holders WHERE node_id = ?"
        " AND window = (SELECT window FROM hidden_slice_jobs WHERE job_id = ?)"
        " AND NOT EXISTS (SELECT 1 FROM hidden_slice_jobs s JOIN compute_copies c USING (job_id)"
        "                 WHERE s.window = hidden_slice_holders.window AND c.node_id = ?"
        "                 AND c.copy_id != ?)",
        (node_id, job_id, node_id, copy_id),
    )


def check_input(conn: sqlite3.Connection, node_id: str, job_id: str) -> None:
    """``Forbidden`` when ``job_id`` is a slice of a window ``node_id`` holds another slice of."""
    row = conn.execute(
        "SELECT s.slice, h.slice FROM hidden_slice_jobs s JOIN hidden_slice_holders h"
        " ON h.window = s.window AND h.node_id = ? WHERE s.job_id = ?",
        (node_id, job_id),
    ).fetchone()
    if row is not None and row[0] != row[1]:
        raise Forbidden(
            f"this node holds slice {row[1]} of this hidden window; no node gets two slices of"
            f" one window (this is slice {row[0]})"
        )


def check_slice_answer(
    conn: sqlite3.Connection, job: Job, answer: Answer, window: str | None
) -> None:
    """The refusals of a slice's answer (module doc): 409 stale window, 400 no losses."""
    found = slice_of(conn, job.job_id)
    if found is None:
        if window is not None:
            raise Malformed("window: only a slice of a hidden step names a window")
        return
    if window is not None and window != found.window:
        raise Conflict(
            f"stale hidden window: this copy is scored on window {found.window}, the answer on"
            f" {window}; fetch the copy's own trace"
        )
    if answer.ok and answer.losses is None:
        raise Malformed("result.losses: a slice of a hidden step needs its per-sequence losses")


def retire_windows(
    conn: sqlite3.Connection, run_id: str, epoch: int, now_ms: int
) -> tuple[list[str], list[Event]]:
    """Retire the run's windows before ``epoch`` (module doc): ``(the canonical subjects of
    the hidden steps whose slices were cut off, events)``."""
    old = [
        str(w)
        for (w,) in conn.execute(
            "SELECT window FROM hidden_windows WHERE run_id = ? AND epoch < ?"
            " AND retired_ms IS NULL",
            (run_id, epoch),
        )
    ]
    cut: dict[str, None] = {}
    events: list[Event] = []
    for window in old:
        conn.execute("UPDATE hidden_windows SET retired_ms = ? WHERE window = ?", (now_ms, window))
        rows = conn.execute(
            f"SELECT s.step_subject, {JOB_COLUMNS_J}"
            " FROM hidden_slice_jobs s JOIN compute_jobs j USING (job_id)"
            " WHERE s.window = ? AND j.state = 'queued' ORDER BY j.job_id",
            (window,),
        ).fetchall()
        for row in rows:
            cut[str(row[0])] = None
            events += end_unscored(conn, job_from_row(row[1:]), ROTATED, now_ms)
    return list(cut), events
