"""The audit draw of a round (spec 1.3 step 7, 6.1-6.2; DESIGN.md section 9): one write.

:func:`draw_due` runs after every new D (the audit service calls it). A round ``w`` of a run
whose manifest names at least one auditor is *due* once ``D >= d_audit``, ``drand[d_audit]`` is
stored and no draw is recorded for it (a run without auditors is never audited).
Its eligible miners are those ``COMMITTED`` or ``UPLOADED``; each is selected when
:func:`~hypertrain.rounds.audit.select_for_audit` says so with its RoundOpen ``q_i``. In
``segments`` mode (``state_policy = carry``) the draw waits until every selected miner's
preimages are stored or ``D >= d_upload``, because the windows depend on committed norms.

Per selected miner, in the same transaction: a K_coord-sealed AuditChallenge ``{w, target,
beacon_round: d_audit, beacon_sig_sha256: sha256(drand_sig[d_audit]), mode, segments, reasons,
serve_deadline: d_audit + T.serve_deadline}`` (never expiring; ``segments`` from
:func:`~hypertrain.rounds.segments.select_segments`, empty in full mode; ``reasons`` the
round's stored audit reasons of the target, plus ``final`` in segments mode) and a queued job
``a_<first 16 hex of challenge_hash>``. The draw of a round with no eligible miner records an
empty selection. Returns the ``audit`` events (``change: "selected"``) to publish.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from typing import Any, Final

from hypertrain.beacon.ingest import get_round, latest_round
from hypertrain.coordinator.flows.lifecycle import parse_manifest
from hypertrain.coordinator.tables.audits import JobRow, insert_draw, insert_job
from hypertrain.coordinator.tables.miners import get_leaves, miner_details
from hypertrain.coordinator.tables.rounds import RoundRow, get_round_row
from hypertrain.coordinator.tables.runs import get_run
from hypertrain.protocol.envelope import NEVER, seal
from hypertrain.protocol.jcs import body_digest
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.messages import AuditChallenge, AuditMode
from hypertrain.rounds.audit import select_for_audit
from hypertrain.rounds.segments import Window, segment_reasons, select_segments, window_count

__all__ = ["ELIGIBLE", "audit_mode", "draw_due", "due_draws", "job_id_of"]

ELIGIBLE: Final = frozenset({"COMMITTED", "UPLOADED"})
"""Miner statuses the draw considers (spec 6.2)."""


def audit_mode(manifest: RunManifest) -> AuditMode:
    """``segments`` under ``state_policy = carry``, else ``full``."""
    return "segments" if manifest.inner.state_policy == "carry" else "full"


def job_id_of(challenge_hash: str) -> str:
    """``a_`` + the first 16 hex of the challenge hash (a pure function of the challenge)."""
    return "a_" + challenge_hash[:16]


def due_draws(conn: sqlite3.Connection, D: int) -> list[RoundRow]:  # noqa: N803
    """Rounds (of every run whose manifest names an auditor) with ``d_audit <= D`` and no draw
    yet, by run and w. A run without auditors is never audited: nobody could replay its jobs,
    so no miner is drawn, challenged or made to serve.

    Read from ``undrawn_rounds`` (``0017_bounded_reads.sql``: the rounds of audited runs not
    drawn yet, kept by triggers), so the search after every beacon round is bounded by the
    rounds still to draw, not by every round opened."""
    rows = conn.execute(
        "SELECT run_id, w FROM undrawn_rounds WHERE d_audit <= ? ORDER BY run_id, w", (D,)
    ).fetchall()
    found = [get_round_row(conn, run_id, w) for run_id, w in rows]
    return [row for row in found if row is not None]


def _norms(conn: sqlite3.Connection, run_id: str, w: int, hotkey: str) -> list[str | None]:
    stored = get_leaves(conn, run_id, w, hotkey)
    if stored is None:
        return []
    return [p.get("norm_f32") for p in stored.preimages]


def _challenge(
    conn: sqlite3.Connection,
    row: RoundRow,
    manifest: RunManifest,
    target: str,
    sig_sha256: str,
) -> AuditChallenge:
    d = row.deadlines
    mode = audit_mode(manifest)
    reasons = tuple(json.loads(row.reasons).get(target) or ("random",))
    windows: tuple[Window, ...] = ()
    if mode == "segments":
        reasons = segment_reasons(reasons)
        verify = manifest.verify
        windows = select_segments(
            row.run_id,
            row.w,
            sig_sha256,
            target,
            u=window_count(manifest.inner.H, manifest.inner.J),
            k_segments=verify.k_segments,
            q_top=verify.Q_top,
            norms=_norms(conn, row.run_id, row.w, target),
        )
    return AuditChallenge(
        w=row.w,
        target=target,
        beacon_round=d.d_audit,
        beacon_sig_sha256=sig_sha256,
        mode=mode,
        segments=windows,
        reasons=reasons,
        serve_deadline=d.d_audit + manifest.verify.T.serve_deadline,
    )


def _draw(
    conn: sqlite3.Connection,
    row: RoundRow,
    coord: Keypair,
    D: int,  # noqa: N803
) -> list[dict[str, Any]] | None:
    """Draw round ``row.w``; None while it must wait (module doc)."""
    beacon = get_round(conn, row.deadlines.d_audit)
    if beacon is None:
        return None
    run = get_run(conn, row.run_id)
    manifest = parse_manifest(run.manifest_envelope)
    sig = bytes.fromhex(beacon.signature)
    rates = {entry.hotkey: entry.q_i for entry in row.body.roster}
    eligible = [
        (hotkey, rates[hotkey])
        for hotkey, miner in sorted(miner_details(conn, row.run_id, row.w).items())
        if miner.status in ELIGIBLE and hotkey in rates
    ]
    selected = select_for_audit(row.run_id, row.w, sig, eligible)
    mode = audit_mode(manifest)
    waiting = [h for h in selected if get_leaves(conn, row.run_id, row.w, h) is None]
    if mode == "segments" and waiting and row.deadlines.d_upload > D:
        return None
    insert_draw(conn, row.run_id, row.w, selected, D)
    sig_sha256 = hashlib.sha256(sig).hexdigest()
    events = []
    for target in selected:
        body = _challenge(conn, row, manifest, target, sig_sha256)
        envelope = seal(coord, "AuditChallenge", row.run_id, body, NEVER)
        challenge_hash = body_digest(envelope.body)
        job = JobRow(
            job_id=job_id_of(challenge_hash),
            run_id=row.run_id,
            w=row.w,
            target=target,
            challenge=envelope.encode().decode(),
            challenge_hash=challenge_hash,
            mode=mode,
            serve_deadline=body.serve_deadline,
            state="queued",
            lease=None,
            lease_expires_round=None,
            attempts=0,
            fail_reason=None,
            verdict=None,
            result=None,
            auditor=None,
            verdict_round=None,
        )
        insert_job(conn, job, D, honeypot_commit=row.body.honeypot_commit)
        events.append(
            {
                "run_id": row.run_id,
                "w": row.w,
                "target": target,
                "job_id": job.job_id,
                "change": "selected",
                "mode": mode,
                "segments": [list(s) for s in body.segments],
            }
        )
    return events


def draw_due(conn: sqlite3.Connection, coord: Keypair) -> list[dict[str, Any]]:
    """Run every due draw at the stored D (one write); the ``audit`` events to publish."""
    d = latest_round(conn)
    events: list[dict[str, Any]] = []
    for row in due_draws(conn, d):
        drawn = _draw(conn, row, coord, d)
        if drawn is not None:
            events.extend(drawn)
    return events
