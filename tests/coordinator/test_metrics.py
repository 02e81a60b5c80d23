"""The daemon's metrics (``hypertrain.coordinator.metrics``): what each feed counts, bounded
labels, and a registry per instance. Pure: no app, no Trio."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from hypertrain.coordinator.events import EventHub
from hypertrain.coordinator.metrics import NO_ANSWER, Metrics


def samples(metrics: Metrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the rendered text, by name and labels (parsed back as a scraper does)."""
    text = metrics.render().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return samples(metrics).get((name, frozenset(labels.items())))


def test_requests_count_by_method_route_and_status_with_bounded_labels() -> None:
    metrics = Metrics()
    metrics.on_request("GET", "/v1/runs/<run_id>", 200, 0.003)
    metrics.on_request("GET", "/v1/runs/<run_id>", 200, 0.2)
    metrics.on_request("BREW", "unmatched", 404, 0.001)
    metrics.on_request("POST", "/v1/compute/jobs/lease", None, 25.0)
    runs = {"method": "GET", "route": "/v1/runs/<run_id>"}
    lease = {"method": "POST", "route": "/v1/compute/jobs/lease"}
    unknown = {"method": "OTHER", "route": "unmatched", "status": "404"}  # BREW: not a label
    assert value(metrics, "hypertrain_http_requests_total", **runs, status="200") == 2
    assert value(metrics, "hypertrain_http_requests_total", **unknown) == 1
    assert value(metrics, "hypertrain_http_requests_total", **lease, status=NO_ANSWER) == 1
    bucket = "hypertrain_http_request_duration_seconds_bucket"
    assert value(metrics, bucket, **runs, le="0.005") == 1
    assert value(metrics, bucket, **runs, le="0.25") == 2
    assert value(metrics, "hypertrain_http_request_duration_seconds_count", **runs) == 2
    assert value(metrics, bucket, **lease, le="30.0") == 1  # a held poll fits the buckets
    assert value(metrics, bucket, **lease, le="10.0") == 0


def test_lease_and_result_outcomes_start_at_zero_and_count() -> None:
    metrics = Metrics()
    assert value(metrics, "hypertrain_compute_leases_total", outcome="empty") == 0
    metrics.on_lease("granted")
    metrics.on_lease("granted")
    metrics.on_lease("empty")
    metrics.on_result("counted")
    metrics.on_result("gone")
    assert value(metrics, "hypertrain_compute_leases_total", outcome="granted") == 2
    assert value(metrics, "hypertrain_compute_leases_total", outcome="empty") == 1
    assert value(metrics, "hypertrain_compute_leases_total", outcome="refused") == 0
    assert value(metrics, "hypertrain_compute_results_total", outcome="counted") == 1
    assert value(metrics, "hypertrain_compute_results_total", outcome="gone") == 1


def _feed(metrics: Metrics, events: list[tuple[str, dict[str, Any]]]) -> None:
    hub = EventHub()
    hub.observers.append(metrics.on_event)
    for kind, data in events:
        hub.publish(kind, data)


