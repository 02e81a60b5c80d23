"""Disputes (spec 6.4, issue 14): a miner's Dispute, the Bisects, the Resolution, the deadlines.

The bisection itself is :mod:`hypertrain.rounds.bisection` (pure); this module is the
coordinator's bookkeeping around it, one write transaction per function:

- :func:`post_dispute`: a Dispute envelope signed by the miner (``hotkey``) naming one of its
  fault verdicts by ``verdict_hash`` (404 otherwise). One dispute per verdict (409), and only
  while the miner's status is still that fault (409: a TRANSIENT rerun already forgave it).
  ``accept`` records the fault as accepted. ``contest`` needs the miner's rerun classified
  ``CONTEST`` (409) and a second auditor to referee (409 in a single-auditor run). With a
  replayed leaf to bisect from (``first_bad_leaf >= 1`` and, in segments mode, inside a
  challenged window) the dispute opens at :func:`~hypertrain.rounds.bisection.first_stage`
  with a deadline of ``dispute_per_level`` drand rounds; with nothing to bisect (no leaf, leaf
  0, a leaf a cheap check found) it opens at the referee
  (:func:`~hypertrain.rounds.bisection.verdict_case`: a new audit decides). Either way the
  round's state becomes DISPUTE.
- :func:`post_bisect`: a Bisect envelope from a party (the miner or the disputed auditor; 403
  for anyone else, or a ``party`` that is not the signer) for exactly the current stage (409
  otherwise, after its deadline, or a second Bisect of the party for it), consistent with the
  party's earlier claims (422, :func:`~hypertrain.rounds.bisection.contradiction`). Once both
  parties published the stage, :func:`~hypertrain.rounds.bisection.advance` gives the next
  stage, with a fresh deadline of ``dispute_per_level`` drand rounds (a deadline shared by the
  rounds of one level would let the party that publishes last leave the other no time), or
  the referee's case.
- :func:`post_resolution`: a Resolution envelope signed by an auditor of the run who is neither
  the disputed one nor the disputing miner (403), for a dispute waiting for its referee (409),
  with the case's ``op_spec`` and ``inputs_hash`` and a loser that is a party (422); the auditor
  loses only to an ``output_hash`` that is the miner's value at the point (its committed leaf
  digest in a leaf case; 422).
- :func:`expire_disputes`: a party that has not published the current stage when its deadline
  passed loses (both silent: the miner, whose claim the dispute is).

Outcomes (:func:`_conclude`): the auditor loses -> the miner's status is MATCH, its provisional
Forfeit is deleted and its blacklist lifted unless another round still holds a fault; the miner
loses -> its status is DISPUTE_LOST and the Forfeit is resealed with cause DISPUTE_LOST
(evidence: challenge hash, verdict hash, dispute id). Finality (issue 15) must refuse a round
with an open dispute (its ``disputes`` rows with ``state = 'open'``).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Final

from hypertrain.beacon.ingest import latest_round
from hypertrain.coordinator.flows.lifecycle import parse_manifest
from hypertrain.coordinator.flows.rerun import compared_leaves
from hypertrain.coordinator.tables.audits import JobRow, get_job, insert_forfeit, jobs_of_run
from hypertrain.coordinator.tables.disputes import (
    BisectRow,
    DisputeRow,
    bisects_of,
    dispute_by_verdict,
    disputes_of_run,
    get_dispute,
    insert_bisect,
    insert_dispute,
    overdue_disputes,
    update_dispute,
)
from hypertrain.coordinator.tables.finality import PostFinal, get_final, queue_outcome
from hypertrain.coordinator.tables.miners import (
    get_leaves,
    get_miner,
    lift_blacklist_unless_faulted,
    set_blacklisted,
    set_verdict_status,
)
from hypertrain.coordinator.tables.runs import get_run, record_seen
from hypertrain.protocol.converter import structure
from hypertrain.protocol.envelope import NEVER, seal, verify
from hypertrain.protocol.errors import (
    Conflict,
    ContractMismatch,
    NotFound,
    UnauthorizedSigner,
)
from hypertrain.protocol.jcs import body_digest
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.merkle import merkle_root_hex
from hypertrain.protocol.messages import (
    AuditChallenge,
    Bisect,
    Dispute,
    Forfeit,
    LeafPreimage,
    ReplayVerdict,
    Resolution,
)
from hypertrain.rounds.bisection import (
    Party,
    Point,
    RefereeCase,
    Stage,
    advance,
    claims,
    contradiction,
    first_stage,
    inputs_hash,
    points,
    verdict_case,
)
from hypertrain.rounds.states import FAULT_STATUSES
from hypertrain.trainer.leaves import preimage_digest

__all__ = [
    "ARITY",
    "dispute_view",
    "disputes_list",
    "expire_disputes",
    "get_dispute_view",
    "job_of_dispute",
    "post_bisect",
    "post_dispute",
    "post_resolution",
    "round_disputes",
]

ARITY: Final = 16
"""N of every bisection round (capped at ``b - a``): a step interval of J <= 16 steps, a layer
span of up to 15 layers and every op span take one round each."""

Event = dict[str, Any]


def _manifest(conn: sqlite3.Connection, run_id: str) -> RunManifest:
    return parse_manifest(get_run(conn, run_id).manifest_envelope)


def _event(row: DisputeRow, change: str, **extra: Any) -> Event:
    return {
        "run_id": row.run_id,
        "w": row.w,
        "dispute_id": row.dispute_id,
        "hotkey": row.hotkey,
        "auditor": row.auditor,
        "change": change,
        **extra,
    }


# --- the view ------------------------------------------------------------------------------------


def _point_json(point: Point | None) -> dict[str, Any] | None:
    if point is None:
        return None
    return {"level": point.level, "t": point.t, "layer": point.layer, "index": point.index}


def _referee_json(case: RefereeCase | None) -> dict[str, Any] | None:
    if case is None:
        return None
    return {
        "kind": case.kind,
        "op_spec": case.op_spec,
        "point": _point_json(case.point),
        "agreed": _point_json(case.agreed),
        "agreed_hash": case.agreed_hash,
        "agreed_step": case.agreed_step,
        "miner_hash": case.miner_hash,
        "auditor_hash": case.auditor_hash,
        "leaf": case.leaf,
        "inputs_hash": inputs_hash(case.agreed_step, case.agreed_hash),
    }


def _awaiting(row: DisputeRow, bisects: list[BisectRow]) -> list[Party]:
    done = {b.role for b in bisects if b.stage == row.stage}
    return [role for role in ("miner", "auditor") if role not in done]


def dispute_view(conn: sqlite3.Connection, row: DisputeRow) -> dict[str, Any]:
    """The DisputeView JSON (docs/auditor.md, "Disputes")."""
    bisects = bisects_of(conn, row.dispute_id)
    stage = None
    if row.stage is not None:
        s = row.stage
        stage = {
            "level": s.level,
            "t": s.t,
            "layer": s.layer,
            "interval": [s.a, s.b],
            "N": s.n,
            "points": points(s.a, s.b, s.n),
            "deadline_round": row.level_deadline,
            "awaiting": _awaiting(row, bisects),
        }
    return {
        "dispute_id": row.dispute_id,
        "run_id": row.run_id,
        "w": row.w,
        "miner": row.hotkey,
        "auditor": row.auditor,
        "job_id": row.job_id,
        "challenge_hash": job_of_dispute(conn, row).challenge_hash,
        "verdict_hash": row.verdict_hash,
        "first_bad_leaf": row.first_bad_leaf,
        "action": row.action,
        "state": row.state,
        "opened_round": row.opened_round,
        "stage": stage,
        "referee": _referee_json(row.referee) if row.state == "open" else None,
        "outcome": row.outcome,
        "bisects": [b.view_json() for b in bisects],
    }


def get_dispute_view(conn: sqlite3.Connection, run_id: str, dispute_id: str) -> dict[str, Any]:
    """``GET /v1/runs/{id}/disputes/{dispute_id}`` (404 unknown)."""
    row = get_dispute(conn, dispute_id)
    if row is None or row.run_id != run_id:
        raise NotFound(f"no dispute {dispute_id} in run {run_id}")
    return dispute_view(conn, row)


def disputes_list(
    conn: sqlite3.Connection,
    run_id: str,
    *,
    state: str | None = None,
    party: str | None = None,
    referee: bool = False,
) -> dict[str, Any]:
    """``GET /v1/runs/{id}/disputes``: filtered by state, by party, or those waiting for a
    referee (404 for an unknown run)."""
    get_run(conn, run_id)
    rows = [
        r
        for r in disputes_of_run(conn, run_id)
        if (state is None or r.state == state)
        and (party is None or r.role_of(party) is not None)
        and (not referee or (r.state == "open" and r.stage is None))
    ]
    return {"run_id": run_id, "disputes": [dispute_view(conn, r) for r in rows]}


def round_disputes(conn: sqlite3.Connection, rows: list[DisputeRow]) -> list[dict[str, Any]]:
    """The round view's ``disputes``."""
    return [dispute_view(conn, r) for r in rows]


