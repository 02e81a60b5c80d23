"""The public status view of the compute network (``GET /v1/compute/status``).

:func:`status` returns, at ``now_ms``::

    {"nodes": [{"id", "handle", "capabilities", "hardware", "jobs_done", "credits",
                "compute_credits", "last_seen", "established", "probation",
                "strikes_today", "network_strikes_today"}, ...],  # a page of online nodes
     "online_nodes": n, "next": "<id>" | null,           # all online nodes; the next cursor
     "challenges": {"<id>": {"capable_nodes": n}},       # every registry challenge
     "queued": n, "leased": n, "done_24h": n, "credit_per_job": c, "fallback_ms": ms}

Only nodes seen in the last ``online_ms`` are listed, at most ``limit`` of them
(:data:`PAGE_DEFAULT`, at most :data:`PAGE_MAX`), those whose id sorts after ``after``: ``next``
is the ``after`` of the following page, null on the last one. Registering is keyless, so the
online nodes are not bounded; a page is (about 200 bytes a node).

``established`` says whether the node may be paired with a young key or one on probation,
``probation`` how many agreed answers it still owes before it earns (0: none;
:mod:`.sybils`), ``strikes_today`` its strikes of the current UTC day and
``network_strikes_today`` those of every lease from its network that day (the network itself
is never shown).

``capable_nodes`` counts online nodes that are not disabled whose capabilities hold the
challenge's capability (and, for a timing challenge, whose hardware is its class). ``queued``
and ``leased`` count copies of jobs still open; ``done_24h`` counts jobs settled (by nodes or by
the fallback) in the 24 hours before ``now_ms``. The view never holds a key, a lease token, or
which node holds which copy.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Final

import attrs

from hypertrain.compute.leases import eligible_challenges
from hypertrain.compute.model import DEFAULT_SETTINGS, ComputeSettings
from hypertrain.compute.nodes import online_nodes
from hypertrain.compute.rules import DAY_MS
from hypertrain.compute.sybils import strikes_today
from hypertrain.protocol.converter import unstructure
from hypertrain.scoring.registry import REGISTRY

__all__ = ["PAGE_DEFAULT", "PAGE_MAX", "ChallengeCapacity", "ComputeStatus", "NodeStatus", "status"]

PAGE_DEFAULT: Final = 100
"""Nodes in one page of the status view when the caller names no ``limit``."""
PAGE_MAX: Final = 500
"""The largest ``limit`` a caller may ask for."""


@attrs.frozen(kw_only=True)
class NodeStatus:
    """An online node of the status view (never its key or the copies it holds)."""

    id: str
    handle: str
    capabilities: tuple[str, ...]
    hardware: str
    jobs_done: int
    credits: int
    compute_credits: int
    last_seen: int
    established: bool
    """Its key is old enough and off probation: it may be paired with a young key."""
    probation: int
    """Agreed answers it still gives unpaid (0: none)."""
    strikes_today: int
    network_strikes_today: int
    """Strikes today of its source network's nodes (the network itself is never shown)."""


@attrs.frozen
class ChallengeCapacity:
    """How many online, enabled nodes can run a challenge."""

    capable_nodes: int


@attrs.frozen(kw_only=True)
class ComputeStatus:
    """``GET /v1/compute/status`` (module doc)."""

    nodes: tuple[NodeStatus, ...]
    online_nodes: int
    next: str | None
    challenges: dict[str, ChallengeCapacity]
    queued: int
    leased: int
    done_24h: int
    credit_per_job: int
    fallback_ms: int


_OPEN: Final = "SELECT job_id FROM compute_jobs WHERE state IN ('queued', 'fallback')"


def status(
    conn: sqlite3.Connection,
    now_ms: int,
    *,
    settings: ComputeSettings = DEFAULT_SETTINGS,
    after: str | None = None,
    limit: int = PAGE_DEFAULT,
) -> dict[str, Any]:
    """The public status JSON (:class:`ComputeStatus` written by the converter), the page of
    nodes after ``after`` (module doc)."""
    if not 1 <= limit <= PAGE_MAX:
        raise ValueError(f"limit must be 1..{PAGE_MAX}, got {limit}")
    online = online_nodes(conn, now_ms - settings.online_ms)
    rest = [n for n in online if after is None or n.node_id > after]
    page = rest[:limit]
    capable = [
        eligible_challenges(n.capabilities, n.hardware) for n in online if not n.disabled(now_ms)
    ]
    challenges = {
        c.id: ChallengeCapacity(sum(1 for can in capable if c in can)) for c in REGISTRY.values()
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
    networks = {n.network for n in page if n.network is not None}
    per_node, per_network = strikes_today(conn, [n.node_id for n in page], networks, now_ms)
    nodes = tuple(
        NodeStatus(
            id=n.node_id,
            handle=n.handle,
            capabilities=n.capabilities,
            hardware=n.hardware,
            jobs_done=n.jobs_done,
            credits=n.credits,
            compute_credits=n.compute_credits,
            last_seen=n.last_seen_ms,
            established=n.established(now_ms, settings),
            probation=n.probation,
            strikes_today=per_node[n.node_id],
            network_strikes_today=0 if n.network is None else per_network[n.network],
        )
        for n in page
    )
    view = ComputeStatus(
        nodes=nodes,
        online_nodes=len(online),
        next=rest[limit - 1].node_id if len(rest) > limit else None,
        challenges=challenges,
        queued=counts.get("queued", 0),
        leased=counts.get("leased", 0),
        done_24h=done,
        credit_per_job=settings.credit,
        fallback_ms=settings.wait_ms,
    )
    return unstructure(view)
