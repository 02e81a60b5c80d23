"""Building a RoundOpen: one builder for round 0 (first unpause) and round w+1 (aggregation).

:func:`plan_round` turns the run's current roster, config, honeypot and a ``d_open`` into a
:class:`RoundPlan`: the roster with ``q_i`` (:func:`hypertrain.rounds.audit.roster_entries`),
its ``roster_hash``, the committed honeypot (or NO_HONEYPOT), the deadline template (spec 4.1),
the assignment base (:func:`hypertrain.rounds.assignment.next_base`, chained from round
``w - 1``) and the audit reasons. The plan is the server's *template* (RoundOpen minus the four
state hashes, spec 9); :meth:`RoundPlan.body` adds the hashes, :func:`seal_round_open` seals it
with K_coord (``exp_drand = NEVER``) and :func:`store_round_open` stores the round.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Collection, Mapping
from typing import Any

import attrs
from attrs import frozen

from hypertrain.coordinator.tables.rounds import RoundRow, get_round_row, insert_round
from hypertrain.coordinator.tables.runs import RosterRow, RunRow, roster_rows
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.envelope import NEVER, Envelope, seal
from hypertrain.protocol.hashes import NO_HONEYPOT, roster_hash
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.messages import RosterEntry, RoundOpen
from hypertrain.rounds.assignment import next_base
from hypertrain.rounds.audit import RosterMember, audit_reasons, roster_entries
from hypertrain.rounds.deadlines import Deadlines, template
from hypertrain.rounds.states import RoundState

__all__ = [
    "TEMPLATE_FIELDS",
    "RoundPlan",
    "RoundTemplate",
    "parse_manifest",
    "plan_round",
    "seal_round_open",
    "store_round_open",
]

TEMPLATE_FIELDS = (
    "w",
    "roster",
    "roster_hash",
    "honeypot_commit",
    "d_open",
    "d_assign",
    "d_commit",
    "d_audit",
    "d_upload",
    "d_final",
)
"""The RoundOpen fields the server decides (all but the four state hashes)."""


@functools.lru_cache(maxsize=8)
def parse_manifest(envelope_text: str) -> RunManifest:
    """The RunManifest of a stored envelope (canonical JSON text), memoised."""
    return structure(RunManifest, json.loads(envelope_text)["body"])


@frozen(kw_only=True)
class RoundTemplate:
    """RoundOpen minus the four state hashes: the inputs view's ``next_round_template``, what
    an aggregator's RoundOpen(w + 1) must carry."""

    w: int
    roster: tuple[RosterEntry, ...]
    roster_hash: str
    honeypot_commit: str
    d_open: int
    d_assign: int
    d_commit: int
    d_audit: int
    d_upload: int
    d_final: int


@frozen
class RoundPlan:
    """The server's template of round ``w`` plus what it stores beside the RoundOpen."""

    w: int
    roster: tuple[RosterEntry, ...]
    roster_hash: str
    honeypot_commit: str
    deadlines: Deadlines
    base: int
    reasons: Mapping[str, tuple[str, ...]]

    def template(self) -> RoundTemplate:
        """RoundOpen minus the four state hashes."""
        d = self.deadlines
        return RoundTemplate(
            w=self.w,
            roster=self.roster,
            roster_hash=self.roster_hash,
            honeypot_commit=self.honeypot_commit,
            d_open=d.d_open,
            d_assign=d.d_assign,
            d_commit=d.d_commit,
            d_audit=d.d_audit,
            d_upload=d.d_upload,
            d_final=d.d_final,
        )

    def template_json(self) -> dict[str, Any]:
        """:meth:`template` as JSON."""
        written: dict[str, Any] = unstructure(self.template())
        return written

    def body(
        self, *, prev_final_hash: str, theta_hash: str, outer_state_hash: str, center_hash: str
    ) -> RoundOpen:
        """The RoundOpen of this plan with the given state hashes."""
        return RoundOpen(
            prev_final_hash=prev_final_hash,
            theta_hash=theta_hash,
            outer_state_hash=outer_state_hash,
            center_hash=center_hash,
            **attrs.asdict(self.template(), recurse=False),
        )


def _member(row: RosterRow, raised: Collection[str] = frozenset()) -> RosterMember:
    flags = frozenset(row.flags) | ({"copy"} if row.hotkey in raised else set())
    return RosterMember(
        hotkey=row.hotkey,
        bond=row.bond,
        probation=row.probation,
        flags=flags,
        cluster=row.cluster,
        admitted_w=row.admitted_w,
    )


def _faulted_clusters(conn: sqlite3.Connection, run_id: str) -> frozenset[str]:
    return frozenset(
        row.cluster
        for row in roster_rows(conn, run_id)
        if row.blacklisted and row.cluster is not None
    )


def plan_round(
    conn: sqlite3.Connection,
    run: RunRow,
    members: list[RosterRow],
    w: int,
    d_open: int,
    raised: Collection[str] = frozenset(),
) -> RoundPlan:
    """The template of round ``w`` opened at ``d_open`` with the roster ``members``;
    ``raised`` are the hotkeys the previous merge's copy screen flagged (``raise_q``): they
    count as flagged ``copy`` (reason ``outlier``, ``q = 1``) in this round."""
    assert run.config is not None
    manifest = parse_manifest(run.manifest_envelope)
    verify_spec = manifest.verify
    faulted = _faulted_clusters(conn, run.run_id)
    ranked = [_member(m, raised) for m in members]
    roster = roster_entries(ranked, w, verify_spec, faulted)
    reasons = {m.hotkey: audit_reasons(m, w, verify_spec, faulted) for m in ranked}
    prev = get_round_row(conn, run.run_id, w - 1) if w > 0 else None
    if prev is None:
        base = next_base(0, 0, len(roster), manifest)
    else:
        base = next_base(prev.base, len(prev.body.roster), len(roster), manifest)
    roster_json: list[dict[str, Any]] = [unstructure(entry) for entry in roster]
    return RoundPlan(
        w=w,
        roster=tuple(roster),
        roster_hash=roster_hash(roster_json),
        honeypot_commit=run.honeypot_commit or NO_HONEYPOT,
        deadlines=template(d_open, verify_spec.T, run.config),
        base=base,
        reasons=reasons,
    )


def store_round_open(
    conn: sqlite3.Connection,
    plan: RoundPlan,
    envelope: Envelope,
    body: RoundOpen,
    *,
    now: int,
    published_state: RoundState | None = None,
) -> RoundRow:
    """Store round ``plan.w`` opened by ``envelope`` (whose body is ``body``)."""
    return insert_round(
        conn,
        envelope,
        body,
        base=plan.base,
        reasons=plan.reasons,
        now=now,
        published_state=published_state,
    )


def seal_round_open(coord: Keypair, run_id: str, body: RoundOpen) -> Envelope:
    """``body`` sealed by K_coord, never expiring."""
    return seal(coord, "RoundOpen", run_id, body, NEVER)
