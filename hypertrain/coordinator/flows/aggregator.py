"""An external aggregator's reads and round opening (:mod:`hypertrain.coordinator.web.aggregator`).

- :func:`inputs_view`: everything an aggregator needs to merge round ``w`` (one read), and to
  finalise it (:func:`finalize_template`);
- :func:`apply_aggregate`: check a posted RoundOpen(w + 1) against the server's template and
  open it (one write); the status table is the route module's docstring.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Literal

from attrs import field, frozen

from hypertrain.beacon.ingest import latest_round
from hypertrain.coordinator.flows.aggregation import audits_settled
from hypertrain.coordinator.flows.finalize import plan_finalize
from hypertrain.coordinator.flows.rollback import rollback_causes
from hypertrain.coordinator.flows.roundopen import (
    TEMPLATE_FIELDS,
    RoundTemplate,
    plan_round,
    store_round_open,
)
from hypertrain.coordinator.flows.roundview import round_facts
from hypertrain.coordinator.flows.viewwire import RollbackView
from hypertrain.coordinator.tables.finality import get_final, get_rollback
from hypertrain.coordinator.tables.rounds import RoundRow, get_round_row
from hypertrain.coordinator.tables.runs import active_roster, get_run, next_round_w
from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.envelope import Envelope, Verified
from hypertrain.protocol.errors import Conflict, ContractMismatch, NotFound
from hypertrain.protocol.messages import Finalize, RoundOpen
from hypertrain.protocol.validators import hex64, u_int
from hypertrain.rounds.states import RoundState

__all__ = [
    "InputMiner",
    "RollbackCause",
    "RolledBack",
    "RoundApplied",
    "RoundFinalized",
    "RoundInputs",
    "TapeRecorded",
    "apply_aggregate",
    "inputs_view",
]


@frozen
class RoundApplied:
    """``POST .../aggregate``: round ``w`` applied and round ``opened`` open."""

    w: int = field(validator=u_int)
    state: Literal["APPLIED"]
    opened: int = field(validator=u_int)


@frozen(kw_only=True)
class TapeRecorded:
    """``PUT .../tape``: the merge's recorded facts."""

    run_id: str
    w: int = field(validator=u_int)
    tape_key: str = field(validator=hex64)
    theta_hash: str = field(validator=hex64)
    update_norm: float
    clipped: int = field(validator=u_int)


@frozen
class RoundFinalized:
    """``POST .../finalize``: round ``w`` final, with each miner's verdict."""

    w: int = field(validator=u_int)
    state: Literal["FINAL"]
    verdicts: dict[str, str]


@frozen
class RolledBack:
    """``POST .../rollback``: the miners excluded from round ``w``."""

    w: int = field(validator=u_int)
    excluded: tuple[str, ...]


@frozen
class InputMiner:
    """A miner of round ``w`` and its DeltaManifest envelope (null until uploaded)."""

    hotkey: str
    slot: int
    status: str
    delta_manifest: Envelope | None


@frozen
class RollbackCause:
    """A miner the round's merge used that now holds a fault verdict."""

    hotkey: str
    verdict_hash: str


@frozen(kw_only=True)
class RoundInputs:
    """``GET /v1/aggregator/runs/{id}/rounds/{w}/inputs`` (module doc): the shape
    :func:`inputs_view` writes key for key, declared for ``GET /openapi.json`` (not its codec:
    the envelopes are spliced as stored, in their canonical key order, which the converter
    would reorder)."""

    run_id: str
    w: int
    state: RoundState
    now_round: int
    round_open: Envelope
    base: int
    miners: tuple[InputMiner, ...]
    selected: tuple[str, ...] | None
    rollback: RollbackView | None
    rollback_causes: tuple[RollbackCause, ...]
    next_round_template: RoundTemplate | None
    final: bool
    finalize_template: Finalize | None
    finalize_blocked: str | None


