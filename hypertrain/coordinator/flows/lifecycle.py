"""Creating a run and unpausing it: the admin decisions of the run lifecycle (spec 1.3 step 1).

:func:`check_manifest` is the pure intake of an owner-signed RunManifest envelope, in order:

1. shape (400) and type: anything but a ``RunManifest`` envelope is 400;
2. :func:`hypertrain.protocol.envelope.verify` with ``now_round = D``: bad or relabelled
   signature 401, expired 400, signer other than the owner hotkey 403, bad body 400;
3. the envelope's ``run_id`` must be ``sha256(JCS(body))`` (422), ``coord_pubkey`` this
   daemon's K_coord (422) and ``budget.epochs_per_round``, ``verify.E_vest_rounds``,
   ``verify.forgive_per_epoch`` the ledger settings (422 naming each mismatch), and its
   ``beacon`` (chain hash, period, genesis) the chain this daemon follows (422): every deadline
   is a round of that chain, so a manifest naming another one cannot run here.

:func:`create_run` (one write) adds: no beacon round yet (D = 0) is 409, a second run is 409
(one run per state directory), and records the envelope's replay key.

:func:`set_paused` (one write) pauses, or unpauses once the run has a config, a beacon round
and a rostered miner (409 naming what is missing). The first unpause opens round 0
(:func:`seal_round_zero`): ``d_open = D + 1``, the deadline template, the roster with ``q_i``
(:func:`hypertrain.rounds.audit.roster_entries`), ``theta_hash = prev_final_hash =
init_state_hash``, ``outer_state_hash = center_hash = ZERO_STATE``, the committed honeypot or
NO_HONEYPOT, sealed by K_coord with ``exp_drand = NEVER``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Literal

from attrs import field, frozen

from hypertrain.beacon.chain import ChainInfo
from hypertrain.beacon.ingest import latest_round
from hypertrain.coordinator.flows.roundopen import (
    parse_manifest,
    plan_round,
    seal_round_open,
    store_round_open,
)
from hypertrain.coordinator.tables.rounds import RoundRow
from hypertrain.coordinator.tables.runs import (
    RosterRow,
    RunRow,
    RunStatus,
    active_roster,
    get_run,
    insert_run,
    next_round_w,
    record_seen,
    set_status,
)
from hypertrain.protocol.envelope import Verified, check_shape, verify
from hypertrain.protocol.errors import Conflict, ContractMismatch, Malformed, NotConfigured
from hypertrain.protocol.hashes import ZERO_STATE
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.validators import hex64
from hypertrain.rounds.deadlines import RunConfig
from hypertrain.rounds.states import RoundState

__all__ = [
    "ConfigAnswer",
    "LedgerParams",
    "PausedAnswer",
    "RosterRemoved",
    "RunCreated",
    "check_manifest",
    "create_run",
    "parse_manifest",
    "seal_round_zero",
    "set_paused",
]


@frozen
class RunCreated:
    """``POST /v1/admin/runs`` 201: the new run's id (sha256 of its manifest)."""

    run_id: str = field(validator=hex64)
    status: Literal["created"]


@frozen
class ConfigAnswer:
    """``PUT .../config``: the run's config as stored."""

    run_id: str
    config: RunConfig


@frozen
class PausedAnswer:
    """``PUT .../paused``: the run's status after the change."""

    run_id: str
    status: str


@frozen
class RosterRemoved:
    """``DELETE .../roster/{hotkey}``: removed from the next RoundOpen on."""

    hotkey: str
    removed: Literal[True]


@frozen
class LedgerParams:
    """The ledger settings a manifest must repeat (``HYPERTRAIN_EPOCHS_PER_ROUND`` ...)."""

    epochs_per_round: int
    vest_rounds: int
    forgive_per_epoch: int


