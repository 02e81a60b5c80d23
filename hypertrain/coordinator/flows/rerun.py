"""A miner reruns its round after a MISMATCH verdict (spec 6.4, issue 14 item 1): one write.

``POST /v1/runs/{id}/rerun`` ``{w, hotkey, leaves_root, sig}``: ``sig`` is the hotkey's
signature over :func:`~hypertrain.protocol.hashes.rerun_claim_bytes` (401 otherwise). The miner
must be in round ``w``'s roster (404 otherwise; a blacklisted miner may rerun: that is the
point), its status there MISMATCH, it reruns a round once, and only before the round is final
(409 otherwise; a MISMATCH holds finality back for ``T.dispute_per_level`` rounds after its
verdict, :mod:`hypertrain.rounds.finality`).

What the miner reruns and what the root covers, so that TRANSIENT is reachable in both modes
(:func:`compared_leaves`): exactly what the auditor recomputed. In full mode the miner reruns
its whole round from its stored start state and signs the Merkle root of all its rerun leaf
digests. In segments mode it reruns each challenged window ``[a, b]`` from the state it served
at leaf ``a`` (the auditor's starting point: a rerun of the whole round from the start would
carry a glitch of an earlier window into a later one's start, which the auditor did not) and
signs the Merkle root of the leaves ``a+1 .. b`` of every window, in window order: the
auditor's ``recomputed_leaves_root`` (:mod:`hypertrain.auditor.verdict`). :func:`classify` then
says:

- equal to the verdict's ``recomputed_leaves_root``: ``TRANSIENT`` while the hotkey has fewer
  than ``forgive_per_epoch`` TRANSIENT reruns in the current ledger epoch (of D's chain time),
  else ``FAULT``. TRANSIENT makes the status TRANSIENT, deletes the provisional Forfeit and
  lifts the blacklist unless another round of the run still holds a fault verdict;
- equal to the root of the miner's *committed* digests at those same leaves: ``CONTEST`` (the
  miner stands by its commitment; a Dispute follows);
- anything else: ``FAULT`` (the fault stands).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, Literal

from attrs import field, frozen

from hypertrain.beacon.chain import ChainInfo
from hypertrain.beacon.ingest import latest_round
from hypertrain.coordinator.flows.auditstats import EpochClock
from hypertrain.coordinator.flows.lifecycle import parse_manifest
from hypertrain.coordinator.flows.replies import Reran
from hypertrain.coordinator.tables.audits import jobs_of_round
from hypertrain.coordinator.tables.finality import get_final
from hypertrain.coordinator.tables.miners import (
    get_leaves,
    get_miner,
    lift_blacklist_unless_faulted,
    set_verdict_status,
)
from hypertrain.coordinator.tables.runs import get_run
from hypertrain.protocol.converter import structure
from hypertrain.protocol.errors import AuthError, Conflict, NotFound
from hypertrain.protocol.hashes import rerun_claim_bytes
from hypertrain.protocol.keys import verify_signature
from hypertrain.protocol.merkle import merkle_root_hex
from hypertrain.protocol.messages import AuditChallenge, LeafPreimage, ReplayVerdict
from hypertrain.protocol.validators import hex64, sig_hex, ss58, ss58_public_key, u_int
from hypertrain.trainer.leaves import preimage_digest

__all__ = [
    "Classification",
    "RerunRequest",
    "classify",
    "compared_leaves",
    "post_rerun",
    "reruns_of_round",
]

Classification = Literal["TRANSIENT", "CONTEST", "FAULT"]


@frozen
class RerunRequest:
    """``POST .../rerun``."""

    w: int = field(validator=u_int)
    hotkey: str = field(validator=ss58)
    leaves_root: str = field(validator=hex64)
    sig: str = field(validator=sig_hex)


def compared_leaves(challenge: AuditChallenge, n_leaves: int) -> list[int]:
    """The leaf indices a rerun root covers (module doc): all of them in full mode, the
    challenged windows' replayed leaves in segments mode."""
    if challenge.mode == "full":
        return list(range(n_leaves))
    return [k for a, b in challenge.segments for k in range(a + 1, b + 1)]


def classify(
    rerun_root: str,
    auditor_root: str,
    committed_root: str,
    *,
    transients_this_epoch: int,
    forgive_per_epoch: int,
) -> Classification:
    """Spec 6.4's classification (module doc)."""
    if rerun_root == auditor_root:
        return "TRANSIENT" if transients_this_epoch < forgive_per_epoch else "FAULT"
    if rerun_root == committed_root:
        return "CONTEST"
    return "FAULT"


