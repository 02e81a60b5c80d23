"""A leased job as the node sees it: does it fit this node, and what to post for it (pure).

The offer itself is a :class:`~hypertrain.compute.wire.LeaseGrant`, decoded strictly by the
client from the lease answer (every field of its JSON type, the copy id and every input name a
safe file name, each sha256 64 lowercase hex chars, sizes within 0..2^53-1, no input name
twice): anything else is :class:`~hypertrain.node.errors.BadOffer` and the job is abandoned
before a byte is fetched or written.

- :func:`fit` says whether this node can run the offer: its ``base`` must be a challenge of the
  local registry with the same ``version`` and ``objective`` and exactly the registry's input
  names. A node never scores an offer its own code would answer differently: it skips it (no
  post; the lease expires without a strike) and tells the volunteer to upgrade. The worker
  rules (kill time, memory, CPU budget) always come from the local registry, not the offer.
- :func:`result_post` is the :class:`~hypertrain.compute.wire.ResultPost` for an outcome:
  ``{lease, ok: true, result: {<objective>, fingerprint, ..., wallMs}}`` or ``{lease, ok:
  false, class, error}`` (the error text on one line, at most
  :data:`~hypertrain.compute.answers.ERROR_TEXT_LIMIT` characters); :func:`describe` is its
  one-line summary for the volunteer. A slice of a hidden step names its hidden window
  (``window``, from the offer), so that an answer on a stale window is refused.

No clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from hypertrain.compute.answers import ERROR_TEXT_LIMIT
from hypertrain.compute.wire import LeaseGrant, ResultPost
from hypertrain.scoring.outcome import ScoreOutcome
from hypertrain.scoring.registry import REGISTRY, Challenge

__all__ = ["describe", "fit", "result_post"]


def fit(offer: LeaseGrant, registry: Mapping[str, Challenge] = REGISTRY) -> Challenge | str:
    """The local challenge that runs ``offer``, or why this node cannot (module doc)."""
    local = registry.get(offer.base)
    wanted = f"{offer.base} v{offer.version}"
    if local is None:
        return f"it needs challenge {wanted}, unknown to this node"
    if local.version != offer.version:
        return f"it needs challenge {wanted}, this node has v{local.version}"
    if local.objective != offer.objective:
        return f"{wanted} reports {offer.objective!r}, this node's scorer {local.objective!r}"
    if sorted(s.name for s in offer.inputs) != sorted(local.inputs):
        return f"{wanted} has other input files than this node's scorer reads"
    return local


def result_post(offer: LeaseGrant, outcome: ScoreOutcome) -> ResultPost:
    """The result post for ``outcome`` (module doc)."""
    if outcome.ok and outcome.result is not None:
        result = {**outcome.result, "wallMs": outcome.wall_ms}
        return ResultPost(lease=offer.token, ok=True, result=result, window=offer.window)
    failure = outcome.failure or "crash"
    error = " ".join(outcome.error.split())[:ERROR_TEXT_LIMIT] or failure
    return ResultPost(lease=offer.token, ok=False, class_=failure, error=error, window=offer.window)


def describe(challenge: Challenge, outcome: ScoreOutcome) -> str:
    """``loss=0344b240 in 2.3 s`` or ``failed (timeout: ...) in 60.0 s``."""
    took = f"in {outcome.wall_ms / 1000:.1f} s"
    if outcome.ok and outcome.result is not None:
        return f"{challenge.objective}={outcome.result.get(challenge.objective)} {took}"
    error = " ".join(outcome.error.split())[:100]
    return f"failed ({outcome.failure or 'crash'}: {error}) {took}"
