"""What the run dashboard shows (``GET /runs/{id}``), read in one transaction from the same
table and flow functions the JSON views use (no SQL of its own).

:func:`run_board` reads a :class:`RunBoard`:

- one page of the run's rounds, newest first (:func:`~hypertrain.coordinator.tables.rounds.
  round_page`, bounded like the run view: a run of 10,000 rounds reads one page), each a
  :class:`RoundLine`: its state at D, miners rostered and uploaded, the merge's update norm and
  preclipped count, the held-out loss of its start weights theta(w) and of the merge result
  theta(w + 1), how its scoring steps were settled (two agreeing nodes, a third copy, the
  fallback) and its audits (selected, replayed, caught);
- the newest round's view (:func:`~hypertrain.coordinator.flows.roundview.round_view`, the JSON
  round view's own function, without the assignment) for one page of its miners: status,
  scores, soft score, audit selection and verdict;
- the roster's counts, the audit and honeypot rates per chain epoch (the newest
  :data:`EPOCHS_SHOWN`, :func:`~hypertrain.coordinator.flows.auditstats.auditor_stats`) and
  the run's disputes (counts by state and the newest :data:`DISPUTES_SHOWN`).

The ledger's balances live in the ledger, not in this database: the route adds them.
Pure: sqlite3 only.
"""

from __future__ import annotations

import collections
import sqlite3
from typing import Any, Final

from attrs import frozen

from hypertrain.beacon.chain import ChainInfo
from hypertrain.beacon.ingest import latest_round
from hypertrain.coordinator.flows.aggregation import get_aggregation
from hypertrain.coordinator.flows.auditstats import EpochClock, EpochStats, auditor_stats
from hypertrain.coordinator.flows.heldout import get_loss
from hypertrain.coordinator.flows.pages import Page
from hypertrain.coordinator.flows.roundview import round_facts, round_view
from hypertrain.coordinator.flows.softscores import round_jobs
from hypertrain.coordinator.tables.audits import draw_of, jobs_of_round
from hypertrain.coordinator.tables.disputes import DisputeRow, disputes_of_run
from hypertrain.coordinator.tables.miners import uploaded_hotkeys
from hypertrain.coordinator.tables.rounds import RoundKey, miner_rows, round_page, round_states
from hypertrain.coordinator.tables.runs import RosterCounts, get_run, roster_counts
from hypertrain.rounds.states import FAULT_STATUSES, RoundState

__all__ = [
    "DISPUTES_SHOWN",
    "EPOCHS_SHOWN",
    "MINERS_SHOWN",
    "SETTLED_HOW",
    "RoundLine",
    "RunBoard",
    "run_board",
]

MINERS_SHOWN: Final = 64
"""Miners of the newest round shown (by hotkey); the round's JSON view pages the rest."""
EPOCHS_SHOWN: Final = 8
"""Chain epochs of audit and honeypot rates shown, the newest."""
DISPUTES_SHOWN: Final = 10
"""Disputes listed, the newest."""
SETTLED_HOW: Final = ("agreement", "third-copy", "fallback")
"""How a scoring step is settled, in the order the dashboard shows them."""


@frozen
class RoundLine:
    """One round of the dashboard's rounds table (module doc)."""

    w: int
    state: str
    rostered: int
    uploaded: int
    update_norm: float | None
    clipped: int | None
    heldout_loss: float | None
    """Held-out loss of theta(w), the round's start weights."""
    heldout_loss_after: float | None
    """Held-out loss of theta(w + 1), the merge result."""
    steps: int
    """Scoring steps of the round's uploads (public and hidden trace each)."""
    settled: dict[str, int]
    """Steps settled, by how (:data:`SETTLED_HOW`)."""
    selected: int | None
    """Miners the audit draw selected (None before the draw)."""
    replayed: int
    caught: int


@frozen
class RunBoard:
    """Everything :func:`run_board` read (module doc)."""

    run_id: str
    status: str
    now_round: int
    rounds: list[RoundLine]
    paging: dict[str, Any]
    roster: RosterCounts
    newest: dict[str, Any] | None
    """The newest round's view (JSON round view, a page of :data:`MINERS_SHOWN` miners)."""
    epochs: tuple[EpochStats, ...]
    """The newest chain epochs' audit and honeypot rates, oldest first."""
    disputes: dict[str, int]
    """The run's disputes by state."""
    recent_disputes: list[DisputeRow]

    def loss_points(self) -> list[tuple[int, float]]:
        """``(t, loss of theta(t))`` known for the rounds shown, by ``t``."""
        points: dict[int, float] = {}
        for line in self.rounds:
            if line.heldout_loss is not None:
                points[line.w] = line.heldout_loss
            if line.heldout_loss_after is not None:
                points[line.w + 1] = line.heldout_loss_after
        return sorted(points.items())


def _round_line(conn: sqlite3.Connection, key: RoundKey, state: RoundState) -> RoundLine:
    run_id, w = key.run_id, key.w
    agg = get_aggregation(conn, run_id, w)
    uploaded = uploaded_hotkeys(conn, run_id, w)
    steps = [job for jobs in round_jobs(conn, run_id, w, uploaded).values() for job in jobs]
    hows = collections.Counter(j.settled_how for j in steps if j.state == "settled")
    selected = draw_of(conn, run_id, w)
    results = [job.result for job in jobs_of_round(conn, run_id, w) if job.result is not None]
    return RoundLine(
        w=w,
        state=state.value,
        rostered=len(miner_rows(conn, run_id, w)),
        uploaded=len(uploaded),
        update_norm=None if agg is None else agg.update_norm,
        clipped=None if agg is None else agg.clipped,
        heldout_loss=get_loss(conn, run_id, w),
        heldout_loss_after=get_loss(conn, run_id, w + 1),
        steps=len(steps),
        settled={how: hows[how] for how in SETTLED_HOW},
        selected=None if selected is None else len(selected),
        replayed=len(results),
        caught=sum(1 for r in results if r in FAULT_STATUSES),
    )


def run_board(
    conn: sqlite3.Connection, run_id: str, page: Page, chain: ChainInfo, clock: EpochClock
) -> RunBoard:
    """The dashboard of ``run_id`` with ``page`` of its rounds (404 for an unknown run)."""
    run = get_run(conn, run_id)
    d = latest_round(conn)
    keys, paging = page.cut(round_page(conn, run_id, page.offset, page.fetch))
    states = round_states(conn, d, keys)
    newest = None
    if keys:
        facts = round_facts(conn, run_id, keys[0].w, Page(limit=MINERS_SHOWN))
        newest = round_view(facts, None)
    disputes = disputes_of_run(conn, run_id)
    epochs = auditor_stats(conn, run_id, chain, clock).epochs
    return RunBoard(
        run_id=run.run_id,
        status=run.status,
        now_round=d,
        rounds=[_round_line(conn, k, s) for k, s in zip(keys, states, strict=True)],
        paging=paging,
        roster=roster_counts(conn, run_id),
        newest=newest,
        epochs=epochs[-EPOCHS_SHOWN:],
        disputes=dict(collections.Counter(r.state for r in disputes)),
        recent_disputes=sorted(disputes, key=lambda r: r.opened_round)[-DISPUTES_SHOWN:][::-1],
    )
