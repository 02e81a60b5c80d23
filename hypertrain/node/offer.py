"""A leased job as the node sees it: parsing the offer, checking it fits, the result body (pure).

- :meth:`JobOffer.from_json` parses the lease answer's ``job`` object
  (:meth:`hypertrain.compute.model.LeaseGrant.to_json`) strictly: every field of the right type,
  the copy id and every input name a safe file name
  (:func:`~hypertrain.scoring.inputs.check_input_name`: no ``/``, no ``..``), each input's
  sha256 64 lowercase hex chars and its size in range, no name twice. Anything else is
  :class:`BadOffer` and the job is abandoned before a byte is fetched or written.
- :func:`fit` says whether this node can run the offer: its ``base`` must be a challenge of the
  local registry with the same ``version`` and ``objective`` and exactly the registry's input
  names. A node never scores an offer its own code would answer differently: it skips it (no
  post; the lease expires without a strike) and tells the volunteer to upgrade. The worker
  rules (kill time, memory, CPU budget) always come from the local registry, not the offer.
- :func:`result_body` is the body posted for an outcome: ``{lease, ok: true, result:
  {<objective>, fingerprint, ..., wallMs}}`` or ``{lease, ok: false, class, error}``;
  :func:`describe` is its one-line summary for the volunteer.

No clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from hypertrain.compute.answers import ERROR_TEXT_LIMIT
from hypertrain.node.cache import InputSpec
from hypertrain.node.errors import BadOffer
from hypertrain.scoring.inputs import BadInput, check_input_name
from hypertrain.scoring.outcome import ScoreOutcome
from hypertrain.scoring.registry import REGISTRY, Challenge

__all__ = ["JobOffer", "describe", "fit", "result_body"]

"""Characters of a failure's diagnostic text that are posted."""


def _str(data: Mapping[str, Any], name: str) -> str:
    value = data.get(name)
    if not isinstance(value, str) or not value:
        raise BadOffer(f"{name}: not a non-empty string")
    return value


def _int(data: Mapping[str, Any], name: str) -> int:
    value = data.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadOffer(f"{name}: not an integer")
    return value


def _inputs(value: object) -> tuple[InputSpec, ...]:
    if not isinstance(value, list) or not value:
        raise BadOffer("inputs: not a non-empty list")
    specs = []
    for item in value:
        if not isinstance(item, dict):
            raise BadOffer("inputs: an entry is not an object")
        name, sha256, size = item.get("name"), item.get("sha256"), item.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or not isinstance(sha256, str):
            raise BadOffer(f"input {str(name)[:80]!r}: sha256 or size has the wrong type")
        try:
            specs.append(InputSpec(check_input_name(name), sha256, size))
        except (BadInput, ValueError) as e:
            raise BadOffer(str(e)) from e
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise BadOffer("inputs: a name appears twice")
    return tuple(specs)


@attrs.frozen(kw_only=True)
class JobOffer:
    """One leased copy (module doc); ``lease`` is the token the result must carry."""

    copy_id: str
    job_id: str
    challenge: str
    base: str
    trace: Literal["public", "hidden"]
    inputs: tuple[InputSpec, ...]
    version: int
    objective: str
    lease: str = attrs.field(repr=False)
    deadline_ms: int | None

    @classmethod
    def from_json(cls, data: object) -> JobOffer:
        """The offer of a lease answer's ``job`` object; :class:`BadOffer` (module doc)."""
        if not isinstance(data, dict):
            raise BadOffer("the job is not an object")
        try:
            copy_id = check_input_name(data.get("id"))
        except BadInput as e:
            raise BadOffer(f"id: {e}") from e
        trace = data.get("trace")
        if trace not in ("public", "hidden"):
            raise BadOffer("trace: not 'public' or 'hidden'")
        deadline = data.get("deadline_ms")
        return cls(
            copy_id=copy_id,
            job_id=_str(data, "job"),
            challenge=_str(data, "challenge"),
            base=_str(data, "base"),
            trace="public" if trace == "public" else "hidden",
            inputs=_inputs(data.get("inputs")),
            version=_int(data, "version"),
            objective=_str(data, "objective"),
            lease=_str(data, "lease"),
            deadline_ms=deadline if isinstance(deadline, int) else None,
        )

    @property
    def label(self) -> str:
        """``<challenge>/<trace>``, for the volunteer's lines."""
        return f"{self.challenge}/{self.trace}"


def fit(offer: JobOffer, registry: Mapping[str, Challenge] = REGISTRY) -> Challenge | str:
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


def result_body(offer: JobOffer, outcome: ScoreOutcome) -> dict[str, Any]:
    """The result post's body for ``outcome`` (module doc)."""
    if outcome.ok and outcome.result is not None:
        result = {**outcome.result, "wallMs": outcome.wall_ms}
        return {"lease": offer.lease, "ok": True, "result": result}
    failure = outcome.failure or "crash"
    error = " ".join(outcome.error.split())[:ERROR_TEXT_LIMIT] or failure
    return {"lease": offer.lease, "ok": False, "class": failure, "error": error}


def describe(challenge: Challenge, outcome: ScoreOutcome) -> str:
    """``loss=0344b240 in 2.3 s`` or ``failed (timeout: ...) in 60.0 s``."""
    took = f"in {outcome.wall_ms / 1000:.1f} s"
    if outcome.ok and outcome.result is not None:
        return f"{challenge.objective}={outcome.result.get(challenge.objective)} {took}"
    error = " ".join(outcome.error.split())[:100]
    return f"failed ({outcome.failure or 'crash'}: {error}) {took}"