def job_of_dispute(conn: sqlite3.Connection, row: DisputeRow) -> JobRow:
    job = get_job(conn, row.job_id)
    assert job is not None  # a dispute names a done job
    return job


# --- the Dispute ---------------------------------------------------------------------------------


def _verdict_job(conn: sqlite3.Connection, run_id: str, hotkey: str, verdict_hash: str) -> JobRow:
    for job in jobs_of_run(conn, run_id):
        verdict = job.verdict_json()
        if job.target != hotkey or verdict is None:
            continue
        if body_digest(verdict["body"]) == verdict_hash:
            return job
    raise NotFound(f"no verdict {verdict_hash} on {hotkey} in run {run_id}")


def post_dispute(conn: sqlite3.Connection, run_id: str, raw: object) -> tuple[Event, Event]:
    """Record a Dispute (module doc): ``({dispute_id, state}, event)``."""
    d = latest_round(conn)
    verified = verify(
        raw, expected_run_id=run_id, now_round=d, signer_allowed=lambda t, _: t == "Dispute"
    )
    dispute = verified.message
    assert isinstance(dispute, Dispute)
    if verified.envelope.signer != dispute.hotkey:
        raise UnauthorizedSigner("a Dispute is signed by the disputing miner's hotkey")
    job = _verdict_job(conn, run_id, dispute.hotkey, dispute.verdict_hash)
    verdict_env = job.verdict_json()
    assert verdict_env is not None
    verdict = structure(ReplayVerdict, verdict_env["body"])
    if dispute_by_verdict(conn, dispute.verdict_hash) is not None:
        raise Conflict(f"verdict {dispute.verdict_hash} is already disputed")
    if verdict.result not in FAULT_STATUSES:
        raise Conflict(f"a {verdict.result} verdict is not a fault: nothing to dispute")
    miner = get_miner(conn, run_id, job.w, dispute.hotkey)
    assert miner is not None
    if miner.status != verdict.result:
        raise Conflict(f"{dispute.hotkey} is {miner.status} in round {job.w}, not {verdict.result}")
    if get_final(conn, run_id, job.w) is not None:
        raise Conflict(f"round {job.w} is final: its verdicts stand")
    manifest = _manifest(conn, run_id)
    stage: Stage | None = None
    case: RefereeCase | None = None
    if dispute.action == "contest":
        rerun = conn.execute(
            "SELECT classification FROM reruns WHERE run_id = ? AND w = ? AND hotkey = ?",
            (run_id, job.w, dispute.hotkey),
        ).fetchone()
        if rerun is None or rerun[0] != "CONTEST":
            got = "no rerun" if rerun is None else f"a {rerun[0]} rerun"
            raise Conflict(f"contest needs a CONTEST rerun of round {job.w}, there is {got}")
        if len(manifest.auditors) < 2:
            raise Conflict("the run has a single auditor: no one can referee a dispute")
        k = verdict.first_bad_leaf
        if k is not None and k > manifest.inner.H // manifest.inner.J:
            raise Conflict(f"the verdict's first_bad_leaf {k} is past the round's last leaf")
        challenge = structure(AuditChallenge, job.challenge_json()["body"])
        if (
            k is None
            or k < 1
            or (challenge.mode == "segments" and not any(a < k <= b for a, b in challenge.segments))
        ):
            case = verdict_case()  # nothing to bisect: the referee audits again
        else:
            stage = first_stage(k, manifest.inner.J, manifest.model.n_layers, ARITY)
    record_seen(conn, verified.replay_key, d)
    row = DisputeRow(
        dispute_id=verified.body_digest,
        run_id=run_id,
        w=job.w,
        hotkey=dispute.hotkey,
        auditor=job.auditor or "",
        job_id=job.job_id,
        verdict_hash=dispute.verdict_hash,
        first_bad_leaf=verdict.first_bad_leaf,
        action=dispute.action,
        state="accepted" if dispute.action == "accept" else "open",
        stage=stage,
        level_deadline=None if stage is None else d + manifest.verify.T.dispute_per_level,
        referee=case,
        agreed_step=None,
        outcome=None,
        envelope=verified.envelope.encode().decode(),
        opened_round=d,
        resolved_round=None,
    )
    insert_dispute(conn, row)
    answer = {"dispute_id": row.dispute_id, "state": row.state}
    if row.state == "accepted":
        return answer, _event(row, "accepted")
    return answer, _event(row, "opened", referee=None if case is None else case.kind)


