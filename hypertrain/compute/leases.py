"""Leasing a copy to a node (``POST /v1/compute/jobs/lease`` without the long poll).

Promises of :func:`lease`:

- The node's stored capabilities and hardware are replaced by the ones sent (normalised like
  :func:`nodes.register_node`) and it is marked seen, even when nothing is granted.
- A disabled node (``disabled_until_ms > now``) gets ``Forbidden`` (403) naming the re-enable
  time in ms and ISO 8601 UTC, and nothing changes.
- The copy granted is the oldest queued copy (queued time, then insertion order: jobs in the
  order they were enqueued, a job's copies by seq; the ``(state, queued_ms)`` index yields that
  order, so the query stops at the first eligible copy instead of sorting the queue) such that:
  its job is ``queued``; ``now < wait_deadline_ms`` (from the deadline on the step belongs to
  the fallback: a lease at exactly the deadline or later does not get it); the job's challenge
  is in the registry at the job's version; the challenge's capability (its base id) is in the
  node's list; for a timing challenge the node's hardware equals the challenge's class; and the
  node never held ANY copy of that job (expired, released and answered ones included; the
  store's unique index on (job, node) enforces it too); and the pairing rules allow the node,
  leasing from ``network``, beside the job's other live or answered copies
  (:mod:`.pairing`: not its account, not its network, not two unestablished nodes). The
  copy records the ``network`` it was leased from, and so does the node (its latest). For a
  slice of a hidden step, the node holds no other slice of that hidden window
  (:mod:`.slices`: the grant binds the node to its slice of the window, for every later step
  of the window too).
- The grant (:class:`~hypertrain.compute.wire.LeaseGrant`) carries a fresh lease token,
  returned only here and stored hashed, and ``deadline_ms = now + kill_after_ms +
  lease_grace_ms``; a result counts up to and including that millisecond. Nothing eligible:
  ``None`` and no event. The ``lease`` event names the job, never the node.

Promises of :func:`hand_out` (copies a transaction just made leasable, handed to held polls in
that same transaction): the asks (:class:`LeaseAsk`, the held polls' nodes, profiles and
networks) are
served in their order (the longest waiting first), each with exactly what :func:`lease` would
give it now, until ``copies`` grants were made or every ask was tried. An ask that gets nothing
(or whose node is disabled by now) gets nothing and changes nothing; the other asks of the same
node and profile are then skipped (they would get nothing either), so a copy nobody waiting may
take costs one lease query per waiting node, not per poll.

Promises of :func:`return_unsent` (a grant whose answer never reached its client: the held poll's
client disconnected before it was sent, or its send failed): the lease is undone, without a
strike and without counting an expiry, when the copy is still leased under that grant's token
with no answer. A copy of a ``queued`` job goes back to the queue as it was before the lease (no
node, no token, no deadline; its queued time kept, so it is the next one leased; the node may
lease it again), event ``returned`` with ``requeued`` true (the hub hands it to the next held
poll in the same transaction). A copy of a job gone to the fallback meanwhile is ``cancelled``
(it would be judged against the trusted result; unanswered, it pays 0), event ``returned`` with
``requeued`` false. A copy that moved on (answered, expired, cancelled, leased again) is left
alone: no change, no event. The node's record is never touched, but a slice binding the grant
made is undone (:func:`~.slices.unbind_holder`: the node never saw the slice, so it may take
any slice of that window again, unless it holds another copy of one).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import attrs

from hypertrain.compute.keys import mint_lease_token, secret_hash, secret_matches
from hypertrain.compute.model import DEFAULT_SETTINGS, ComputeSettings, Event, Node, iso_ms
from hypertrain.compute.nodes import (
    get_node,
    normalise_capabilities,
    normalise_hardware,
    set_profile,
)
from hypertrain.compute.pairing import pairing_clause
from hypertrain.compute.rows import JOB_COLUMNS_J, get_copy, get_job, job_from_row
from hypertrain.compute.slices import LEASE_GUARD, bind_holder, slice_of, unbind_holder
from hypertrain.compute.wire import LeaseGrant
from hypertrain.protocol.errors import Forbidden
from hypertrain.scoring.registry import REGISTRY, Challenge, get_challenge

__all__ = ["LeaseAsk", "eligible_challenges", "hand_out", "lease", "lease_read", "return_unsent"]


def eligible_challenges(capabilities: tuple[str, ...], hardware: str) -> list[Challenge]:
    """The registry challenges a node of this profile may score."""
    return [
        c
        for c in REGISTRY.values()
        if c.capability in capabilities and (c.kind != "timing" or c.hardware_class == hardware)
    ]


def lease(
    conn: sqlite3.Connection,
    node: Node,
    *,
    capabilities: object,
    hardware: object,
    now_ms: int,
    settings: ComputeSettings = DEFAULT_SETTINGS,
    network: str | None = None,
) -> tuple[LeaseGrant | None, list[Event]]:
    """Lease one copy to ``node``, asking from ``network`` (module doc)."""
    caps = normalise_capabilities(capabilities)
    hw = normalise_hardware(hardware)
    current = get_node(conn, node.node_id)
    if current.disabled(now_ms):
        until = current.disabled_until_ms
        raise Forbidden(
            f"node disabled after {settings.strikes_per_day} strikes today; re-enabled at"
            f" {iso_ms(until)} ({until} ms)"
        )
    return _grant(conn, current, caps, hw, network, now_ms, settings)


def lease_read(
    conn: sqlite3.Connection,
    node: Node,
    *,
    capabilities: object,
    hardware: object,
    now_ms: int,
    settings: ComputeSettings = DEFAULT_SETTINGS,
    network: str | None = None,
) -> tuple[LeaseGrant | None, list[Event]]:
    """:func:`lease` for a ``node`` read in this same transaction and found not disabled by
    the caller (it is not read again)."""
    caps = normalise_capabilities(capabilities)
    hw = normalise_hardware(hardware)
    return _grant(conn, node, caps, hw, network, now_ms, settings)


def _grant(
    conn: sqlite3.Connection,
    node: Node,
    caps: tuple[str, ...],
    hw: str,
    network: str | None,
    now_ms: int,
    settings: ComputeSettings,
) -> tuple[LeaseGrant | None, list[Event]]:
    node_id = node.node_id
    set_profile(conn, node_id, caps, hw, now_ms, network)
    eligible = eligible_challenges(caps, hw)
    if not eligible:
        return None, []
    which = " OR ".join("(j.challenge = ? AND j.version = ?)" for _ in eligible)
    params: list[object] = [now_ms]
    for c in eligible:
        params += [c.id, c.version]
    params.append(node_id)
    paired, pairing_params = pairing_clause(node, network, now_ms, settings)
    row = conn.execute(
        f"SELECT c.copy_id, {JOB_COLUMNS_J}"
        " FROM compute_copies c JOIN compute_jobs j USING (job_id)"
        " WHERE c.state = 'queued' AND j.state = 'queued' AND j.wait_deadline_ms > ?"
        f" AND ({which})"
        " AND NOT EXISTS (SELECT 1 FROM compute_copies o"
        "                 WHERE o.job_id = c.job_id AND o.node_id = ?)"
        f" AND {paired}"
        f"{LEASE_GUARD} ORDER BY c.queued_ms, c.rowid LIMIT 1",
        [*params, *pairing_params, node_id],
    ).fetchone()
    if row is None:
        return None, []
    copy_id = str(row[0])
    job = job_from_row(row[1:])
    challenge = get_challenge(job.challenge)
    token = mint_lease_token()
    deadline = now_ms + challenge.kill_after_ms + settings.lease_grace_ms
    conn.execute(
        "UPDATE compute_copies SET state = 'leased', node_id = ?, token_hash = ?, leased_ms = ?,"
        " deadline_ms = ?, network = ? WHERE copy_id = ?",
        (node_id, secret_hash(token), now_ms, deadline, network, copy_id),
    )
    sliced = slice_of(conn, job.job_id)
    if sliced is not None:
        bind_holder(conn, sliced, node_id, now_ms)
    grant = LeaseGrant(
        copy_id=copy_id,
        job_id=job.job_id,
        challenge=challenge.id,
        base=challenge.capability,
        step=f"{job.job_id}/{job.step}",
        trace=job.step,
        inputs=job.inputs,
        step_budget_ms=challenge.step_budget_ms,
        kill_after_ms=challenge.kill_after_ms,
        memory_bytes=challenge.memory_bytes,
        version=job.version,
        objective=challenge.objective,
        token=token,
        deadline_ms=deadline,
        window=None if sliced is None else sliced.window,
    )
    return grant, [("lease", {"job": job.job_id, "challenge": challenge.id, "trace": job.step})]


@attrs.frozen
class LeaseAsk:
    """What one held lease poll asks for: its node, the profile its request sent and the
    network it came from."""

    node: Node
    capabilities: object
    hardware: object
    network: str | None = None


def hand_out(
    conn: sqlite3.Connection,
    asks: Sequence[LeaseAsk],
    copies: int,
    *,
    now_ms: int,
    settings: ComputeSettings = DEFAULT_SETTINGS,
) -> tuple[list[tuple[int, LeaseGrant]], list[Event]]:
    """Grant up to ``copies`` copies to ``asks`` in order (module doc): ``([(index of the
    ask, its grant)], events)``."""
    grants: list[tuple[int, LeaseGrant]] = []
    events: list[Event] = []
    barren: set[tuple[str, str]] = set()
    for index, ask in enumerate(asks):
        if len(grants) >= copies:
            break
        profile = (ask.node.node_id, repr((ask.capabilities, ask.hardware, ask.network)))
        if profile in barren:
            continue
        try:
            grant, more = lease(
                conn,
                ask.node,
                capabilities=ask.capabilities,
                hardware=ask.hardware,
                now_ms=now_ms,
                settings=settings,
                network=ask.network,
            )
        except Forbidden:  # disabled since it asked (raised before any change)
            grant, more = None, []
        if grant is None:
            barren.add(profile)
            continue
        grants.append((index, grant))
        events += more
    return grants, events


def return_unsent(conn: sqlite3.Connection, grant: LeaseGrant) -> list[Event]:
    """Undo the lease of ``grant``, whose answer never reached its client (module doc)."""
    copy = get_copy(conn, grant.copy_id)
    held = copy.token_hash is not None and secret_matches(grant.token, copy.token_hash)
    if copy.state != "leased" or not held or copy.answer_key is not None:
        return []
    job = get_job(conn, copy.job_id)
    requeued = job.state == "queued"
    if requeued:
        conn.execute(
            "UPDATE compute_copies SET state = 'queued', node_id = NULL, token_hash = NULL,"
            " leased_ms = NULL, deadline_ms = NULL, network = NULL WHERE copy_id = ?",
            (copy.copy_id,),
        )
    else:
        conn.execute(
            "UPDATE compute_copies SET state = 'cancelled' WHERE copy_id = ?", (copy.copy_id,)
        )
    assert copy.node_id is not None  # leased
    unbind_holder(conn, job.job_id, copy.node_id, copy.copy_id)
    payload = {"job": job.job_id, "challenge": job.challenge, "trace": job.step}
    return [("returned", {**payload, "requeued": requeued})]
