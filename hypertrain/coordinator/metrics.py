"""The daemon's Prometheus metrics: one :class:`Metrics` per app, over a registry of its own.

Every metric is defined here and fed from the few places that already know (nobody else
calls ``inc``):

- the app's outermost ASGI layer (:mod:`hypertrain.coordinator.web.instrument`), once per
  request: ``hypertrain_http_requests_total{method,route,status}`` and the histogram
  ``hypertrain_http_request_duration_seconds{method,route}``;
- the lease path (:mod:`hypertrain.coordinator.web.leasepath`), once per answer:
  ``hypertrain_compute_leases_total{outcome}`` (:data:`LEASE_OUTCOMES`) and
  ``hypertrain_compute_results_total{outcome}`` (:data:`RESULT_OUTCOMES`);
- the events ``/v1/events`` streams, through :meth:`Metrics.on_event`:
  ``hypertrain_compute_expiries_total`` (compute ``expired``),
  ``hypertrain_scoring_steps_total{outcome}`` (compute ``settled``, :data:`SCORING_OUTCOMES`),
  ``hypertrain_rounds_total{state}`` (``round_state``, by the state entered; a state
  announced twice for one round counts once),
  ``hypertrain_merges_total`` and the histogram ``hypertrain_merge_duration_seconds``
  (``round_state`` ``aggregated``; the duration when the daemon's aggregator merged it),
  the gauge ``hypertrain_heldout_loss{run_id}`` (``heldout``, the run's latest round) and
  ``hypertrain_audits_total{verdict}`` (``audit`` ``verdict``);
- read at each scrape (:meth:`Metrics.watch`): the gauges ``hypertrain_long_polls_held``
  (the compute hub's held lease polls), ``hypertrain_event_streams`` (open ``/v1/events``
  streams) and ``hypertrain_beacon_lag_rounds`` (rounds due by the wall clock but not yet
  ingested), and prometheus-client's ``process_*`` (from ``/proc``).

The event-fed metrics come through :meth:`Metrics.on_event`, which the composition root adds to
the event hub's observers (it sees every event ``/v1/events`` streams, as it is published).
Labels are bounded: ``route`` is a URL rule's template (``/v1/runs/<run_id>``) or
:data:`UNMATCHED`, ``method`` one of :data:`METHODS` or ``OTHER``, ``status`` a status code
or ``none`` (the client left before an answer started); outcomes, states and verdicts are the
code's own names (an audit verdict that is not a short name counts as ``other``); ``run_id``
is one per run. The registry is the instance's own (never prometheus-client's global one), so
two apps in one process do not share or collide. Pure: no trio, quart or httpx.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)

__all__ = [
    "CONTENT_TYPE",
    "LAST_ROUND_STATE",
    "LATENCY_BUCKETS",
    "LEASE_OUTCOMES",
    "METHODS",
    "NO_ANSWER",
    "RESULT_OUTCOMES",
    "SCORING_OUTCOMES",
    "UNMATCHED",
    "Metrics",
]

CONTENT_TYPE: Final = CONTENT_TYPE_LATEST
"""The ``content-type`` of :meth:`Metrics.render`'s text (Prometheus text format)."""
UNMATCHED: Final = "unmatched"
"""The ``route`` of a request that matched no route (404s of unknown paths)."""
NO_ANSWER: Final = "none"
"""The ``status`` of a request whose client left before an answer started."""
METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""Methods counted under their own name; any other is ``OTHER``."""
LATENCY_BUCKETS: Final = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
"""Seconds; up to a minute, past the 25 s held long poll."""
MERGE_BUCKETS: Final = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
"""Seconds a round's merge takes (inputs read, merged, stored, committed)."""
LEASE_OUTCOMES: Final = ("granted", "empty", "refused")
"""A lease answer: a copy, none (after the poll's wait), or 403 (the node is disabled)."""
RESULT_OUTCOMES: Final = ("counted", "judged", "held", "released", "gone")
"""A result answer's ``status`` (410 is ``gone``): see :mod:`hypertrain.compute.wire`."""
SCORING_OUTCOMES: Final = ("agreement", "third-copy", "fallback", "unscored")
"""How a scoring step ended: settled by two copies' agreement, by a third copy, by the
fallback evaluator, or left unscored (a timing challenge no node could answer)."""
LAST_ROUND_STATE: Final = "RELEASED"
"""A round's last state (its escrow vested): past it no change is counted for it again."""
_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}")


def _name(value: object) -> str:
    """``value`` when it is a short name, else ``"other"`` (bounded label values)."""
    return value if isinstance(value, str) and _NAME.fullmatch(value) else "other"


