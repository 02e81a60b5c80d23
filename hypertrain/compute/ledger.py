"""Verdicts, credit and strikes of the compute book (``compute_credits``, ``compute_strikes``).

Promises:

- :func:`pay` credits a copy's node exactly once, keyed by copy id: one ``compute_credits`` row,
  and ``credits``, ``compute_credits`` and ``jobs_done`` of the node move together in the same
  transaction; a replay pays nothing more and publishes nothing. A node on probation
  (:mod:`.sybils`) is paid 0 for the copy (its row says 0) and owes one agreed answer less.
- :func:`strike` records one strike per copy on the UTC day of ``now_ms``, with the network
  the copy was leased from; when the node then has ``strikes_per_day`` strikes on that day it
  is disabled until the next UTC midnight, and that strike records the re-enable instant.
- :func:`set_verdict` applies a :data:`Verdict` (``none`` pays and strikes nobody).
- :func:`claw_back` takes back what :func:`pay` gave a copy, exactly once (one
  ``compute_clawbacks`` row keyed by copy id): ``credits``, ``compute_credits`` and
  ``jobs_done`` move back together. It never makes a balance negative: it takes
  ``min(paid, credits, compute_credits)`` and records both figures (a shortfall, which nothing
  in the book can cause since nothing else spends compute credit, stays visible in the row
  instead of a negative balance). A copy paid on probation (0 credit) owes its answer again:
  the node's ``probation`` goes back up by one, so answers later shown wrong never end a
  probation. A copy never paid, or already clawed back, gives nothing.
- :func:`pardon` undoes :func:`strike` for a copy a trusted re-score showed right (the honest
  node of a split two colluders won): its strike row goes, a disable that day's strikes no
  longer reach is lifted, and the copy is paid as :func:`pay` pays (event ``accepted``).
Events name the node: they are published only once the copy's job is settled.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from hypertrain.compute.model import ComputeSettings, Event, iso_ms
from hypertrain.compute.rows import Copy
from hypertrain.compute.rules import Verdict, next_day_start_ms, utc_day

__all__ = ["claw_back", "pardon", "pay", "set_verdict", "strike"]


def _mark(conn: sqlite3.Connection, copy_id: str, verdict: Verdict) -> None:
    conn.execute("UPDATE compute_copies SET verdict = ? WHERE copy_id = ?", (verdict, copy_id))


def pay(
    conn: sqlite3.Connection, copy: Copy, now_ms: int, settings: ComputeSettings
) -> list[Event]:
    """Pay ``copy``'s node ``settings.credit``, 0 on probation (once per copy)."""
    assert copy.node_id is not None
    _mark(conn, copy.copy_id, "paid")
    (owed,) = conn.execute(
        "SELECT probation FROM compute_nodes WHERE node_id = ?", (copy.node_id,)
    ).fetchone()
    credit = 0 if owed > 0 else settings.credit
    inserted = conn.execute(
        "INSERT OR IGNORE INTO compute_credits"
        " (copy_id, node_id, job_id, amount, paid_ms, probation) VALUES (?, ?, ?, ?, ?, ?)",
        (copy.copy_id, copy.node_id, copy.job_id, credit, now_ms, int(owed > 0)),
    ).rowcount
    if not inserted:
        return []
    conn.execute(
        "UPDATE compute_nodes SET credits = credits + ?, compute_credits = compute_credits + ?,"
        " jobs_done = jobs_done + 1, probation = max(probation - 1, 0) WHERE node_id = ?",
        (credit, credit, copy.node_id),
    )
    payload = {
        "job": copy.job_id,
        "copy": copy.copy_id,
        "node": copy.node_id,
        "credit": credit,
    }
    if owed > 0:  # on probation: agreed answers it still owes after this one
        payload["probation"] = owed - 1
    return [("accepted", payload)]


