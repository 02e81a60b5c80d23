"""Pairing rules: which nodes may hold copies of one job together (issue 19 item 1; spec
compute-network section 6 scenarios 1, 2 and 8).

Two nodes that agree settle a step, so two copies of one job must come from two parties. A
copy of a job is offered to node R leasing from network ``net`` only when no OTHER copy of
that job that is ``leased`` or ``answered`` is held by

1. a node of R's account (an account: a node's own id, or the account of the key it was minted
   with, ``POST /v1/compute/register {"account": "ht_..."}``; :mod:`.nodes`);
2. a lease from R's network ``net`` (:mod:`.networks`: IPv4 /24, IPv6 /48; a lease of unknown
   network, ``None``, as only book-level callers pass, is not compared by network);
3. when R is not *established*, a node that is not established either. Established: the key
   is at least ``pair_min_age_ms`` old and not on probation (:meth:`Node.established`). So
   young keys and keys on probation are only ever paired with established nodes, and the
   answers of a key on probation count only beside an established node's (or against the
   trusted evaluator's, in a fallback).

Copies that expired, were released (busy), cancelled or came late hold no answer that counts
and bar nobody (R itself never gets a second copy of a job, whatever its state: :mod:`.leases`).
When nobody eligible asks, the copy stays queued and the step falls back at the end of its
window, as it does when no node is online.

:func:`pairing_clause` is the rule as one SQL condition on the candidate copy ``c``: a search
of that job's own copies (the ``(job_id, ...)`` indexes), each joined to its node by key, so
its cost is the handful of copies of one job, never the book's history.

Pure: builds SQL text; no clock, no I/O.
"""

from __future__ import annotations

from hypertrain.compute.model import ComputeSettings, Node

__all__ = ["pairing_clause"]


def pairing_clause(
    node: Node, network: str | None, now_ms: int, settings: ComputeSettings
) -> tuple[str, list[object]]:
    """``(condition on copy alias c, its parameters)``: the copy's job holds no live or
    answered copy that ``node``, leasing from ``network`` at ``now_ms``, may not be paired
    with (module doc)."""
    terms = ["n.account = ?"]
    params: list[object] = [node.account]
    if network is not None:
        terms.append("o.network = ?")
        params.append(network)
    if not node.established(now_ms, settings):
        terms.append("n.created_ms > ? OR n.probation > 0")
        params.append(now_ms - settings.pair_min_age_ms)
    sql = (
        "NOT EXISTS (SELECT 1 FROM compute_copies o JOIN compute_nodes n USING (node_id)"
        # +o.state: through the job's own copies, not every leased or answered copy
        " WHERE o.job_id = c.job_id AND +o.state IN ('leased', 'answered')"
        f" AND ({' OR '.join(terms)}))"
    )
    return sql, params
