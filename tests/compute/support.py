"""A small driver of the compute book over a real database, with explicit times.

Every call records the events it returned in ``Book.events`` and checks the promise that no
event payload holds a node key or a lease token.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

import attrs

from hypertrain.compute import (
    DEFAULT_SETTINGS,
    Answer,
    ComputeSettings,
    Event,
    Job,
    LeaseGrant,
    Node,
    Submitted,
    enqueue_step,
    expire_due,
    fallback_due,
    get_node,
    lease,
    pending_fallbacks,
    register_node,
    settle_trusted,
    submit_result,
)
from hypertrain.compute.rows import Copy, get_job, job_copies
from hypertrain.protocol.converter import unstructure
from hypertrain.scoring.registry import get_challenge
from hypertrain.store import Database

T0 = 1_704_067_200_000
"""2024-01-01T00:00:00.000Z"""
DAY = 86_400_000
FP = "ab" * 32
OTHER_FP = "cd" * 32
LOSS = "3f800000"
LEASE_SPAN = 60_000 + 30_000
"""delta-loss kill_after_ms + the 30 s grace."""


ANY_AGE = attrs.evolve(DEFAULT_SETTINGS, pair_min_age_ms=0)
"""The book's defaults but keys of any age are paired (the pairing tests set their own)."""


def inputs(challenge_id: str = "delta-loss") -> list[dict[str, Any]]:
    names = get_challenge(challenge_id).inputs
    return [{"name": n, "sha256": f"{i:064x}", "size": 10 + i} for i, n in enumerate(names)]


def good(grant: LeaseGrant, loss: str = LOSS, fp: str = FP) -> dict[str, Any]:
    return {
        "lease": grant.token,
        "ok": True,
        "result": {"loss": loss, "fingerprint": fp, "wallMs": 7},
    }


def timed(grant: LeaseGrant, value: float, fp: str = FP) -> dict[str, Any]:
    result = {"tokens_per_s": value, "fingerprint": fp, "wallMs": 7}
    return {"lease": grant.token, "ok": True, "result": result}


def failed(grant: LeaseGrant, cls: str, error: str = "boom") -> dict[str, Any]:
    return {"lease": grant.token, "ok": False, "class": cls, "error": error}


def busy(grant: LeaseGrant) -> dict[str, Any]:
    return {"lease": grant.token, "ok": False, "busy": True}


@attrs.define
class Book:
    db: Database
    settings: ComputeSettings = ANY_AGE
    events: list[Event] = attrs.Factory(list)
    secrets: list[str] = attrs.Factory(list)
    last_holder: dict[str, str] = attrs.Factory(dict)

    def _keep(self, events: Sequence[Event]) -> None:
        text = json.dumps(list(events))
        for secret in self.secrets:
            assert secret not in text, "an event leaked a key or lease token"
        self.events += events

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.events]

    async def node(
        self,
        now: int = T0,
        *,
        caps: Sequence[str] = ("delta-loss",),
        hardware: str | None = None,
        handle: str | None = None,
        key: str | None = None,
        network: str | None = None,
        account: str | None = None,
    ) -> tuple[Node, str]:
        def body(conn: sqlite3.Connection) -> tuple[Node, str | None, list[Event]]:
            return register_node(
                conn,
                key=key,
                handle=handle,
                capabilities=list(caps),
                hardware=hardware,
                now_ms=now,
                network=network,
                account=account,
                settings=self.settings,
            )

        node, minted, events = await self.db.write(body)
        secret = minted or key
        assert secret is not None
        self.secrets.append(secret)
        self._keep(events)
        return node, secret

    async def enqueue(
        self,
        now: int = T0,
        *,
        subject: dict[str, Any] | None = None,
        challenge: str = "delta-loss",
        step: str = "public",
        wait_ms: int = 20_000,
    ) -> str:
        subj = subject or {"run_id": "r1", "w": 0, "hotkey": "h1"}

        def body(conn: sqlite3.Connection) -> tuple[str, list[Event]]:
            return enqueue_step(
                conn,
                challenge_id=challenge,
                subject=subj,
                step=step,
                inputs=inputs(challenge),
                now_ms=now,
                wait_ms=wait_ms,
                settings=self.settings,
            )

        job_id, events = await self.db.write(body)
        self._keep(events)
        return job_id

    async def lease(
        self,
        node: Node,
        now: int,
        *,
        caps: Sequence[str] | None = None,
        hardware: str | None = None,
        network: str | None = None,
    ) -> LeaseGrant | None:
        def body(conn: sqlite3.Connection) -> tuple[LeaseGrant | None, list[Event]]:
            return lease(
                conn,
                node,
                capabilities=list(node.capabilities if caps is None else caps),
                hardware=node.hardware if hardware is None else hardware,
                now_ms=now,
                settings=self.settings,
                network=network,
            )

        grant, events = await self.db.write(body)
        if grant is not None:
            self.secrets.append(grant.token)
            self.last_holder[grant.copy_id] = node.node_id
        self._keep(events)
        return grant

    def lease_holder(self, grant: LeaseGrant) -> str:
        """The node id a grant went to (test-side bookkeeping from the last lease call)."""
        return self.last_holder[grant.copy_id]

    async def post(
        self, node: Node, copy_id: str, body: object, now: int
    ) -> tuple[int, dict[str, Any]]:
        """The answer as its JSON (what the route sends)."""

        def run(conn: sqlite3.Connection) -> Submitted:
            return submit_result(conn, node, copy_id, body, now, settings=self.settings)

        status, reply, events = await self.db.write(run)
        self._keep(events)
        return status, unstructure(reply)

    async def expire(self, now: int) -> list[Event]:
        events = await self.db.write(lambda c: expire_due(c, now, settings=self.settings))
        self._keep(events)
        return events

    async def fallback(self, now: int) -> list[Job]:
        events, jobs = await self.db.write(lambda c: (fallback_due(c, now), pending_fallbacks(c)))
        self._keep(events)
        return jobs

    async def trusted(self, job_id: str, answer: Answer, now: int) -> list[Event]:
        events = await self.db.write(
            lambda c: settle_trusted(c, job_id, answer, now, settings=self.settings)
        )
        self._keep(events)
        return events

    async def job(self, job_id: str) -> Job:
        return await self.db.read(get_job, job_id)

    async def copies(self, job_id: str) -> list[Copy]:
        return await self.db.read(job_copies, job_id)

    async def fresh(self, node: Node) -> Node:
        return await self.db.read(get_node, node.node_id)

    async def strikes(self, node: Node) -> list[str]:
        rows = await self.db.read(
            lambda c: c.execute(
                "SELECT day FROM compute_strikes WHERE node_id = ? ORDER BY struck_ms",
                (node.node_id,),
            ).fetchall()
        )
        return [str(r[0]) for r in rows]