def _transients(conn: sqlite3.Connection, run_id: str, hotkey: str, epoch: int) -> int:
    row = conn.execute(
        "SELECT count(*) FROM reruns WHERE run_id = ? AND hotkey = ? AND epoch = ?"
        " AND classification = 'TRANSIENT'",
        (run_id, hotkey, epoch),
    ).fetchone()
    return int(row[0])


def _committed_root(digests: Sequence[bytes], leaves: Sequence[int]) -> str:
    return merkle_root_hex([digests[k] for k in leaves])


def post_rerun(
    conn: sqlite3.Connection,
    run_id: str,
    req: RerunRequest,
    chain: ChainInfo,
    clock: EpochClock,
) -> Reran:
    """Record and classify a rerun (module doc): ``{w, hotkey, classification}``."""
    claim = rerun_claim_bytes(run_id, req.w, req.hotkey, req.leaves_root)
    if not verify_signature(ss58_public_key(req.hotkey), claim, bytes.fromhex(req.sig)):
        raise AuthError("rerun: sig does not verify for the hotkey")
    run = get_run(conn, run_id)
    miner = get_miner(conn, run_id, req.w, req.hotkey)
    if miner is None:
        raise NotFound(f"{req.hotkey} is not in the roster of round {req.w}")
    if miner.status != "MISMATCH":
        raise Conflict(f"{req.hotkey} is {miner.status} in round {req.w}: only MISMATCH reruns")
    done = conn.execute(
        "SELECT classification FROM reruns WHERE run_id = ? AND w = ? AND hotkey = ?",
        (run_id, req.w, req.hotkey),
    ).fetchone()
    if done is not None:
        raise Conflict(f"{req.hotkey} already reran round {req.w} ({done[0]})")
    if get_final(conn, run_id, req.w) is not None:
        raise Conflict(f"round {req.w} is final: its verdicts stand")
    (job,) = [j for j in jobs_of_round(conn, run_id, req.w) if j.target == req.hotkey]
    verdict = structure(ReplayVerdict, (job.verdict_json() or {})["body"])
    challenge = structure(AuditChallenge, job.challenge_json()["body"])
    stored = get_leaves(conn, run_id, req.w, req.hotkey)
    assert stored is not None  # a job is only leased once the preimages are stored
    digests = [preimage_digest(structure(LeafPreimage, p)) for p in stored.preimages]
    leaves = compared_leaves(challenge, len(digests))
    d = latest_round(conn)
    epoch = clock.epoch_of(chain.time_of(d))
    manifest = parse_manifest(run.manifest_envelope)
    result = classify(
        req.leaves_root,
        verdict.recomputed_leaves_root,
        _committed_root(digests, leaves),
        transients_this_epoch=_transients(conn, run_id, req.hotkey, epoch),
        forgive_per_epoch=manifest.verify.forgive_per_epoch,
    )
    conn.execute(
        "INSERT INTO reruns (run_id, w, hotkey, leaves_root, classification, epoch,"
        " rerun_round) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (run_id, req.w, req.hotkey, req.leaves_root, result, epoch, d),
    )
    if result == "TRANSIENT":
        set_verdict_status(conn, run_id, req.w, req.hotkey, "TRANSIENT")
        conn.execute(
            "DELETE FROM forfeits WHERE run_id = ? AND w = ? AND hotkey = ?",
            (run_id, req.w, req.hotkey),
        )
        lift_blacklist_unless_faulted(conn, run_id, req.hotkey)
    return Reran(req.w, req.hotkey, result)


def reruns_of_round(conn: sqlite3.Connection, run_id: str, w: int) -> dict[str, dict[str, Any]]:
    """The round's reruns by hotkey: ``{leaves_root, classification, epoch, rerun_round}``."""
    rows = conn.execute(
        "SELECT hotkey, leaves_root, classification, epoch, rerun_round FROM reruns"
        " WHERE run_id = ? AND w = ?",
        (run_id, w),
    )
    return {
        hotkey: {
            "leaves_root": root,
            "classification": classification,
            "epoch": epoch,
            "rerun_round": rerun_round,
        }
        for hotkey, root, classification, epoch, rerun_round in rows
    }
