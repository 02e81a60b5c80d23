"""The public read views of runs (spec section 9), each from one read transaction.

- :func:`runs_list`: ``GET /v1/runs``;
- :func:`run_view`: ``GET /v1/runs/{id}``, one page of its rounds (newest first) with their
  states derived at D, and the roster's counts;
- :func:`roster_view`: ``GET /v1/runs/{id}/roster``, one page of the run's roster (by hotkey).

Pages (:mod:`~hypertrain.coordinator.flows.pages`): each read is bounded by the page, so a view
costs the same at round 10 and round 10,000, with 8 miners or 1,024. The run view carries no
roster rows, only ``roster_counts`` (``total``: every row, removed and blacklisted too;
``active``: neither, the miners the next RoundOpen rosters; ``removed``; ``blacklisted``); a
client that needs the rows pages ``/roster`` (:func:`hypertrain.protocol.pages.read_all_pages`
with :data:`~hypertrain.protocol.pages.ROSTER_LISTS`). The round view is
:mod:`~hypertrain.coordinator.flows.roundview`.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from attrs import frozen

from hypertrain.beacon.ingest import latest_round
from hypertrain.coordinator.flows.pages import Page
from hypertrain.coordinator.tables.rounds import round_page, round_states
from hypertrain.coordinator.tables.runs import (
    get_run,
    list_runs,
    roster_counts,
    roster_page,
)
from hypertrain.protocol.converter import unstructure

__all__ = ["RunListed", "RunsList", "roster_view", "run_view", "runs_list"]


@frozen
class RunListed:
    """One run of ``GET /v1/runs``."""

    run_id: str
    status: str


@frozen
class RunsList:
    """``GET /v1/runs``: every run and its status."""

    runs: tuple[RunListed, ...]


def runs_list(conn: sqlite3.Connection) -> RunsList:
    """Every run and its status."""
    return RunsList(tuple(RunListed(r, s) for r, s in list_runs(conn)))


def run_view(conn: sqlite3.Connection, run_id: str, page: Page | None = None) -> dict[str, Any]:
    """The run with its config, manifest envelope, D, a page of its rounds (newest first) with
    their states, where the page stands (``page``) and the roster's counts (404 unknown)."""
    page = page or Page()
    run = get_run(conn, run_id)
    d = latest_round(conn)
    rows, paging = page.cut(round_page(conn, run_id, page.offset, page.fetch))
    states = round_states(conn, d, rows)
    return {
        "run_id": run.run_id,
        "status": run.status,
        "config": None if run.config is None else unstructure(run.config),
        "manifest_envelope": json.loads(run.manifest_envelope),
        "now_round": d,
        "rounds": [
            {"w": row.w, "state": state.value} for row, state in zip(rows, states, strict=True)
        ],
        "page": paging,
        "roster_counts": unstructure(roster_counts(conn, run_id)),
    }


def roster_view(conn: sqlite3.Connection, run_id: str, page: Page | None = None) -> dict[str, Any]:
    """``{run_id, roster, page}``: a page of the run's roster rows (removed and blacklisted
    too), by hotkey, each the admin roster routes' answer (404 for an unknown run)."""
    page = page or Page()
    get_run(conn, run_id)
    rows, paging = page.cut(roster_page(conn, run_id, page.offset, page.fetch))
    return {"run_id": run_id, "roster": [unstructure(row) for row in rows], "page": paging}
