"""Finalising a round: what it takes, each miner's verdict, the record (spec 7, issue 15).

The rules are pure (:mod:`hypertrain.rounds.finality`); this module reads their inputs and
writes the outcome, one transaction each:

- :func:`plan_finalize` reads round ``w`` and answers a :class:`FinalizePlan` (the verdicts,
  the Commits' tokens, the soft scores, ``included``, ``entitlements_root`` and the theta the
  round handed to round ``w + 1``), or raises: 404 unknown run or round, 409 already final or
  not finalisable yet (the detail lists every blocker);
- :func:`record_finalize` re-plans inside its own transaction and stores a K_coord Finalize
  whose body must equal the plan's (422 naming the first field that differs); ``at`` and its
  ledger marks come from the caller, who holds the ledger's clock;
- :func:`next_to_finalize`: per running or stopped run, the oldest round not final yet (the
  daemon's finality service tries exactly those; rounds are final in order).

The ledger is fed from the stored rows afterwards
(:mod:`hypertrain.coordinator.services.ledgerfeed`), so a daemon stopped between the two catches
up on start.
"""

from __future__ import annotations

import sqlite3

from attrs import frozen

from hypertrain.beacon.ingest import latest_round
from hypertrain.coordinator.flows.aggregation import get_aggregation
from hypertrain.coordinator.flows.roundopen import parse_manifest
from hypertrain.coordinator.flows.softscores import round_soft_scores
from hypertrain.coordinator.tables.audits import draw_of, jobs_of_round
from hypertrain.coordinator.tables.disputes import disputes_of_round
from hypertrain.coordinator.tables.finality import (
    FinalRow,
    get_final,
    insert_final,
    last_final_w,
    queue_outcome,
)
from hypertrain.coordinator.tables.miners import miner_details
from hypertrain.coordinator.tables.rounds import get_round_row
from hypertrain.coordinator.tables.runs import get_run, list_runs, next_round_w
from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.envelope import Envelope
from hypertrain.protocol.errors import Conflict, ContractMismatch, NotFound
from hypertrain.protocol.messages import Finalize
from hypertrain.rounds.finality import (
    Entry,
    MinerFacts,
    RoundFacts,
    Verdict,
    blockers,
    entitlements_root,
    included,
    verdict_of,
)
from hypertrain.rounds.states import MinerStatus

__all__ = ["FinalizePlan", "next_to_finalize", "plan_finalize", "record_finalize"]


@frozen
class FinalizePlan:
    """What the Finalize of round ``w`` says, and the ledger entries behind it."""

    run_id: str
    w: int
    entries: tuple[Entry, ...]
    """One per committed, not EXCLUDED miner, by hotkey."""
    final_theta_hash_w1: str

    def body(self) -> Finalize:
        """The Finalize body."""
        return Finalize(
            w=self.w,
            final_theta_hash_w1=self.final_theta_hash_w1,
            included=included(self.entries),
            entitlements_root=entitlements_root(self.entries),
        )

    def verdicts_json(self) -> dict[str, str]:
        """``{hotkey: verdict}``."""
        return {e.hotkey: e.verdict.value for e in self.entries}


def _miner_facts(conn: sqlite3.Connection, run_id: str, w: int) -> list[tuple[MinerFacts, int]]:
    """Every committed, not EXCLUDED miner's facts and its Commit's tokens, by hotkey."""
    drawn = set(draw_of(conn, run_id, w) or ())
    jobs = {job.target: job for job in jobs_of_round(conn, run_id, w)}
    disputes = disputes_of_round(conn, run_id, w)
    disputed = {d.hotkey for d in disputes if d.state == "open"}
    ever_disputed = {d.hotkey for d in disputes}
    grace = parse_manifest(get_run(conn, run_id).manifest_envelope).verify.T.dispute_per_level
    aggregation = get_aggregation(conn, run_id, w)
    chain = set() if aggregation is None or aggregation.inputs is None else set(aggregation.inputs)
    out = []
    for hotkey, row in sorted(miner_details(conn, run_id, w).items()):
        if row.commit_envelope is None or row.status == MinerStatus.EXCLUDED:
            continue
        job = jobs.get(hotkey)
        until = None
        if row.status == MinerStatus.MISMATCH and hotkey not in ever_disputed:
            assert job is not None
            assert job.verdict_round is not None
            until = job.verdict_round + grace
        facts = MinerFacts(
            hotkey=hotkey,
            status=row.status,
            selected=hotkey in drawn,
            audit=None if job is None else job.state,
            open_dispute=hotkey in disputed,
            in_chain=hotkey in chain,
            serve_deadline=None if job is None else job.serve_deadline,
            dispute_until=until,
        )
        out.append((facts, int(row.commit_body()["tokens"])))
    return out


