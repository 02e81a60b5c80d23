"""The compute leaderboard's views (``GET /v1/compute/leaderboard``, one node's standing).

- :func:`leaderboard_view`: one page of the nodes by compute credits
  (:mod:`hypertrain.compute.leaderboard` says the rows and the order),
  ``{"nodes": [row, ...], "page": {offset, limit, next_offset}}`` with the paged views' envelope
  (:class:`~hypertrain.coordinator.flows.pages.Page`; ``full`` changes nothing here);
- :func:`standing_view`: one node's row, by id (404 unknown).

Read-only, and a function of the query and the database alone: both answer through the answer
cache (:mod:`hypertrain.coordinator.web.answers`).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from attrs import frozen

from hypertrain.compute.leaderboard import leaderboard_rows, standing_of
from hypertrain.compute.wire import Standing
from hypertrain.coordinator.flows.pages import Page, PageAt
from hypertrain.protocol.converter import unstructure

__all__ = ["LeaderboardPage", "leaderboard_view", "standing_view"]


@frozen
class LeaderboardPage:
    """``GET /v1/compute/leaderboard``: a page of the nodes by compute credits."""

    nodes: tuple[Standing, ...]
    page: PageAt


def leaderboard_view(conn: sqlite3.Connection, page: Page) -> dict[str, Any]:
    """One page of the leaderboard (module doc), :class:`LeaderboardPage` written by the
    converter."""
    rows = leaderboard_rows(conn, offset=page.offset, count=page.fetch)
    shown, where = page.cut(rows)
    answer: dict[str, Any] = unstructure(LeaderboardPage(tuple(shown), PageAt(**where)))
    return answer


def standing_view(conn: sqlite3.Connection, node_id: str) -> dict[str, Any]:
    """Node ``node_id``'s row (module doc)."""
    answer: dict[str, Any] = unstructure(standing_of(conn, node_id))
    return answer