# --- the Bisects ---------------------------------------------------------------------------------


def _open(conn: sqlite3.Connection, run_id: str, dispute_id: str) -> DisputeRow:
    row = get_dispute(conn, dispute_id)
    if row is None or row.run_id != run_id:
        raise NotFound(f"no dispute {dispute_id} in run {run_id}")
    if row.state != "open":
        raise Conflict(f"dispute {dispute_id} is {row.state}")
    return row


def _claims(n_layers: int, bisects: list[BisectRow], role: Party) -> dict[Point, str]:
    out: dict[Point, str] = {}
    for b in bisects:
        if b.role == role:
            out.update(claims(n_layers, b.stage, b.hashes))
    return out


def post_bisect(conn: sqlite3.Connection, run_id: str, raw: object) -> tuple[Event, list[Event]]:
    """Record a Bisect and, once both parties published the stage, advance (module doc)."""
    d = latest_round(conn)
    verified = verify(
        raw, expected_run_id=run_id, now_round=d, signer_allowed=lambda t, _: t == "Bisect"
    )
    bisect = verified.message
    assert isinstance(bisect, Bisect)
    row = _open(conn, run_id, bisect.dispute_id)
    signer = verified.envelope.signer
    role = row.role_of(signer)
    if role is None:
        raise UnauthorizedSigner(f"{signer} is not a party to dispute {row.dispute_id}")
    if bisect.party != signer:
        raise UnauthorizedSigner("party must be the Bisect's signer")
    stage = row.stage
    if stage is None:
        raise Conflict(f"dispute {row.dispute_id} waits for its referee, not for Bisects")
    asked = (stage.level, (stage.a, stage.b), stage.n)
    if (bisect.level, tuple(bisect.interval), bisect.N) != asked:
        raise Conflict(
            f"dispute {row.dispute_id} is at {stage.level} [{stage.a}, {stage.b}] N={stage.n}"
            f" (step {stage.t}, layer {stage.layer}), not {bisect.level}"
            f" {list(bisect.interval)} N={bisect.N}"
        )
    assert row.level_deadline is not None
    if d > row.level_deadline:
        raise Conflict(f"the deadline of this level was round {row.level_deadline} (D = {d})")
    bisects = bisects_of(conn, row.dispute_id)
    if role not in _awaiting(row, bisects):
        raise Conflict(f"the {role} already published this stage")
    manifest = _manifest(conn, run_id)
    n_layers = manifest.model.n_layers
    new = claims(n_layers, stage, bisect.hashes)
    clash = contradiction(_claims(n_layers, bisects, role), new)
    if clash is not None:
        point, was, now = clash
        raise ContractMismatch(
            f"the {role}'s hash at {point.key()} is {now}, it claimed {was} before"
        )
    record_seen(conn, verified.replay_key, d)
    stored = BisectRow(
        row.dispute_id,
        len(bisects) + 1,
        signer,
        role,
        stage,
        bisect.hashes,
        verified.envelope.encode().decode(),
        d,
    )
    insert_bisect(conn, stored)
    bisects.append(stored)
    events = [_event(row, "bisect", role=role, seq=stored.seq, level=stage.level)]
    mine = {b.role: b for b in bisects if b.stage == stage}
    if len(mine) == 2:
        events.append(_advance(conn, row, manifest, mine["miner"], mine["auditor"], d))
    after = get_dispute(conn, row.dispute_id)
    assert after is not None
    view = dispute_view(conn, after)
    answer = {
        "dispute_id": row.dispute_id,
        "seq": stored.seq,
        "state": after.state,
        "stage": view["stage"],
        "referee": view["referee"],
    }
    return answer, events