def _rollback_possible(conn: sqlite3.Connection, run_id: str, w: int) -> bool:
    """Round ``w`` can still be rolled back: it is not the run's last round and round ``w + 1``
    is not merged yet (the rollback comes with that merge; a fault found later is money only)."""
    config = get_run(conn, run_id).config
    last = config is not None and config.total_rounds is not None and w + 1 >= config.total_rounds
    return not last and get_aggregation(conn, run_id, w + 1) is None


def plan_finalize(conn: sqlite3.Connection, run_id: str, w: int) -> FinalizePlan:
    """Round ``w``'s Finalize plan (module doc); raises NotFound or Conflict."""
    run = get_run(conn, run_id)
    row = get_round_row(conn, run_id, w)
    if row is None:
        raise NotFound(f"round {w} of run {run_id} is not open")
    if get_final(conn, run_id, w) is not None:
        raise Conflict(f"round {w} of run {run_id} is already final")
    aggregation = get_aggregation(conn, run_id, w)
    if aggregation is not None and aggregation.inputs is None:
        raise Conflict(
            f"round {w} was merged before the store kept each merge's inputs (migration 0014);"
            " it cannot be finalised"
        )
    auditors = parse_manifest(run.manifest_envelope).auditors
    facts = RoundFacts(
        w=w,
        D=latest_round(conn),
        d_final=row.deadlines.d_final,
        previous_final=w == 0 or get_final(conn, run_id, w - 1) is not None,
        applied=aggregation is not None,
        drawn=not auditors or draw_of(conn, run_id, w) is not None,
        rollback_possible=_rollback_possible(conn, run_id, w),
    )
    miners = _miner_facts(conn, run_id, w)
    why = blockers(facts, [m for m, _ in miners])
    if why:
        raise Conflict(f"round {w} of run {run_id} cannot be finalised yet: " + "; ".join(why))
    assert aggregation is not None
    scores = round_soft_scores(conn, run_id, w, [m.hotkey for m, _ in miners])
    entries = tuple(
        Entry(m.hotkey, verdict_of(m), tokens, scores[m.hotkey]) for m, tokens in miners
    )
    return FinalizePlan(run_id, w, entries, aggregation.theta_hash)


def record_finalize(
    conn: sqlite3.Connection,
    envelope: Envelope,
    body: Finalize,
    at: int,
    marks: tuple[int, int, int],
) -> tuple[FinalizePlan, FinalRow]:
    """Store the K_coord Finalize of round ``body.w`` of ``envelope.run_id`` (module doc);
    ``marks`` is ``(ledger_round, vesting_round, released_round)`` of ``at``."""
    plan = plan_finalize(conn, envelope.run_id, body.w)
    wanted = unstructure(plan.body())
    got = unstructure(body)
    for name, value in wanted.items():
        if got[name] != value:
            raise ContractMismatch(
                f"Finalize.{name} is {got[name]!r:.200}, the server's plan has {value!r:.200}"
            )
    ledger_round, vesting_round, released_round = marks
    row = FinalRow(
        run_id=envelope.run_id,
        w=body.w,
        envelope=envelope.encode().decode(),
        entries=plan.entries,
        final_round=latest_round(conn),
        at=at,
        ledger_round=ledger_round,
        vesting_round=vesting_round,
        released_round=released_round,
        ledger_synced=False,
    )
    insert_final(conn, row)
    for hotkey in _won_before_finality(conn, envelope.run_id, body.w, plan.entries):
        queue_outcome(conn, envelope.run_id, body.w, hotkey, "vindicate", row.final_round)
    return plan, row


def _won_before_finality(
    conn: sqlite3.Connection, run_id: str, w: int, entries: tuple[Entry, ...]
) -> list[str]:
    """NO_UPLOAD miners whose dispute the auditor lost before the round was final: their delta
    was rolled out while contested, so the forgone slice is theirs again (vindicate, spec 8)."""
    no_upload = {e.hotkey for e in entries if e.verdict == Verdict.NO_UPLOAD}
    won = []
    for dispute in disputes_of_round(conn, run_id, w):
        lost_by = (dispute.outcome or {}).get("loser_role")
        if dispute.state == "resolved" and lost_by == "auditor" and dispute.hotkey in no_upload:
            won.append(dispute.hotkey)
    return sorted(set(won))


def next_to_finalize(conn: sqlite3.Connection) -> list[tuple[str, int]]:
    """``(run_id, w)`` per run (not paused before its first round) of the oldest opened round
    that is not final; the service tries these in order."""
    out = []
    for run_id, _status in list_runs(conn):
        newest = next_round_w(conn, run_id) - 1
        w = last_final_w(conn, run_id) + 1
        if w <= newest:
            out.append((run_id, w))
    return out