class Metrics:
    """The metrics of one app (module doc); :meth:`render` gives the text of ``/metrics``."""

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=registry)
        self.requests = Counter(
            "hypertrain_http_requests",
            "HTTP requests answered, by method, route template and status",
            ["method", "route", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "hypertrain_http_request_duration_seconds",
            "Seconds from a request's arrival to the end of its answer (held polls included)",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.leases = Counter(
            "hypertrain_compute_leases",
            "Compute lease answers, by outcome (granted, empty, refused)",
            ["outcome"],
            registry=registry,
        )
        self.results = Counter(
            "hypertrain_compute_results",
            "Compute result answers, by outcome (the answer's status; gone: 410)",
            ["outcome"],
            registry=registry,
        )
        self.expiries = Counter(
            "hypertrain_compute_expiries",
            "Leased compute copies that expired unanswered",
            registry=registry,
        )
        self.scoring = Counter(
            "hypertrain_scoring_steps",
            "Scoring steps ended, by outcome (agreement, third-copy, fallback, unscored)",
            ["outcome"],
            registry=registry,
        )
        self.rounds = Counter(
            "hypertrain_rounds",
            "Round state changes, by the state entered",
            ["state"],
            registry=registry,
        )
        self.merges = Counter(
            "hypertrain_merges",
            "Rounds merged (here or by an external aggregator)",
            registry=registry,
        )
        self.merge_seconds = Histogram(
            "hypertrain_merge_duration_seconds",
            "Seconds the daemon's aggregator took to merge a round",
            buckets=MERGE_BUCKETS,
            registry=registry,
        )
        self.heldout = Gauge(
            "hypertrain_heldout_loss",
            "The held-out loss of a run's latest scored theta",
            ["run_id"],
            registry=registry,
        )
        self.audits = Counter(
            "hypertrain_audits",
            "Audit verdicts received, by verdict",
            ["verdict"],
            registry=registry,
        )
        self.long_polls = Gauge(
            "hypertrain_long_polls_held",
            "Compute lease polls held now, waiting for work",
            registry=registry,
        )
        self.event_streams = Gauge(
            "hypertrain_event_streams", "Event streams (/v1/events) open now", registry=registry
        )
        self.beacon_lag = Gauge(
            "hypertrain_beacon_lag_rounds",
            "Beacon rounds due by the wall clock but not ingested yet",
            registry=registry,
        )
        self._heldout_w: dict[str, int] = {}
        self._states: dict[tuple[str, object], str] = {}
        for outcome in LEASE_OUTCOMES:
            self.leases.labels(outcome)
        for outcome in RESULT_OUTCOMES:
            self.results.labels(outcome)
        for outcome in SCORING_OUTCOMES:
            self.scoring.labels(outcome)

    def watch(
        self,
        *,
        long_polls: Callable[[], float],
        event_streams: Callable[[], float],
        beacon_lag: Callable[[], float],
    ) -> None:
        """Read the gauges of live state from these functions at each scrape."""
        self.long_polls.set_function(long_polls)
        self.event_streams.set_function(event_streams)
        self.beacon_lag.set_function(beacon_lag)

    def on_request(self, method: str, route: str, status: int | None, seconds: float) -> None:
        """One request answered (``status`` None: its client left before an answer)."""
        method = method if method in METHODS else "OTHER"
        code = NO_ANSWER if status is None else str(status)
        self.requests.labels(method, route, code).inc()
        self.latency.labels(method, route).observe(seconds)

    def on_lease(self, outcome: str) -> None:
        """One lease answer: an outcome of :data:`LEASE_OUTCOMES`."""
        self.leases.labels(outcome).inc()

    def on_result(self, outcome: str) -> None:
        """One result answer: an outcome of :data:`RESULT_OUTCOMES`."""
        self.results.labels(outcome).inc()

    def on_event(self, kind: str, data: Mapping[str, Any]) -> None:
        """An event-hub observer: count what ``/v1/events`` just published (module doc)."""
        if kind == "compute":
            self._compute(data)
        elif kind == "round_state":
            self._round_state(data)
            if data.get("state") == "aggregated":
                self.merges.inc()
                seconds = data.get("merge_seconds")
                if isinstance(seconds, int | float):
                    self.merge_seconds.observe(seconds)
        elif kind == "heldout":
            self._heldout(data)
        elif kind == "audit" and data.get("change") == "verdict":
            self.audits.labels(_name(data.get("result"))).inc()

    def _compute(self, data: Mapping[str, Any]) -> None:
        event = data.get("kind")
        if event == "expired":
            self.expiries.inc()
        elif event == "settled":
            outcome = data.get("how") if data.get("state") == "settled" else data.get("state")
            self.scoring.labels(_name(outcome)).inc()

    def _round_state(self, data: Mapping[str, Any]) -> None:
        """Count a round's change of state, once: a state published again for the same round
        (a final round is announced by the finalizer, then by the state feed) is not a change.
        A round is forgotten once :data:`LAST_ROUND_STATE`."""
        state = _name(data.get("state"))
        key = (str(data.get("run_id")), data.get("w"))
        if self._states.get(key) == state:
            return
        self.rounds.labels(state).inc()
        if state == LAST_ROUND_STATE:
            self._states.pop(key, None)
        else:
            self._states[key] = state

    def _heldout(self, data: Mapping[str, Any]) -> None:
        run_id, w, loss = data.get("run_id"), data.get("w"), data.get("loss")
        if not isinstance(run_id, str) or type(w) is not int or not isinstance(loss, int | float):
            return
        if w >= self._heldout_w.get(run_id, -1):
            self._heldout_w[run_id] = w
            self.heldout.labels(run_id).set(loss)

    def render(self) -> bytes:
        """Every metric in the Prometheus text format (:data:`CONTENT_TYPE`)."""
        return generate_latest(self.registry)
