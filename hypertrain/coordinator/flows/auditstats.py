"""``GET /run/{id}/auditor-stats``: audits and honeypot rates per chain epoch (spec 6.5).

Every audit job with a verdict counts in the chain epoch of its round's ``d_audit``
(``epoch = (time_of(d_audit) - genesis) // epoch_seconds``, the ledger's epochs): ``audits``
(verdicts) and ``catches`` (fault verdicts). Honeypots count only once their commitment is
revealed: the members of the revealed commitment the round's RoundOpen carried
(``honeypot_commit``) are that round's honeypots. A member in any mode but ``honest`` is
adversarial: ``hp_bad`` audits of them, ``hp_bad_caught`` with a fault verdict; ``hp_honest``
audits of ``honest`` members, ``hp_honest_flagged`` with a fault verdict.
``honeypot_catch_rate = hp_bad_caught / hp_bad`` and ``honeypot_false_positive_rate =
hp_honest_flagged / hp_honest``, null when the denominator is 0. ``overturned`` counts the
fault verdicts whose auditor lost the miner's dispute (a verdict is still counted as it was
given: a false accusation corrected by a dispute was a false accusation). :func:`epoch_stats`
is the pure count; :func:`auditor_stats` reads its inputs in one transaction: the verdicts
with their rounds' ``d_audit`` and honeypot commitment, never a RoundOpen envelope
(:func:`~hypertrain.coordinator.tables.audits.verdicts_of_run`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from typing import Final

from attrs import frozen

from hypertrain.beacon.chain import ChainInfo
from hypertrain.coordinator.settings import CoordinatorSettings
from hypertrain.coordinator.tables.audits import verdicts_of_run
from hypertrain.coordinator.tables.disputes import disputes_of_run
from hypertrain.coordinator.tables.runs import get_run
from hypertrain.rounds.states import FAULT_STATUSES

__all__ = [
    "AuditRecord",
    "AuditorStats",
    "EpochClock",
    "EpochStats",
    "auditor_stats",
    "epoch_stats",
]


@frozen
class EpochClock:
    """The ledger's epochs: ``epoch_of(t) = (t - genesis_unix) // epoch_seconds``."""

    genesis_unix: float
    epoch_seconds: int

    @classmethod
    def of(cls, settings: CoordinatorSettings, chain: ChainInfo) -> EpochClock:
        """The ledger settings' epochs (``genesis_unix`` unset: the chain's genesis)."""
        genesis = chain.genesis_time if settings.genesis_unix is None else settings.genesis_unix
        return cls(genesis, settings.epoch_seconds)

    def epoch_of(self, t: float) -> int:
        return int((t - self.genesis_unix) // self.epoch_seconds)


@frozen
class AuditRecord:
    """One verdict: its epoch, whether it is a fault, and the target's honeypot mode (None: not
    a revealed honeypot)."""

    epoch: int
    fault: bool
    honeypot: str | None
    overturned: bool = False
    """A fault verdict whose auditor lost the dispute about it."""


def _rate(num: int, den: int) -> float | None:
    return None if den == 0 else num / den


_COUNTS: Final = (
    "audits",
    "catches",
    "overturned",
    "hp_bad",
    "hp_bad_caught",
    "hp_honest",
    "hp_honest_flagged",
)


@frozen
class EpochStats:
    """One chain epoch's audit counts and honeypot rates (module doc; a rate is null when its
    denominator is 0)."""

    epoch: int
    audits: int
    catches: int
    overturned: int
    hp_bad: int
    hp_bad_caught: int
    hp_honest: int
    hp_honest_flagged: int
    honeypot_catch_rate: float | None
    honeypot_false_positive_rate: float | None


@frozen
class AuditorStats:
    """``GET /run/{id}/auditor-stats``: the run's epochs with verdicts, by epoch."""

    run_id: str
    epochs: tuple[EpochStats, ...]


def epoch_stats(records: Iterable[AuditRecord]) -> tuple[EpochStats, ...]:
    """The per-epoch counts and rates (module doc), by epoch."""
    counts: dict[int, dict[str, int]] = {}
    for r in records:
        c = counts.setdefault(r.epoch, dict.fromkeys(_COUNTS, 0))
        c["audits"] += 1
        c["catches"] += r.fault
        c["overturned"] += r.overturned
        if r.honeypot == "honest":
            c["hp_honest"] += 1
            c["hp_honest_flagged"] += r.fault
        elif r.honeypot is not None:
            c["hp_bad"] += 1
            c["hp_bad_caught"] += r.fault
    return tuple(
        EpochStats(
            epoch=epoch,
            **c,
            honeypot_catch_rate=_rate(c["hp_bad_caught"], c["hp_bad"]),
            honeypot_false_positive_rate=_rate(c["hp_honest_flagged"], c["hp_honest"]),
        )
        for epoch, c in sorted(counts.items())
    )


def _revealed(conn: sqlite3.Connection, run_id: str) -> dict[str, Mapping[str, str]]:
    """Revealed commitments: commitment -> {hotkey: mode}."""
    rows = conn.execute(
        "SELECT commitment, reveal FROM honeypots WHERE run_id = ? AND reveal IS NOT NULL",
        (run_id,),
    )
    return {
        commitment: {m["hotkey"]: m["mode"] for m in json.loads(reveal)["members"]}
        for commitment, reveal in rows
    }


def auditor_stats(
    conn: sqlite3.Connection, run_id: str, chain: ChainInfo, clock: EpochClock
) -> AuditorStats:
    """The run's :class:`AuditorStats` (404 for an unknown run)."""
    get_run(conn, run_id)
    revealed = _revealed(conn, run_id)
    overturned = {
        d.job_id
        for d in disputes_of_run(conn, run_id)
        if d.outcome is not None and d.outcome.get("loser_role") == "auditor"
    }
    records = [
        AuditRecord(
            epoch=clock.epoch_of(chain.time_of(job.d_audit)),
            fault=job.result in FAULT_STATUSES,
            honeypot=revealed.get(job.honeypot_commit or "", {}).get(job.target),
            overturned=job.job_id in overturned,
        )
        for job in verdicts_of_run(conn, run_id)
    ]
    return AuditorStats(run_id, epoch_stats(records))
