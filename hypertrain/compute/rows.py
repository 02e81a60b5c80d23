"""Reading jobs and copies of the compute book (``compute_jobs``, ``compute_copies``).

Plain read helpers of a ``sqlite3.Connection`` shared by the book's transitions:
:func:`get_job` / :func:`get_copy` (``NotFound`` when absent), :func:`job_copies` (every copy of
a job by ``seq``) and :func:`counted` (the answered copies in the order they were counted).
:class:`Copy` is a decoded copy row; its ``answer`` is the canonical :class:`Answer` and its
``response`` the :data:`~hypertrain.compute.wire.ResultAnswer` it was first answered with. A
job's inputs are :class:`~hypertrain.compute.wire.InputFile` records (stored as their JSON,
which never changes for a job: the decoded tuple is cached by that text, since the lease and
result transactions read a job several times).
"""

from __future__ import annotations

import functools
import json
import sqlite3
from typing import Any, Final, Literal

import attrs

from hypertrain.compute.answers import Answer
from hypertrain.compute.model import Job
from hypertrain.compute.wire import InputFile, ResultAnswer, Verdict, read_result_answer
from hypertrain.protocol.converter import structure
from hypertrain.protocol.errors import NotFound

__all__ = [
    "JOB_COLUMNS",
    "JOB_COLUMNS_J",
    "Copy",
    "CopyState",
    "counted",
    "get_copy",
    "get_job",
    "job_copies",
]

CopyState = Literal["queued", "leased", "answered", "released", "expired", "cancelled", "late"]

JOB_COLUMNS: Final = (
    "job_id, challenge, version, subject, step, inputs, created_ms, wait_ms, wait_deadline_ms,"
    " state, settled_how, reason, result, settled_ms, expiries"
)
JOB_COLUMNS_J: Final = ", ".join(f"j.{c.strip()}" for c in JOB_COLUMNS.split(","))
""":data:`JOB_COLUMNS` of a job table aliased ``j`` (in a join)."""
_COPY_COLUMNS: Final = (
    "copy_id, job_id, seq, state, node_id, token_hash, deadline_ms, answer, answer_key,"
    " answer_order, response, verdict"
)


@attrs.frozen(kw_only=True)
class Copy:
    """One ``compute_copies`` row, decoded."""

    copy_id: str
    job_id: str
    seq: int
    state: CopyState
    node_id: str | None
    token_hash: str | None
    deadline_ms: int | None
    answer: Answer | None
    answer_key: str | None
    answer_order: int | None
    response: ResultAnswer | None
    verdict: Verdict | None


@functools.lru_cache(maxsize=4096)
def _input_files(text: str) -> tuple[InputFile, ...]:
    return tuple(structure(InputFile, item) for item in json.loads(text))


def job_from_row(row: tuple[Any, ...]) -> Job:
    """Decode a row selected with :data:`JOB_COLUMNS`."""
    (job_id, challenge, version, subject, step, inputs, created, wait, deadline) = row[:9]
    (state, how, reason, result, settled, expiries) = row[9:]
    return Job(
        job_id=job_id,
        challenge=challenge,
        version=version,
        subject=json.loads(subject),
        step=step,
        inputs=_input_files(inputs),
        created_ms=created,
        wait_ms=wait,
        wait_deadline_ms=deadline,
        state=state,
        settled_how=how,
        reason=reason,
        result=None if result is None else json.loads(result),
        settled_ms=settled,
        expiries=expiries,
    )


def _copy(row: tuple[Any, ...]) -> Copy:
    (copy_id, job_id, seq, state, node_id, token_hash, deadline, answer, key, order) = row[:10]
    (response, verdict) = row[10:]
    return Copy(
        copy_id=copy_id,
        job_id=job_id,
        seq=seq,
        state=state,
        node_id=node_id,
        token_hash=token_hash,
        deadline_ms=deadline,
        answer=None if answer is None else Answer.from_json(json.loads(answer)),
        answer_key=key,
        answer_order=order,
        response=None if response is None else read_result_answer(json.loads(response)),
        verdict=verdict,
    )


def get_job(conn: sqlite3.Connection, job_id: str) -> Job:
    """The job ``job_id``; ``NotFound`` when there is none."""
    row = conn.execute(
        f"SELECT {JOB_COLUMNS} FROM compute_jobs WHERE job_id = ?", (job_id,)
    ).fetchone()
    if row is None:
        raise NotFound(f"no compute job {job_id}")
    return job_from_row(row)


def get_copy(conn: sqlite3.Connection, copy_id: str) -> Copy:
    """The copy ``copy_id``; ``NotFound`` when there is none."""
    row = conn.execute(
        f"SELECT {_COPY_COLUMNS} FROM compute_copies WHERE copy_id = ?", (copy_id,)
    ).fetchone()
    if row is None:
        raise NotFound(f"no compute job copy {copy_id}")
    return _copy(row)


def job_copies(conn: sqlite3.Connection, job_id: str) -> list[Copy]:
    """Every copy of ``job_id``, by ``seq``."""
    rows = conn.execute(
        f"SELECT {_COPY_COLUMNS} FROM compute_copies WHERE job_id = ? ORDER BY seq", (job_id,)
    ).fetchall()
    return [_copy(r) for r in rows]


def counted(conn: sqlite3.Connection, job_id: str) -> list[Copy]:
    """The answered copies of ``job_id`` in the order their answers were counted."""
    rows = conn.execute(
        f"SELECT {_COPY_COLUMNS} FROM compute_copies WHERE job_id = ? AND +state = 'answered'"
        " ORDER BY answer_order",  # +state: the job's copies, not every answered copy
        (job_id,),
    ).fetchall()
    return [_copy(r) for r in rows]