def _advance(
    conn: sqlite3.Connection,
    row: DisputeRow,
    manifest: RunManifest,
    miner: BisectRow,
    auditor: BisectRow,
    d: int,
) -> Event:
    stage = miner.stage
    n_layers = manifest.model.n_layers
    agreed_step = row.agreed_step
    if stage.level == "step" and miner.hashes[0] == auditor.hashes[0]:
        pairs = list(zip(miner.hashes, auditor.hashes, strict=True))
        first_diff = next((j for j, (x, y) in enumerate(pairs) if x != y), len(pairs))
        agreed_step = miner.hashes[first_diff - 1]  # the state before the interval kept
    nxt = advance(
        n_layers,
        stage,
        miner.hashes,
        auditor.hashes,
        ARITY,
        first_bad_leaf=row.first_bad_leaf or 0,
        agreed_step=agreed_step,
    )
    if isinstance(nxt, Stage):
        # every stage gets the whole window: a deadline inherited within a level would let a
        # party that publishes at the last round leave the other none
        deadline = d + manifest.verify.T.dispute_per_level
        update_dispute(
            conn, row.dispute_id, stage=nxt, level_deadline=deadline, agreed_step=agreed_step
        )
        return _event(row, "stage", level=nxt.level, interval=[nxt.a, nxt.b], t=nxt.t)
    update_dispute(
        conn,
        row.dispute_id,
        stage=None,
        level_deadline=None,
        referee=nxt,
        agreed_step=agreed_step,
    )
    return _event(row, "referee", kind=nxt.kind, op_spec=nxt.op_spec)


