"""A fake coordinator for node tests: the compute routes as an ``httpx.MockTransport`` handler.

It keeps just enough state (keys, a queue of offers, served inputs, posted results) and runs on
Trio's clock, so the long poll's hold and the disabled window move with the autojump clock.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

import attrs
import httpx
import trio

from hypertrain.compute.keys import mint_key, mint_lease_token, new_handle
from hypertrain.compute.model import iso_ms
from nurseries import VirtualClock

EPOCH = 1_700_000_000.0
URL = "http://127.0.0.1:8000"
DELTA_LOSS_FILES = {
    "model.json": b'{"model": "tiny"}',
    "state.bin": b"state" * 100,
    "delta.bin": b"delta" * 50,
    "trace.u16": b"\x01\x00" * 64,
}


async def _chunks(data: bytes, size: int = 100, *, stall: bool = False) -> AsyncIterator[bytes]:
    """The body as a stream, the way a real server's arrives (or stalls)."""
    for start in range(0, len(data), size):
        await trio.lowlevel.checkpoint()
        yield data[start : start + size]
        if stall:
            await trio.sleep_forever()


def _answer(status: int, body: object) -> httpx.Response:
    return httpx.Response(status, json=body)


@attrs.define
class FakeCoordinator:
    wall: VirtualClock = attrs.field(factory=lambda: VirtualClock(EPOCH))
    hold: float = 25.0
    """How long an empty lease poll is held."""
    keys: dict[str, str] = attrs.field(factory=dict)
    offers: list[dict[str, Any]] = attrs.field(factory=list)
    served: dict[tuple[str, str], bytes] = attrs.field(factory=dict)
    tokens: dict[str, str] = attrs.field(factory=dict)
    lease_failures: list[int | httpx.Response | type[Exception]] = attrs.field(factory=list)
    register_failures: list[httpx.Response] = attrs.field(factory=list)
    """Answers given to the next register calls, before any is taken."""
    probation: int = 0
    """The probation each register answer reports."""
    disabled_until_ms: int | None = None
    post_status: int = 200
    next_mode: str = "take"
    """A result's ``next`` lease request: "take" it (the daemon), "ignore" it (answer without
    ``next``, as for a node disabled by now) or "refuse" it (400, as an older daemon)."""
    stall: set[str] = attrs.field(factory=set)
    """Input names whose download stops after the first chunk and never ends."""
    registers: list[dict[str, Any]] = attrs.field(factory=list)
    lease_times: list[float] = attrs.field(factory=list)
    """When each plain lease poll came."""
    next_times: list[float] = attrs.field(factory=list)
    """When each lease carried by a result post was taken."""
    fetches: list[tuple[str, str]] = attrs.field(factory=list)
    results: list[tuple[str, dict[str, Any]]] = attrs.field(factory=list)
    requests: list[httpx.Request] = attrs.field(factory=list)
    standing: dict[str, Any] | None = None
    """The leaderboard row ``GET /v1/compute/leaderboard/{node}`` answers (None: 404)."""
    standing_times: list[float] = attrs.field(factory=list)

    def offer(
        self,
        copy_id: str,
        files: dict[str, bytes] | None = None,
        *,
        base: str = "delta-loss",
        version: int = 1,
        objective: str = "loss",
        names: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Queue a job for the next lease; ``names`` renames inputs (hostile offers)."""
        files = DELTA_LOSS_FILES if files is None else files
        token = mint_lease_token()
        self.tokens[copy_id] = token
        inputs = []
        for name, data in files.items():
            shown = (names or {}).get(name, name)
            self.served[(copy_id, shown)] = data
            inputs.append(
                {"name": shown, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
            )
        offer = {
            "id": copy_id,
            "job": copy_id.split(".")[0],
            "challenge": base,
            "base": base,
            "step": f"{copy_id.split('.')[0]}/public",
            "trace": "public",
            "inputs": inputs,
            "step_budget_ms": 45_000,
            "kill_after_ms": 60_000,
            "memory_bytes": 4 << 30,
            "version": version,
            "objective": objective,
            "lease": token,
            "deadline_ms": round(self.wall.now() * 1000) + 90_000,
        }
        self.offers.append(offer)
        return offer

    def _node(self, request: httpx.Request) -> str | None:
        auth = request.headers.get("authorization", "")
        return self.keys.get(auth.removeprefix("Bearer "))

    async def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path
        body = json.loads(request.content) if request.content else None
        if path == "/v1/compute/register":
            return self._register(body)
        if path.startswith("/v1/compute/leaderboard/"):
            self.standing_times.append(trio.current_time())
            if self.standing is None:
                return _answer(404, {"detail": "no route"})
            return _answer(200, {**self.standing, "id": path.rsplit("/", 1)[1]})
        node = self._node(request)
        if node is None:
            return _answer(401, {"detail": "unknown node key"})
        if path == "/v1/compute/jobs/lease":
            return await self._lease()
        parts = path.split("/")
        if len(parts) == 7 and parts[5] == "inputs":
            copy_id, name = parts[4], parts[6]
            if request.headers.get("x-ht-lease") != self.tokens.get(copy_id):
                return _answer(403, {"detail": "not your lease"})
            self.fetches.append((copy_id, name))
            data = self.served.get((copy_id, name))
            if data is None:
                return _answer(404, {"detail": "no such input"})
            return httpx.Response(
                200,
                content=_chunks(data, stall=name in self.stall),
                headers={"Content-Length": str(len(data))},
            )
        if len(parts) == 6 and parts[5] == "result":
            self.results.append((parts[4], body))
            if "next" in body and self.next_mode == "refuse":
                return _answer(400, {"detail": "ResultPost body: $: unknown field(s) 'next'"})
            if self.post_status == 410:
                return _answer(410, {"detail": "the step was already settled"})
            counted = {
                "copy": parts[4],
                "status": "counted",
                "verdict": None,
                "job_state": "queued",
                "compute_credits": 0,
            }
            if "next" in body and self.next_mode == "take":
                self.next_times.append(trio.current_time())
                counted["next"] = await self._job_or_null()
            return _answer(200, counted)
        return _answer(404, {"detail": "no route"})

    def _register(self, body: dict[str, Any]) -> httpx.Response:
        self.registers.append(body)
        if self.register_failures:
            return self.register_failures.pop(0)
        key = body.get("key")
        minted = None
        if key is None:
            key = minted = mint_key()
            self.keys[key] = f"n{len(self.keys) + 1}"
        elif key not in self.keys:
            return _answer(401, {"detail": "unknown node key"})
        answer = {
            "id": self.keys[key],
            "handle": body.get("handle") or new_handle(),
            "capabilities": body["capabilities"],
            "hardware": body["hardware"],
            "jobs_done": 0,
            "credits": 0,
            "compute_credits": 0,
            "last_seen": 0,
            "node_id": self.keys[key],
        }
        if self.probation:
            answer["probation"] = self.probation
        if minted is not None:
            answer["key"] = minted
        return _answer(200, answer)

    async def _lease(self) -> httpx.Response:
        self.lease_times.append(trio.current_time())
        if self.lease_failures:
            failure = self.lease_failures.pop(0)
            if isinstance(failure, httpx.Response):
                return failure
            if isinstance(failure, int):
                return _answer(failure, {"detail": f"status {failure}"})
            raise failure("the fake network failed")
        now_ms = round(self.wall.now() * 1000)
        if self.disabled_until_ms is not None and now_ms < self.disabled_until_ms:
            return _answer(
                403,
                {
                    "detail": "3 strikes today",
                    "reenable_at_ms": self.disabled_until_ms,
                    "reenable_at": iso_ms(self.disabled_until_ms),
                },
            )
        return _answer(200, await self._job_or_null())

    async def _job_or_null(self) -> dict[str, Any]:
        """The next offer, or ``{"job": null}`` after the hold."""
        if self.offers:
            return {"job": self.offers.pop(0)}
        await trio.sleep(self.hold)
        return {"job": None}
