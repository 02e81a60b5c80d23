"""``jobs_of_subjects``: the jobs of many subjects in one statement, each subject's list equal to
its own ``job_scores`` (the round view reads every uploaded miner's scoring jobs this way)."""

from __future__ import annotations

import sqlite3

import pytest

from hypertrain.compute import Job, job_scores, jobs_of_subjects
from hypertrain.compute import jobs as jobs_module
from tests.compute.support import Book


@pytest.mark.parametrize("per_query", [2, 500])
async def test_each_subject_gets_what_job_scores_gives_it(
    book: Book, per_query: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs_module, "_SUBJECTS_PER_QUERY", per_query)
    subjects = [{"run_id": "r", "w": 3, "hotkey": f"h{i}"} for i in range(5)]
    for subject in subjects[1:4]:
        for step in ("hidden", "public"):
            await book.enqueue(subject=subject, step=step)
    await book.enqueue(subject={"run_id": "r", "w": 4, "hotkey": "h1"})  # another round

    def both(conn: sqlite3.Connection) -> tuple[list[list[Job]], list[list[Job]]]:
        return jobs_of_subjects(conn, subjects), [job_scores(conn, s) for s in subjects]

    together, alone = await book.db.read(both)
    assert together == alone
    assert [len(jobs) for jobs in together] == [0, 2, 2, 2, 0]