# --- the outcome ---------------------------------------------------------------------------------


def _conclude(
    conn: sqlite3.Connection,
    row: DisputeRow,
    loser: Party,
    outcome: dict[str, Any],
    coord: Keypair,
    d: int,
) -> Event:
    """Apply the outcome (module doc) and mark the dispute resolved."""
    full = {"loser": row.party(loser), "loser_role": loser, "resolved_round": d, **outcome}
    update_dispute(
        conn,
        row.dispute_id,
        state="resolved",
        stage=None,
        level_deadline=None,
        outcome=full,
        resolved_round=d,
    )
    conn.execute(
        "DELETE FROM forfeits WHERE run_id = ? AND w = ? AND hotkey = ?",
        (row.run_id, row.w, row.hotkey),
    )
    final = get_final(conn, row.run_id, row.w)
    if final is not None and final.verdict_of(row.hotkey) == "NO_UPLOAD":
        # Final while the dispute was open: the miner's verdict was NO_UPLOAD (its slice
        # forgone); the ledger now vindicates it or faults it (spec 8).
        action: PostFinal = "vindicate" if loser == "auditor" else "fault"
        queue_outcome(conn, row.run_id, row.w, row.hotkey, action, d)
    if loser == "auditor":
        set_verdict_status(conn, row.run_id, row.w, row.hotkey, "MATCH")
        lift_blacklist_unless_faulted(conn, row.run_id, row.hotkey)
    else:
        set_verdict_status(conn, row.run_id, row.w, row.hotkey, "DISPUTE_LOST")
        set_blacklisted(conn, row.run_id, row.hotkey)
        job = job_of_dispute(conn, row)
        forfeit = Forfeit(
            w=row.w,
            hotkey=row.hotkey,
            cause="DISPUTE_LOST",
            evidence=(job.challenge_hash, row.verdict_hash, row.dispute_id),
            round_reward_burned=0,
            escrow_burned_units=0,
            blacklist=True,
            debt_units=0,
        )
        envelope = seal(coord, "Forfeit", row.run_id, forfeit, NEVER)
        insert_forfeit(
            conn, row.run_id, row.w, row.hotkey, "DISPUTE_LOST", envelope.encode().decode(), d
        )
    return _event(
        row,
        "resolved",
        loser=full["loser"],
        loser_role=loser,
        cause=outcome["cause"],
        op_spec=outcome.get("op_spec"),
    )


