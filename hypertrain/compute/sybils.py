"""Sybil brakes of the compute book: minting per network, probation, strikes in view (issue 19
item 2; spec compute-network section 6 scenario 8).

Keys are free, so a node struck out could mint a fresh one and start clean, and one machine
could mint thousands. Promises (each reads inside the caller's transaction; ``network`` None,
as only book-level callers pass, is limited by nothing and puts nobody on probation):

- :func:`check_mint` raises :class:`~hypertrain.protocol.errors.TooManyRequests` (429) when
  ``mint_per_minute`` keys were already minted from ``network`` in the 60 s up to ``now_ms``
  (minted at ``now - 60 000 < t <= now``). Its ``retry_after_s`` is the whole seconds until the
  oldest of those leaves the window, so a mint then succeeds; its detail names the limit.
- :func:`probation_at_mint`: ``probation_answers`` when a node leasing from ``network`` was
  disabled by its strikes in the last day (its disabling strike was on a lease from that
  network and it stayed disabled until after ``now - 24 h``), else 0. A key on probation is
  paired only with established nodes (:mod:`.pairing`) and is paid nothing for its agreed
  answers until it has given ``probation_answers`` of them (:func:`.ledger.pay`).
- :func:`strikes_today`: the strikes of the UTC day of ``now_ms`` of each given node, and of
  each given network (the strikes of every lease from it), for the status view.

Every query is a search of one index by network or node (``compute_nodes_minted``,
``compute_strikes_disabling``, ``compute_strikes_by_network``, ``compute_strikes_by_day``),
bounded by the limit or by the rows of the nodes and networks asked about.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection

from hypertrain.compute.model import ComputeSettings
from hypertrain.compute.rules import DAY_MS, utc_day
from hypertrain.protocol.errors import TooManyRequests

__all__ = ["MINT_WINDOW_MS", "check_mint", "probation_at_mint", "strikes_today"]

MINT_WINDOW_MS = 60_000


def check_mint(
    conn: sqlite3.Connection, network: str | None, now_ms: int, settings: ComputeSettings
) -> None:
    """429 when ``network`` minted its limit in the last minute (module doc)."""
    if network is None:
        return
    limit = settings.mint_per_minute
    row = conn.execute(
        "SELECT created_ms FROM compute_nodes WHERE mint_network = ? AND created_ms > ?"
        " ORDER BY created_ms DESC LIMIT 1 OFFSET ?",
        (network, now_ms - MINT_WINDOW_MS, limit - 1),
    ).fetchone()
    if row is None:
        return
    wait_ms = int(row[0]) + MINT_WINDOW_MS - now_ms
    raise TooManyRequests(
        f"at most {limit} node keys are minted per minute from one network"
        f" (HYPERTRAIN_COMPUTE_MINT_PER_MINUTE); {network} minted {limit} in the last minute",
        retry_after_s=-(-wait_ms // 1000),
    )


def probation_at_mint(
    conn: sqlite3.Connection, network: str | None, now_ms: int, settings: ComputeSettings
) -> int:
    """The probation of a key minted from ``network`` now (module doc)."""
    if network is None:
        return 0
    row = conn.execute(
        "SELECT 1 FROM compute_strikes WHERE network = ? AND disabled_until_ms > ? LIMIT 1",
        (network, now_ms - DAY_MS),
    ).fetchone()
    return 0 if row is None else settings.probation_answers


def strikes_today(
    conn: sqlite3.Connection, nodes: Collection[str], networks: Collection[str], now_ms: int
) -> tuple[dict[str, int], dict[str, int]]:
    """``({node: strikes today}, {network: strikes today})`` of those asked (module doc)."""
    day = utc_day(now_ms)
    return _counted(conn, "node_id", nodes, day), _counted(conn, "network", networks, day)


def _counted(
    conn: sqlite3.Connection, column: str, values: Collection[str], day: str
) -> dict[str, int]:
    """Strikes on ``day`` per value of ``column`` (one indexed count each)."""
    query = f"SELECT count(*) FROM compute_strikes WHERE {column} = ? AND day = ?"
    return {v: int(conn.execute(query, (v, day)).fetchone()[0]) for v in values}