def test_events_count_scoring_steps_expiries_rounds_merges_and_audits() -> None:
    metrics = Metrics()
    settled = {"kind": "settled", "job": "j", "challenge": "delta-loss", "state": "settled"}
    _feed(
        metrics,
        [
            ("compute", {**settled, "how": "agreement", "result": {}}),
            ("compute", {**settled, "how": "agreement", "result": {}}),
            ("compute", {**settled, "how": "third-copy", "result": {}}),
            ("compute", {**settled, "how": "fallback", "result": {}}),
            ("compute", {**settled, "state": "unscored", "reason": "no-node"}),
            ("compute", {"kind": "expired", "job": "j", "expiries": 1, "replaced": True}),
            ("compute", {"kind": "lease", "job": "j"}),  # counted where it is answered
            ("round_state", {"run_id": "r", "w": 0, "state": "OPEN", "D": 3}),
            ("round_state", {"run_id": "r", "w": 0, "state": "TRAINING", "D": 5}),
            ("round_state", {"run_id": "r", "w": 1, "state": "OPEN", "D": 9}),
            ("round_state", {"run_id": "r", "w": 1, "state": "FINAL", "verdicts": {}}),
            ("round_state", {"run_id": "r", "w": 1, "state": "FINAL", "D": 10}),  # once
            ("round_state", {"run_id": "r", "w": 1, "state": "RELEASED", "D": 11}),
            ("round_state", {"run_id": "r", "w": 0, "state": "aggregated", "merge_seconds": 0.4}),
            ("round_state", {"run_id": "r", "w": 1, "state": "aggregated", "opened": 2}),
            ("audit", {"run_id": "r", "change": "selected", "target": "5x"}),
            ("audit", {"run_id": "r", "change": "verdict", "result": "PASS"}),
            ("audit", {"run_id": "r", "change": "verdict", "result": "FAULT_COMMIT"}),
            ("audit", {"run_id": "r", "change": "verdict", "result": "no such {verdict}"}),
            ("beacon", {"round": 9, "latest": 9}),
        ],
    )
    steps = "hypertrain_scoring_steps_total"
    assert value(metrics, steps, outcome="agreement") == 2
    assert value(metrics, steps, outcome="third-copy") == 1
    assert value(metrics, steps, outcome="fallback") == 1
    assert value(metrics, steps, outcome="unscored") == 1
    assert value(metrics, "hypertrain_compute_expiries_total") == 1
    assert value(metrics, "hypertrain_compute_leases_total", outcome="granted") == 0
    assert value(metrics, "hypertrain_rounds_total", state="OPEN") == 2
    assert value(metrics, "hypertrain_rounds_total", state="TRAINING") == 1
    assert value(metrics, "hypertrain_rounds_total", state="FINAL") == 1
    assert value(metrics, "hypertrain_rounds_total", state="RELEASED") == 1
    assert value(metrics, "hypertrain_rounds_total", state="aggregated") == 2
    assert value(metrics, "hypertrain_merges_total") == 2
    assert value(metrics, "hypertrain_merge_duration_seconds_count") == 1  # one was timed
    assert value(metrics, "hypertrain_merge_duration_seconds_sum") == 0.4
    assert value(metrics, "hypertrain_audits_total", verdict="PASS") == 1
    assert value(metrics, "hypertrain_audits_total", verdict="FAULT_COMMIT") == 1
    assert value(metrics, "hypertrain_audits_total", verdict="other") == 1


def test_the_heldout_gauge_keeps_each_runs_latest_round() -> None:
    metrics = Metrics()
    _feed(
        metrics,
        [
            ("heldout", {"run_id": "a", "w": 1, "loss": 5.5, "theta_hash": "x"}),
            ("heldout", {"run_id": "a", "w": 0, "loss": 6.0, "theta_hash": "y"}),  # older
            ("heldout", {"run_id": "b", "w": 0, "loss": 4.25, "theta_hash": "z"}),
            ("heldout", {"run_id": "a", "w": 2, "loss": 5.0, "theta_hash": "v"}),
            ("heldout", {"run_id": "b", "w": "1", "loss": 1.0}),  # malformed: ignored
        ],
    )
    assert value(metrics, "hypertrain_heldout_loss", run_id="a") == 5.0
    assert value(metrics, "hypertrain_heldout_loss", run_id="b") == 4.25


def test_live_gauges_are_read_at_each_scrape() -> None:
    metrics = Metrics()
    held = [3]
    metrics.watch(long_polls=lambda: held[0], event_streams=lambda: 2, beacon_lag=lambda: 1)
    assert value(metrics, "hypertrain_long_polls_held") == 3
    held[0] = 0
    assert value(metrics, "hypertrain_long_polls_held") == 0
    assert value(metrics, "hypertrain_event_streams") == 2
    assert value(metrics, "hypertrain_beacon_lag_rounds") == 1


def test_two_instances_keep_their_own_registries() -> None:
    first, second = Metrics(), Metrics()  # the global registry would refuse the second
    first.on_lease("granted")
    assert value(first, "hypertrain_compute_leases_total", outcome="granted") == 1
    assert value(second, "hypertrain_compute_leases_total", outcome="granted") == 0
    assert b"# TYPE hypertrain_http_requests_total counter" in second.render()


def test_an_observer_that_raises_is_logged_and_the_event_still_published(
    caplog: Any,
) -> None:
    hub = EventHub()
    seen: list[str] = []

    def broken(kind: str, data: Any) -> None:
        raise KeyError("boom")

    hub.observers += [broken, lambda kind, data: seen.append(kind)]
    hub.publish("beacon", {"round": 1})
    assert seen == ["beacon"]
    assert hub.statistics().published == 1
    assert "event observer" in caplog.text