def _check_vindication(
    conn: sqlite3.Connection, row: DisputeRow, case: RefereeCase, output_hash: str
) -> None:
    """An auditor loses only to a referee whose value is the miner's: the miner's hash at the
    disputed point, (a leaf case) the miner's committed leaf digest, or (a verdict case) the
    root of the committed digests the new audit compared (422 otherwise)."""
    stored = get_leaves(conn, row.run_id, row.w, row.hotkey)
    if case.kind == "leaf":
        assert stored is not None  # a leaf was compared, so the preimages are stored
        assert case.leaf is not None
        want = preimage_digest(structure(LeafPreimage, stored.preimages[case.leaf])).hex()
    elif case.kind == "verdict":  # the new audit's root: the committed digests it compared
        assert stored is not None  # a MISMATCH needs the preimages (else BAD_PROOF)
        job = job_of_dispute(conn, row)
        challenge = structure(AuditChallenge, job.challenge_json()["body"])
        digests = [preimage_digest(structure(LeafPreimage, p)) for p in stored.preimages]
        want = merkle_root_hex([digests[k] for k in compared_leaves(challenge, len(digests))])
    else:
        want = case.miner_hash or ""
    if output_hash != want:
        raise ContractMismatch(
            f"the auditor loses only to the miner's value at {case.op_spec} ({want}),"
            f" the Resolution's output_hash is {output_hash}"
        )


def post_resolution(
    conn: sqlite3.Connection, run_id: str, raw: object, coord: Keypair
) -> tuple[Event, Event]:
    """Record the referee's Resolution and its consequences (module doc)."""
    d = latest_round(conn)
    auditors = set(_manifest(conn, run_id).auditors)
    verified = verify(
        raw,
        expected_run_id=run_id,
        now_round=d,
        signer_allowed=lambda t, signer: t == "Resolution" and signer in auditors,
    )
    resolution = verified.message
    assert isinstance(resolution, Resolution)
    row = _open(conn, run_id, resolution.dispute_id)
    referee = verified.envelope.signer
    if referee == row.auditor:
        raise UnauthorizedSigner("the disputed auditor cannot referee its own dispute")
    if referee == row.hotkey:
        raise UnauthorizedSigner("the disputing miner cannot referee its own dispute")
    case = row.referee
    if case is None:
        raise Conflict(f"dispute {row.dispute_id} is still bisecting")
    if resolution.op_spec != case.op_spec:
        raise ContractMismatch(f"op_spec must be {case.op_spec!r}, got {resolution.op_spec!r}")
    want = inputs_hash(case.agreed_step, case.agreed_hash)
    if resolution.inputs_hash != want:
        raise ContractMismatch(f"inputs_hash must be {want}")
    loser = row.role_of(resolution.loser)
    if loser is None:
        raise ContractMismatch(f"loser {resolution.loser} is not a party to the dispute")
    if loser == "auditor":
        _check_vindication(conn, row, case, resolution.output_hash)
    record_seen(conn, verified.replay_key, d)
    outcome = {
        "cause": "referee",
        "op_spec": case.op_spec,
        "inputs_hash": resolution.inputs_hash,
        "output_hash": resolution.output_hash,
        "referee": referee,
        "resolution": json.loads(verified.envelope.encode()),
        "reason": f"the referee's {case.op_spec} disagrees with the {loser}'s",
    }
    event = _conclude(conn, row, loser, outcome, coord, d)
    return {"dispute_id": row.dispute_id, "loser": resolution.loser, "state": "resolved"}, event


def expire_disputes(conn: sqlite3.Connection, coord: Keypair) -> list[Event]:
    """A party silent past its stage's deadline loses (module doc); the events."""
    d = latest_round(conn)
    events = []
    for row in overdue_disputes(conn, d):
        silent = _awaiting(row, bisects_of(conn, row.dispute_id))
        loser: Party = "miner" if "miner" in silent else "auditor"
        assert row.stage is not None
        outcome = {
            "cause": "timeout",
            "op_spec": None,
            "inputs_hash": None,
            "output_hash": None,
            "referee": None,
            "resolution": None,
            "reason": (
                f"the {' and the '.join(silent)} published nothing for {row.stage.level}"
                f" [{row.stage.a}, {row.stage.b}] by round {row.level_deadline}"
            ),
        }
        events.append(_conclude(conn, row, loser, outcome, coord, d))
    return events
