"""The daemon's own counters at the end of the demo: one summary line from ``GET /metrics``.

Read while the daemon still runs (after the rounds, the payout and the checkpoint), parsed as
Prometheus parses it, and said as::

    summary: /metrics: 1,234 requests, 52 leases granted, 52 results taken, 31 round state
    changes, 3 merges

(one line). A daemon that does not answer it (an older one, or ``--metrics-bind`` elsewhere)
gives ``summary: /metrics: not served (404)``; the demo's verdict does not depend on it.
"""

from __future__ import annotations

from typing import Final

import attrs
import httpx
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["MetricTotals", "scrape_metrics"]

_TOTALS: Final = {
    "hypertrain_http_requests_total": "requests",
    "hypertrain_compute_leases_total": "leases",
    "hypertrain_compute_results_total": "results",
    "hypertrain_rounds_total": "rounds",
    "hypertrain_merges_total": "merges",
}
"""Sample name -> field; every sample of the name is added up (over all labels), except that
leases count only the ``granted`` outcome."""


@attrs.frozen
class MetricTotals:
    """What the daemon counted, or why nothing was read (``status``)."""

    requests: int = 0
    leases: int = 0
    results: int = 0
    rounds: int = 0
    merges: int = 0
    status: int = 200

    @classmethod
    def parse(cls, text: str) -> MetricTotals:
        """The totals of a ``/metrics`` text."""
        sums = dict.fromkeys(_TOTALS.values(), 0.0)
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                field = _TOTALS.get(sample.name)
                if field is None or (field == "leases" and sample.labels["outcome"] != "granted"):
                    continue
                sums[field] += sample.value
        return cls(**{name: int(total) for name, total in sums.items()})

    def line(self) -> str:
        """The summary line (module doc)."""
        if self.status != 200:
            return f"summary: /metrics: not served ({self.status})"
        return (
            f"summary: /metrics: {self.requests:,} requests, {self.leases:,} leases granted,"
            f" {self.results:,} results taken, {self.rounds:,} round state changes,"
            f" {self.merges:,} merges"
        )


async def scrape_metrics(client: httpx.AsyncClient) -> MetricTotals:
    """``GET /metrics`` on the daemon ``client`` is based at, summed up."""
    answer = await client.get("/metrics")
    if answer.status_code != 200:
        return MetricTotals(status=answer.status_code)
    return MetricTotals.parse(answer.text)
