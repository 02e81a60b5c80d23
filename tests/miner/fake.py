"""A fake coordinator for the miner tests: the HTTP contract the miner calls, as an
``httpx.MockTransport`` in virtual time (``D = 1 + trio.current_time() // period``).

Round 0 opens at D = 1 (start state: the deterministic init); round 1 (when ``rounds >= 2``)
opens at ``R1_OPEN`` from a published start-state blob served by ``GET /v1/objects/{sha}``.
Counters (``commit_posts``, ``stored_commits``, ``puts``...) let tests assert idempotency.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import attrs
import httpx
import numpy as np
import trio

from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.envelope import NEVER, seal, verify
from hypertrain.protocol.hashes import roster_hash
from hypertrain.protocol.jcs import body_digest
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.merkle import merkle_root_hex
from hypertrain.protocol.messages import (
    Commit,
    DeltaManifest,
    LeafPreimage,
    Receipt,
    RosterEntry,
    RoundOpen,
)
from hypertrain.protocol.tensorhash import th_hex
from hypertrain.rounds.assignment import assign, next_base
from hypertrain.trainer.leaves import preimage_digest
from hypertrain.trainer.params import init_params
from hypertrain.trainer.state import pack_state

API = "http://127.0.0.1:8000"
SIG = bytes(range(48))
ZERO = "00" * 32
# (d_open, d_assign, d_commit, d_audit, d_upload, d_final) per round
DEADLINES = {0: (1, 3, 30, 80, 60, 120), 1: (5, 7, 40, 90, 70, 130)}


@attrs.define
class FakeCoordinator:
    """The coordinator routes of the miner contract (module docstring)."""

    manifest: RunManifest
    coord: Keypair
    owner: Keypair
    roster: list[str]
    rounds: int = 1
    tamper_assignment: bool = False
    view_patch: dict[str, Any] = attrs.Factory(dict)
    """Keys merged over every round view (a test breaks or extends the answer with it)."""
    commit_posts: int = 0
    accept_posts: int = 0
    puts: int = 0
    stored_commits: dict[tuple[int, str], dict[str, Any]] = attrs.Factory(dict)
    receipts: dict[tuple[int, str], dict[str, Any]] = attrs.Factory(dict)
    status: dict[tuple[int, str], str] = attrs.Factory(dict)
    objects: dict[str, bytes] = attrs.Factory(dict)
    grants: dict[str, tuple[int, str, str]] = attrs.Factory(dict)
    state_sha: dict[int, str] = attrs.Factory(dict)
    theta_hash: dict[int, str] = attrs.Factory(dict)
    dataset: dict[str, Any] | None = None
    """The ``GET /v1/runs/{id}/dataset`` answer (None: 404, no dataset registered)."""
    object_gets: list[str] = attrs.Factory(list)

    def __attrs_post_init__(self) -> None:
        theta0 = init_params(self.manifest.model)
        self.theta_hash[0] = th_hex(theta0)
        theta1 = {n: (a * np.float32(0.5)).astype(np.float32) for n, a in theta0.items()}
        blob = pack_state(theta1)
        sha = hashlib.sha256(blob).hexdigest()
        self.objects[sha] = blob
        self.state_sha[1], self.theta_hash[1] = sha, th_hex(theta1)

    _run_id: tuple[object, str] | None = attrs.field(default=None, init=False, repr=False)

    @property
    def run_id(self) -> str:
        """The manifest's run id, computed once per manifest object: it canonicalises the
        whole manifest, and computed on each of a test's thousands of requests it was a
        quarter of the miner tests' CPU."""
        if self._run_id is None or self._run_id[0] is not self.manifest:
            self._run_id = (self.manifest, self.manifest.run_id())
        return self._run_id[1]

    def serve_dataset(self, data_dir: Path) -> None:
        """Register the build in ``data_dir`` as the run's dataset and serve its objects."""
        manifest_bytes = (data_dir / "manifest.json").read_bytes()
        record = json.loads(manifest_bytes)
        sha = hashlib.sha256(manifest_bytes).hexdigest()
        self.objects[sha] = manifest_bytes
        for i, shard_sha in enumerate(record["shard_sha256s"]):
            self.objects[shard_sha] = (data_dir / f"shard-{i:05d}.u16").read_bytes()
        self.dataset = {
            "run_id": self.run_id, "manifest_sha256": sha, "seq_len": record["seq_len"],
            "samples_per_shard": record["samples_per_shard"],
            "n_samples": record["n_samples"], "shard_sha256s": record["shard_sha256s"],
        }  # fmt: skip

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def now(self) -> int:
        return 1 + int(trio.current_time() // self.manifest.beacon.period)

    def roster_entries(self) -> tuple[RosterEntry, ...]:
        hotkeys = sorted(self.roster)
        return tuple(RosterEntry(h, i, "3f800000") for i, h in enumerate(hotkeys))

    def round_open(self, w: int) -> RoundOpen:
        entries = self.roster_entries()
        d = DEADLINES[w]
        return RoundOpen(
            w, self.theta_hash[w], self.theta_hash[w], ZERO, ZERO, entries,
            roster_hash([unstructure(e) for e in entries]), ZERO, *d,
        )  # fmt: skip

    def base(self, w: int) -> int:
        n = len(self.roster)
        return 0 if w == 0 else next_base(0, n, n, self.manifest)

    def view(self, w: int) -> dict[str, Any] | None:
        if w >= self.rounds or self.now() < DEADLINES[w][0]:
            return None
        ro = self.round_open(w)
        env = seal(self.coord, "RoundOpen", self.run_id, ro, NEVER).to_json()
        assignment = None
        if self.now() >= ro.d_assign:
            rows = assign(self.manifest, self.run_id, w, SIG, ro.roster, base=self.base(w))
            assignment = [unstructure(a) for a in rows]
            if self.tamper_assignment:
                assignment[0]["assignment_hash"] = "ff" * 32
        miners = [
            {"hotkey": e.hotkey, "status": self.status.get((w, e.hotkey), "ASSIGNED")}
            for e in ro.roster
        ]
        return {
            "run_id": self.run_id, "w": w, "state": "TRAINING", "now_round": self.now(),
            "round_open": env, "base": self.base(w), "assignment": assignment,
            "assignment_beacon_signature": SIG.hex() if assignment else None,
            "miners": miners, "state_sha256": self.state_sha.get(w), **self.view_patch,
        }  # fmt: skip

    async def handle(self, request: httpx.Request) -> httpx.Response:
        await trio.lowlevel.checkpoint()
        path, method = request.url.path, request.method
        prefix = f"/v1/runs/{self.run_id}"
        if method == "GET" and path == "/v1/runs":
            return _ok({"runs": [{"run_id": self.run_id, "status": "running"}]})
        if method == "GET" and path == prefix:
            env = seal(self.owner, "RunManifest", self.run_id, self.manifest, NEVER)
            return _ok({"run_id": self.run_id, "status": "running",
                        "manifest_envelope": env.to_json(), "rounds": [{"w": 0}]})  # fmt: skip
        if method == "GET" and path == prefix + "/dataset":
            if self.dataset is None:
                return _err(404, "no dataset registered for this run")
            return _ok(self.dataset)
        if method == "GET" and path.startswith(prefix + "/rounds/"):
            view = self.view(int(path.rsplit("/", 1)[1]))
            return _ok(view) if view is not None else _err(404, "no such round")
        if method == "GET" and path.startswith("/v1/objects/"):
            sha = path.rsplit("/", 1)[1]
            self.object_gets.append(sha)
            if request.headers.get("X-HT-Run") != self.run_id or sha not in self.objects:
                return _err(404, "unknown object")
            return httpx.Response(200, content=self.objects[sha])
        if method == "PUT" and path.startswith("/v1/uploads/"):
            return self.put(path.rsplit("/", 1)[1], request.content)
        body = json.loads(request.content) if request.content else None
        routes: dict[str, Any] = {
            "accept": self.accept, "commit": self.commit, "leaves": self.leaves,
            "uploads": self.uploads, "delta": self.delta,
        }  # fmt: skip
        name = path.removeprefix(prefix + "/")
        if method == "POST" and name in routes:
            response: httpx.Response = routes[name](body)
            return response
        return _err(404, f"no route {method} {path}")

    def _verify(self, raw: Any, kind: str) -> Any:
        return verify(raw, expected_run_id=self.run_id, signer_allowed=lambda t, _: t == kind)

    def accept(self, raw: Any) -> httpx.Response:
        self.accept_posts += 1
        msg = self._verify(raw, "Accept").message
        d = DEADLINES[msg.w]
        if not d[1] <= self.now() < d[2]:
            return _err(409, "outside the accept window")
        if self.status.get((msg.w, msg.hotkey), "ASSIGNED") != "ASSIGNED":
            return _err(409, "not ASSIGNED")
        self.status[(msg.w, msg.hotkey)] = "ACCEPTED"
        return _ok({"w": msg.w, "hotkey": msg.hotkey, "status": "ACCEPTED", "slot": 0})

    def commit(self, raw: Any) -> httpx.Response:
        self.commit_posts += 1
        msg: Commit = self._verify(raw, "Commit").message
        key = (msg.w, msg.hotkey)
        if key in self.stored_commits:
            return _err(409, "already committed", receipt=self.receipts[key])
        if self.status.get(key) != "ACCEPTED":
            return _err(409, "not ACCEPTED")
        receipt = Receipt(msg.w, body_digest(raw["body"]), self.now())
        self.stored_commits[key] = raw["body"]
        self.receipts[key] = seal(self.coord, "Receipt", self.run_id, receipt, NEVER).to_json()
        self.status[key] = "COMMITTED"
        return _ok({"status": "COMMITTED", "receipt": self.receipts[key]})

    def leaves(self, body: dict[str, Any]) -> httpx.Response:
        key = (body["w"], body["hotkey"])
        digests = [preimage_digest(structure(LeafPreimage, p)) for p in body["preimages"]]
        root = merkle_root_hex(digests)
        if key not in self.stored_commits or self.stored_commits[key]["leaves_root"] != root:
            return _err(422, "leaves_root mismatch")
        return _ok({"w": key[0], "hotkey": key[1], "leaves_root": root})

    def uploads(self, body: dict[str, Any]) -> httpx.Response:
        key = (body["w"], body["hotkey"])
        if key not in self.stored_commits:
            return _err(409, "not COMMITTED")
        if self.stored_commits[key]["delta_hash"] != body["sha256"]:
            return _err(422, "sha256 != delta_hash")
        grant = f"g{len(self.grants)}"
        self.grants[grant] = (key[0], key[1], body["sha256"])
        return _ok({"method": "PUT", "sha256": body["sha256"], "url": f"/v1/uploads/{grant}"})

    def put(self, grant: str, data: bytes) -> httpx.Response:
        self.puts += 1
        _, _, sha = self.grants[grant]
        if hashlib.sha256(data).hexdigest() != sha:
            return _err(422, "payload does not hash to the grant")
        self.objects[sha] = data
        return _ok({"sha256": sha, "size": len(data)})

    def delta(self, raw: Any) -> httpx.Response:
        msg: DeltaManifest = self._verify(raw, "DeltaManifest").message
        key = (msg.w, msg.hotkey)
        commit = self.stored_commits.get(key)
        if commit is None or msg.delta_hash not in self.objects:
            return _err(409, "not COMMITTED or not uploaded")
        if commit["delta_hash"] != msg.delta_hash or commit["delta_bytes"] != msg.size:
            return _err(422, "hash/size != Commit")
        self.status[key] = "UPLOADED"
        return _ok({"w": msg.w, "hotkey": msg.hotkey, "status": "UPLOADED"})


def _ok(body: object) -> httpx.Response:
    return httpx.Response(200, json=body)


def _err(status: int, detail: str, **extra: object) -> httpx.Response:
    return httpx.Response(status, json={"detail": detail, **extra})