def check_manifest(
    raw: object,
    *,
    D: int,  # noqa: N803 (spec name)
    owner: str,
    coord: str,
    ledger: LedgerParams,
    chain: ChainInfo,
) -> Verified:
    """Verify an owner-signed RunManifest envelope (module doc, steps 1-3)."""
    if check_shape(raw).type != "RunManifest":
        raise Malformed("expected a signed RunManifest envelope")
    verified = verify(raw, now_round=D, signer_allowed=lambda _type, signer: signer == owner)
    manifest = verified.message
    assert isinstance(manifest, RunManifest)
    if verified.envelope.run_id != verified.body_digest:
        raise ContractMismatch(
            f"run_id {verified.envelope.run_id} is not sha256(JCS(body)) = {verified.body_digest}"
        )
    if manifest.coord_pubkey != coord:
        raise ContractMismatch(
            f"manifest coord_pubkey {manifest.coord_pubkey} is not this coordinator's K_coord"
            f" {coord}"
        )
    wanted = {
        "budget.epochs_per_round": (manifest.budget.epochs_per_round, ledger.epochs_per_round),
        "verify.E_vest_rounds": (manifest.verify.E_vest_rounds, ledger.vest_rounds),
        "verify.forgive_per_epoch": (manifest.verify.forgive_per_epoch, ledger.forgive_per_epoch),
    }
    wrong = [
        f"{name} is {got}, the ledger uses {want}"
        for name, (got, want) in wanted.items()
        if got != want
    ]
    if wrong:
        raise ContractMismatch(f"manifest does not match the ledger settings: {'; '.join(wrong)}")
    beacon = manifest.beacon
    if (beacon.chain_hash, beacon.period * 1000, beacon.genesis_time * 1000) != (
        chain.hash,
        chain.period_ms,
        chain.genesis_ms,
    ):
        raise ContractMismatch(
            f"manifest beacon (chain {beacon.chain_hash}, period {beacon.period} s, genesis "
            f"{beacon.genesis_time}) is not this coordinator's chain (chain {chain.hash}, period "
            f"{chain.period:g} s, genesis {chain.genesis_time:g}; see GET /v1/beacon/info)"
        )
    return verified


def create_run(
    conn: sqlite3.Connection,
    raw: object,
    *,
    owner: str,
    coord: str,
    ledger: LedgerParams,
    chain: ChainInfo,
    now: int,
) -> str:
    """Verify and store a new run (one write); returns its run id. See the module doc."""
    d = latest_round(conn)
    verified = check_manifest(raw, D=d, owner=owner, coord=coord, ledger=ledger, chain=chain)
    if d == 0:
        raise Conflict("no beacon round yet: push one (POST /v1/admin/beacon) first")
    run_id = verified.envelope.run_id
    insert_run(conn, run_id, verified.envelope.encode().decode(), d, now)
    record_seen(conn, verified.replay_key, d)
    return run_id


def seal_round_zero(
    conn: sqlite3.Connection,
    run: RunRow,
    members: list[RosterRow],
    D: int,  # noqa: N803 (spec name)
    coord: Keypair,
) -> RoundRow:
    """Seal and store round 0 opened at ``d_open = D + 1`` (module doc)."""
    manifest = parse_manifest(run.manifest_envelope)
    plan = plan_round(conn, run, members, 0, D + 1)
    body = plan.body(
        prev_final_hash=manifest.init_state_hash,
        theta_hash=manifest.init_state_hash,
        outer_state_hash=ZERO_STATE,
        center_hash=ZERO_STATE,
    )
    envelope = seal_round_open(coord, run.run_id, body)
    return store_round_open(conn, plan, envelope, body, now=D, published_state=RoundState.OPEN)


def set_paused(
    conn: sqlite3.Connection, run_id: str, paused: bool, coord: Callable[[], Keypair]
) -> tuple[RunStatus, RoundRow | None]:
    """Pause or unpause (one write); returns the new status and round 0 if this opened it.

    ``coord`` gives K_coord; it is called only to open round 0 (:class:`NotConfigured`, 503,
    propagates and nothing changes).
    """
    run = get_run(conn, run_id)
    if paused:
        set_status(conn, run_id, "paused")
        return "paused", None
    d = latest_round(conn)
    members = active_roster(conn, run_id)
    missing = []
    if run.config is None:
        missing.append("a config (PUT .../config)")
    if d == 0:
        missing.append("a beacon round (POST /v1/admin/beacon)")
    if not members:
        missing.append("a rostered miner (PUT .../roster/{hotkey})")
    if missing:
        raise Conflict(f"cannot unpause run {run_id}: it needs {', '.join(missing)}")
    opened = None
    if next_round_w(conn, run_id) == 0:
        try:
            keypair = coord()
        except NotConfigured as e:
            raise NotConfigured(f"cannot open round 0: {e.detail}") from e
        opened = seal_round_zero(conn, run, members, d, keypair)
    set_status(conn, run_id, "running")
    return "running", opened
