"""The compute leaderboard: nodes ranked by compute credits (``GET /v1/compute/leaderboard``).

A node's row (:class:`~hypertrain.compute.wire.Standing`, through the one converter)::

    {"rank", "id", "handle", "compute_credits", "jobs_done", "strikes", "agreement_ppm",
     "last_seen"}

- the order: compute credits, most first, then node id (ties never move between pages);
  ``rank`` is the 1-based place in that order;
- ``jobs_done``: the node's paid copies (answers that agreed with the settled result);
  ``strikes``: its struck copies, all time (a strike day's count disables it; this is the sum);
- ``agreement_ppm``: of its answers that got a verdict, the share that agreed, in parts per
  million, floored: ``10^6 * jobs_done // (jobs_done + strikes)``; null before any verdict
  (an integer: no float goes on the wire);
- ``last_seen``: the wall ms of its last register, lease or result.

Bounded (migration 0019): :func:`leaderboard_rows` walks the ``compute_nodes_by_credits`` index
under ``LIMIT``/``OFFSET`` (the offset's entries are stepped over, no sort of every node) and
counts each listed node's strikes through its own strike index; :func:`standing_of` counts the
entries before the node in the same index. Handles are data: whatever a row holds is returned
as it is (the page writes them as text, never as markup).
"""

from __future__ import annotations

import sqlite3
from typing import Any, Final

from hypertrain.compute.wire import Standing
from hypertrain.protocol.errors import NotFound

__all__ = ["PPM", "agreement_ppm", "leaderboard_rows", "standing_of"]

PPM: Final = 1_000_000

_ROW: Final = (
    "SELECT n.node_id, n.handle, n.compute_credits, n.jobs_done, n.last_seen_ms,"
    " (SELECT count(*) FROM compute_strikes s WHERE s.node_id = n.node_id)"
    " FROM compute_nodes n"
)


def agreement_ppm(jobs_done: int, strikes: int) -> int | None:
    """Of ``jobs_done + strikes`` judged answers, the share that agreed, in ppm (module doc)."""
    judged = jobs_done + strikes
    return None if judged == 0 else PPM * jobs_done // judged


def _standing(rank: int, row: tuple[Any, ...]) -> Standing:
    node_id, handle, credits, jobs, seen, strikes = row
    return Standing(
        rank=rank,
        id=str(node_id),
        handle=str(handle),
        compute_credits=int(credits),
        jobs_done=int(jobs),
        strikes=int(strikes),
        agreement_ppm=agreement_ppm(int(jobs), int(strikes)),
        last_seen=int(seen),
    )


def leaderboard_rows(conn: sqlite3.Connection, *, offset: int, count: int) -> list[Standing]:
    """Up to ``count`` standings from rank ``offset + 1`` on (module doc)."""
    rows = conn.execute(
        f"{_ROW} INDEXED BY compute_nodes_by_credits"
        " ORDER BY n.compute_credits DESC, n.node_id LIMIT ? OFFSET ?",
        (count, offset),
    ).fetchall()
    return [_standing(offset + i + 1, row) for i, row in enumerate(rows)]


def standing_of(conn: sqlite3.Connection, node_id: str) -> Standing:
    """The standing of node ``node_id`` (``NotFound`` when no such node)."""
    row = conn.execute(f"{_ROW} WHERE n.node_id = ?", (node_id,)).fetchone()
    if row is None:
        raise NotFound(f"no compute node {node_id!r:.80}")
    credits = int(row[2])
    (ahead,) = conn.execute(
        "SELECT count(*) FROM compute_nodes INDEXED BY compute_nodes_by_credits"
        " WHERE compute_credits > ?",
        (credits,),
    ).fetchone()
    (tied,) = conn.execute(
        "SELECT count(*) FROM compute_nodes INDEXED BY compute_nodes_by_credits"
        " WHERE compute_credits = ? AND node_id < ?",
        (credits, node_id),
    ).fetchone()
    return _standing(int(ahead) + int(tied) + 1, row)
