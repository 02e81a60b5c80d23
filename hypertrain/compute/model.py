"""The records and settings of the compute-job book: nodes, lease grants, jobs, events.

- :class:`ComputeSettings`: the named policy numbers (credit per accepted copy, the fallback
  window, the lease grace after the kill time, expiries before the fallback, strikes per day,
  the online window of the status view, the timing window factor, the re-score rate, the pairing
  age, the mint rate per network, the answers of probation).
- :data:`Event`: what a book function asks its caller to publish, ``(kind, payload)`` with
  ``kind`` in :data:`EVENT_KINDS`. Payloads hold ids and status only: never a key, a lease
  token, an unsettled answer, or which node holds which copy of an unsettled job. They say
  enough for the caller to know which waiters to wake (:mod:`hypertrain.coordinator.
  computehub`): ``queued`` (a step enqueued, or a busy copy given back) and ``split`` (a third
  copy) queue a copy; an ``expired`` copy was replaced when its ``replaced`` is true; ``lease``
  sets a lease deadline; ``fallback`` hands a step to the trusted evaluator; ``audit`` with
  ``change`` ``drawn`` hands a settled step to it for a sampled re-score
  (:mod:`hypertrain.compute.rescores`).
- :class:`Node`, :class:`Job`: frozen rows with their JSON views (the lease grant is a wire
  class, :class:`~hypertrain.compute.wire.LeaseGrant`).

Pure: no clock, no I/O.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Final, Literal, get_args

import attrs

from hypertrain.compute.wire import InputFile, JobState, RegisterAnswer, Trace

__all__ = [
    "DEFAULT_SETTINGS",
    "EVENT_KINDS",
    "ComputeSettings",
    "Event",
    "EventKind",
    "Job",
    "Node",
    "iso_ms",
    "trace_event",
]

EventKind = Literal[
    "register",
    "queued",
    "lease",
    "result",
    "accepted",
    "strike",
    "split",
    "settled",
    "expired",
    "fallback",
    "trace",
    "returned",
    "audit",
]
EVENT_KINDS: Final[tuple[EventKind, ...]] = get_args(EventKind)
Event = tuple[EventKind, dict[str, Any]]


@attrs.frozen(kw_only=True)
class ComputeSettings:
    """Policy numbers of the book (defaults of the node document and DESIGN.md section 6)."""

    credit: int = 1
    """Credits per accepted copy (``HYPERTRAIN_COMPUTE_CREDIT``)."""
    wait_ms: int = 20_000
    """The fallback window of a step (``HYPERTRAIN_COMPUTE_WAIT_MS``); shown by the status."""
    lease_grace_ms: int = 30_000
    """A lease's deadline is the challenge's kill time plus this."""
    max_expiries: int = 3
    """Expired leases of one job that send it to the fallback."""
    strikes_per_day: int = 3
    """Strikes in one UTC day that disable a node until the next UTC midnight."""
    online_ms: int = 120_000
    """A node seen this recently is online in the status view."""
    timing_wait_factor: int = 10
    """A timing step (never scored by the fallback) waits this many windows before unscored."""
    audit_permille: int = 50
    """Of the steps settled by agreement, how many per thousand the beacon draws for a trusted
    re-score (``HYPERTRAIN_COMPUTE_AUDIT_PERMILLE``; 0: none, 1000: all)."""
    pair_min_age_ms: int = 3_600_000
    """A node whose key is younger than this is never paired with another such node, nor with
    one on probation (``HYPERTRAIN_COMPUTE_PAIR_MIN_AGE_S``; :mod:`.pairing`)."""
    mint_per_minute: int = 10
    """Keys minted per source network in any 60 s (``HYPERTRAIN_COMPUTE_MINT_PER_MINUTE``)."""
    probation_answers: int = 10
    """Agreed answers a key on probation owes before it earns
    (``HYPERTRAIN_COMPUTE_PROBATION_ANSWERS``; :mod:`.sybils`)."""

    def __attrs_post_init__(self) -> None:
        for name in (
            "credit",
            "wait_ms",
            "lease_grace_ms",
            "online_ms",
            "pair_min_age_ms",
            "probation_answers",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        for name in ("max_expiries", "strikes_per_day", "timing_wait_factor", "mint_per_minute"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if not 0 <= self.audit_permille <= 1000:
            raise ValueError("audit_permille must be in 0..1000")


DEFAULT_SETTINGS: Final = ComputeSettings()


def iso_ms(ms: int) -> str:
    """An instant as ISO 8601 UTC with milliseconds (``2024-01-02T00:00:00.000Z``)."""
    moment = dt.datetime.fromtimestamp(ms // 1000, dt.UTC).replace(microsecond=ms % 1000 * 1000)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def trace_event(node_id: str, challenge_id: str, trace: str) -> Event:
    """The ``trace`` event of a hidden-trace download (logged with the node id, by design)."""
    return ("trace", {"node": node_id, "challenge": challenge_id, "trace": trace})


@attrs.frozen(kw_only=True)
class Node:
    """One ``compute_nodes`` row (the key hash stays in the store)."""

    node_id: str
    handle: str
    capabilities: tuple[str, ...]
    hardware: str
    created_ms: int
    last_seen_ms: int
    jobs_done: int
    credits: int
    compute_credits: int
    disabled_until_ms: int
    account: str = ""
    """The account (module doc of :mod:`.pairing`); "" only for a row not read from the store."""
    network: str | None = None
    """The source network of its latest register or lease (None: not known)."""
    probation: int = 0
    """Agreed answers it still owes before it earns (0: not on probation)."""

    def disabled(self, now_ms: int) -> bool:
        return self.disabled_until_ms > now_ms

    def established(self, now_ms: int, settings: ComputeSettings) -> bool:
        """Its key is at least ``pair_min_age_ms`` old and it is not on probation."""
        return self.probation == 0 and self.created_ms <= now_ms - settings.pair_min_age_ms

    def register_answer(
        self, minted: str | None, strikes: tuple[int, int] = (0, 0)
    ) -> RegisterAnswer:
        """The register route's answer; ``minted`` is the key when this call minted one,
        ``strikes`` the node's and its network's strikes today."""
        return RegisterAnswer(
            id=self.node_id,
            handle=self.handle,
            capabilities=self.capabilities,
            hardware=self.hardware,
            jobs_done=self.jobs_done,
            credits=self.credits,
            compute_credits=self.compute_credits,
            last_seen=self.last_seen_ms,
            node_id=self.node_id,
            probation=self.probation,
            strikes_today=strikes[0],
            network_strikes_today=strikes[1],
            key=minted,
        )


@attrs.frozen(kw_only=True)
class Job:
    """One ``compute_jobs`` row, decoded."""

    job_id: str
    challenge: str
    version: int
    subject: dict[str, Any]
    step: Trace
    inputs: tuple[InputFile, ...]
    created_ms: int
    wait_ms: int
    wait_deadline_ms: int
    state: JobState
    settled_how: Literal["agreement", "third-copy", "fallback"] | None
    reason: str | None
    result: dict[str, Any] | None
    settled_ms: int | None
    expiries: int

    def score_json(self) -> dict[str, Any]:
        """The job's settled view for the round view and the aggregator."""
        return {
            "job": self.job_id,
            "challenge": self.challenge,
            "version": self.version,
            "subject": self.subject,
            "step": self.step,
            "state": self.state,
            "how": self.settled_how,
            "result": self.result,
            "settled_ms": self.settled_ms,
        }