def strike(
    conn: sqlite3.Connection, copy: Copy, now_ms: int, settings: ComputeSettings
) -> list[Event]:
    """Strike ``copy``'s node (once per copy); disable it at the day's last allowed strike."""
    assert copy.node_id is not None
    _mark(conn, copy.copy_id, "struck")
    day = utc_day(now_ms)
    inserted = conn.execute(
        "INSERT OR IGNORE INTO compute_strikes (copy_id, node_id, day, struck_ms, network)"
        " SELECT ?, ?, ?, ?, network FROM compute_copies WHERE copy_id = ?",
        (copy.copy_id, copy.node_id, day, now_ms, copy.copy_id),
    ).rowcount
    if not inserted:
        return []
    (today,) = conn.execute(
        "SELECT count(*) FROM compute_strikes WHERE node_id = ? AND day = ?",
        (copy.node_id, day),
    ).fetchone()
    disabled_until: int | None = None
    if today >= settings.strikes_per_day:
        disabled_until = next_day_start_ms(now_ms)
        conn.execute(
            "UPDATE compute_nodes SET disabled_until_ms = max(disabled_until_ms, ?)"
            " WHERE node_id = ?",
            (disabled_until, copy.node_id),
        )
        conn.execute(
            "UPDATE compute_strikes SET disabled_until_ms = ? WHERE copy_id = ?",
            (disabled_until, copy.copy_id),
        )
    payload = {
        "job": copy.job_id,
        "copy": copy.copy_id,
        "node": copy.node_id,
        "day": day,
        "strikes_today": today,
        "disabled_until": None if disabled_until is None else iso_ms(disabled_until),
        "disabled_until_ms": disabled_until,
    }
    return [("strike", payload)]


def pardon(
    conn: sqlite3.Connection, copy: Copy, now_ms: int, settings: ComputeSettings
) -> list[Event]:
    """Lift ``copy``'s strike, which a trusted re-score showed wrong, and pay the copy (module
    doc); nothing for a copy not struck."""
    assert copy.node_id is not None
    row = conn.execute(
        "SELECT day FROM compute_strikes WHERE copy_id = ?", (copy.copy_id,)
    ).fetchone()
    if row is None:
        return []
    (day,) = row
    conn.execute("DELETE FROM compute_strikes WHERE copy_id = ?", (copy.copy_id,))
    (left,) = conn.execute(
        "SELECT count(*) FROM compute_strikes WHERE node_id = ? AND day = ?",
        (copy.node_id, day),
    ).fetchone()
    if left < settings.strikes_per_day:  # that day's strikes no longer disable it
        conn.execute(
            "UPDATE compute_strikes SET disabled_until_ms = NULL WHERE node_id = ? AND day = ?",
            (copy.node_id, day),
        )
    conn.execute(
        "UPDATE compute_nodes SET disabled_until_ms = coalesce((SELECT max(disabled_until_ms)"
        " FROM compute_strikes WHERE node_id = ?), 0) WHERE node_id = ?",
        (copy.node_id, copy.node_id),
    )
    return pay(conn, copy, now_ms, settings)


def set_verdict(
    conn: sqlite3.Connection,
    copy: Copy,
    verdict: Verdict,
    now_ms: int,
    settings: ComputeSettings,
) -> list[Event]:
    """Apply ``verdict`` to ``copy``: pay, strike, or record ``none``."""
    if verdict == "paid":
        return pay(conn, copy, now_ms, settings)
    if verdict == "struck":
        return strike(conn, copy, now_ms, settings)
    _mark(conn, copy.copy_id, "none")
    return []


def claw_back(conn: sqlite3.Connection, copy: Copy, now_ms: int) -> dict[str, Any] | None:
    """Take back ``copy``'s payout (module doc): ``{node, copy, paid, clawed}``, or None when
    there is nothing (left) to take."""
    paid = conn.execute(
        "SELECT amount, probation FROM compute_credits WHERE copy_id = ?", (copy.copy_id,)
    ).fetchone()
    if paid is None:
        return None
    amount, on_probation = paid
    credits, compute = conn.execute(
        "SELECT credits, compute_credits FROM compute_nodes WHERE node_id = ?", (copy.node_id,)
    ).fetchone()
    clawed = max(0, min(amount, credits, compute))
    inserted = conn.execute(
        "INSERT OR IGNORE INTO compute_clawbacks (copy_id, node_id, job_id, paid, clawed,"
        " clawed_ms) VALUES (?, ?, ?, ?, ?, ?)",
        (copy.copy_id, copy.node_id, copy.job_id, amount, clawed, now_ms),
    ).rowcount
    if not inserted:
        return None
    conn.execute(
        "UPDATE compute_nodes SET credits = credits - ?, compute_credits = compute_credits - ?,"
        " jobs_done = max(jobs_done - 1, 0), probation = probation + ? WHERE node_id = ?",
        (clawed, clawed, on_probation, copy.node_id),
    )
    return {"node": copy.node_id, "copy": copy.copy_id, "paid": amount, "clawed": clawed}
