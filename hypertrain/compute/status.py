"""The public status view of the compute network (``GET /v1/compute/status``).

:func:`status` returns, at ``now_ms``::

    {"nodes": [{"id", "handle", "capabilities", "hardware", "jobs_done", "credits",
                "compute_credits", "last_seen"}, ...],   # seen in the last online_ms, by id
     "challenges": {"<id>": {"capable_nodes": n}},       # every registry challenge
     "queued": n, "leased": n, "done_24h": n, "credit_per_job": c, "fallback_ms": ms}

``capable_nodes`` counts online nodes that are not disabled whose capabilities hold the
challenge's capability (and, for a timing challenge, whose hardware is its class). ``queued``
and ``leased`` count copies of jobs still open; ``done_24h`` counts jobs settled (by nodes or by
the fallback) in the 24 hours before ``now_ms``. The view never holds a key, a lease token, or
which node holds which copy.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Final

from hypertrain.compute.leases import eligible_challenges
from hypertrain.compute.model import DEFAULT_SETTINGS, ComputeSettings
from hypertrain.compute.nodes import online_nodes
from hypertrain.compute.rules import DAY_MS
from hypertrain.scoring.registry import REGISTRY

__all__ = ["status"]

_OPEN: Final = "SELECT job_id FROM compute_jobs WHERE state IN ('queued', 'fallback')"


def status(
    conn: sqlite3.Connection, now_ms: int, *, settings: ComputeSettings = DEFAULT_SETTINGS
) -> dict[str, Any]:
    """The public status JSON (module doc)."""
    online = online_nodes(conn, now_ms - settings.online_ms)
    capable = [
        eligible_challenges(n.capabilities, n.hardware) for n in online if not n.disabled(now_ms)
    ]
    challenges = {
        c.id: {"capable_nodes": sum(1 for can in capable if c in can)} for c in REGISTRY.values()
    }
    counts = dict(
        conn.execute(
            f"SELECT state, count(*) FROM compute_copies WHERE job_id IN ({_OPEN})"
            " AND state IN ('queued', 'leased') GROUP BY state"
        ).fetchall()
    )
    (done,) = conn.execute(
        "SELECT count(*) FROM compute_jobs WHERE state = 'settled' AND settled_ms > ?",
        (now_ms - DAY_MS,),
    ).fetchone()
    return {
        "nodes": [n.status_json() for n in online],
        "challenges": challenges,
        "queued": counts.get("queued", 0),
        "leased": counts.get("leased", 0),
        "done_24h": done,
        "credit_per_job": settings.credit,
        "fallback_ms": settings.wait_ms,
    }