def inputs_view(
    conn: sqlite3.Connection, run_id: str, w: int, d_open: int | None
) -> dict[str, Any]:
    """The ``/inputs`` answer (module doc); 404 for an unknown run or round."""
    facts = round_facts(conn, run_id, w)
    template = None
    if get_round_row(conn, run_id, w + 1) is None and facts.run.config is not None:
        default = max(facts.D, facts.round.deadlines.d_upload)
        members = active_roster(conn, run_id)
        plan = plan_round(conn, facts.run, members, w + 1, default if d_open is None else d_open)
        template = plan.template_json()
    miners = []
    for hotkey, slot, status in facts.miners:
        row = facts.details.get(hotkey)
        posted = None if row is None else row.view_json()["delta_manifest"]
        miners.append({"hotkey": hotkey, "slot": slot, "status": status, "delta_manifest": posted})
    return {
        "run_id": run_id,
        "w": w,
        "state": facts.state.value,
        "now_round": facts.D,
        "round_open": facts.round.envelope_json(),
        "base": facts.round.base,
        "miners": miners,
        "selected": facts.selected,
        "rollback": None if facts.rollback is None else facts.rollback.view_json(),
        "rollback_causes": [
            {"hotkey": hotkey, "verdict_hash": cause}
            for hotkey, cause in rollback_causes(conn, run_id, w)
        ],
        "next_round_template": template,
        **finalize_template(conn, run_id, w),
    }


def finalize_template(conn: sqlite3.Connection, run_id: str, w: int) -> dict[str, Any]:
    """``finalize_template``: the Finalize body the server would accept for round ``w`` now
    (null when it is final or not finalisable yet) and ``finalize_blocked``: why not (null
    when it can be final now or already is), and ``final``: whether it is final."""
    if get_final(conn, run_id, w) is not None:
        return {"final": True, "finalize_template": None, "finalize_blocked": None}
    try:
        plan = plan_finalize(conn, run_id, w)
    except Conflict as e:
        return {"final": False, "finalize_template": None, "finalize_blocked": e.detail}
    return {
        "final": False,
        "finalize_template": unstructure(plan.body()),
        "finalize_blocked": None,
    }


def apply_aggregate(conn: sqlite3.Connection, run_id: str, w: int, verified: Verified) -> RoundRow:
    """Check the posted RoundOpen(w + 1) against the server's template and open it (one
    write; module doc)."""
    run = get_run(conn, run_id)
    row = get_round_row(conn, run_id, w)
    if row is None:
        raise NotFound(f"round {w} of run {run_id} is not open")
    if not run.running:
        raise Conflict(f"run {run_id} is {run.status}, not running")
    if next_round_w(conn, run_id) != w + 1:
        raise Conflict(f"round {w} of run {run_id} is already aggregated (round {w + 1} is open)")
    d = latest_round(conn)
    if d < row.deadlines.d_upload:
        raise Conflict(f"round {w} cannot be aggregated before d_upload {row.deadlines.d_upload}")
    if w > 0 and not audits_settled(conn, run_id, w - 1):
        raise Conflict(
            f"round {w + 1} opens only once every audit of round {w - 1} is settled (the w+2"
            " rule, docs/auditor.md)"
        )
    body = verified.message
    assert isinstance(body, RoundOpen)
    if body.d_open < d:
        raise Conflict(f"d_open {body.d_open} is before D = {d}")
    rollback = get_rollback(conn, run_id, w - 1) if w > 0 else None
    if rollback is not None:  # rounds w - 1 and w were recomputed: open from the corrected state
        corrected = json.loads(rollback.envelope)["body"]
        for name, key in (
            ("theta_hash", "new_theta_hash_w2"),
            ("outer_state_hash", "new_outer_state_hash"),
        ):
            if getattr(body, name) != corrected[key]:
                raise ContractMismatch(
                    f"RoundOpen.{name} is {getattr(body, name)}, but round {w - 1} was rolled"
                    f" back: round {w + 1} opens from {corrected[key]}"
                )
    plan = plan_round(conn, run, active_roster(conn, run_id), w + 1, body.d_open)
    wanted = plan.template_json()
    got = unstructure(body)
    for name in TEMPLATE_FIELDS:
        if got[name] != wanted[name]:
            raise ContractMismatch(
                f"RoundOpen.{name} is {got[name]!r:.200}, the server's template has"
                f" {wanted[name]!r:.200}"
            )
    return store_round_open(conn, plan, verified.envelope, body, now=d)
