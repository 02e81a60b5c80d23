"""The fake coordinator of tests/miner/fake.py with the segment-audit side of the wire contract.

Round views gain ``audit_beacon_round`` (d_audit), ``selected`` (null until ``draw_at``, d_audit
by default, then the sorted committed hotkeys of ``select``) and ``jobs``: one per selected
target, its ``challenge`` a sealed AuditChallenge (``challenge_signer``, K_coord by default) for
``segments`` and its ``serves`` stored so far. The routes check what the coordinator will:

- ``POST uploads`` with ``challenge_hash``: 404 no such challenge for the hotkey in round w,
  409 D > serve_deadline; else a grant (the PUT is the delta's);
- ``POST state``: the StateServe envelope verifies and is signer-bound; 404 unknown challenge;
  409 D > serve_deadline or a different serve for that t; 422 t not a window start, blob not
  uploaded, tensor_root or stage hashes not the blob's / the committed preimage's, bad proof;
  an identical serve again answers the same 200.

A job whose every window is served is ``done`` (its auditor found nothing: the miner's dispute
follower has nothing to wait for; tests/miner/fake_dispute.py adds real verdicts).
``events`` records ``(D, what)`` of the posts; ``fail_blob_puts`` answers that many blob PUTs
with a 503 first; ``freeze_at`` stops the beacon (D) at that round.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import attrs
import httpx
import trio

from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.envelope import NEVER, seal, verify
from hypertrain.protocol.hashes import tensor_root
from hypertrain.protocol.jcs import body_digest
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.merkle import verify_proof
from hypertrain.protocol.messages import AuditChallenge, LeafPreimage, StateServe
from hypertrain.protocol.tensorhash import th_bytes
from hypertrain.trainer.leaves import preimage_digest, stage_states
from hypertrain.trainer.state import unpack_state
from tests.miner.fake import DEADLINES, SIG, FakeCoordinator, _err, _ok

__all__ = ["AuditingCoordinator"]


@attrs.define
class AuditingCoordinator(FakeCoordinator):
    """FakeCoordinator plus audits (module docstring)."""

    select: list[str] = attrs.Factory(list)
    segments: tuple[tuple[int, int], ...] = ((0, 1), (2, 3))
    challenge_signer: Keypair | None = None
    draw_at: int | None = None
    list_serves: bool = True
    fail_blob_puts: int = 0
    freeze_at: int | None = None
    preimages: dict[tuple[int, str], list[dict[str, Any]]] = attrs.Factory(dict)
    serves: dict[tuple[str, int], dict[str, Any]] = attrs.Factory(dict)
    """(challenge_hash, t) -> the stored StateServe body."""
    state_posts: int = 0
    blob_grants: int = 0
    events: list[tuple[int, str]] = attrs.Factory(list)
    blob_grant_ids: set[str] = attrs.Factory(set)

    def now(self) -> int:
        d = super().now()
        return d if self.freeze_at is None else min(d, self.freeze_at)

    def serve_deadline(self, w: int) -> int:
        return DEADLINES[w][3] + self.manifest.verify.T.serve_deadline

    def challenge(self, w: int, target: str) -> tuple[dict[str, Any], str]:
        """The sealed AuditChallenge envelope for ``target`` in round ``w`` and its hash."""
        body = AuditChallenge(
            w=w,
            target=target,
            beacon_round=DEADLINES[w][3],
            beacon_sig_sha256=hashlib.sha256(SIG).hexdigest(),
            mode="segments",
            segments=self.segments,
            reasons=("random", "final"),
            serve_deadline=self.serve_deadline(w),
        )
        signer = self.challenge_signer or self.coord
        env = seal(signer, "AuditChallenge", self.run_id, body, NEVER).to_json()
        return env, body_digest(unstructure(body))

    def selected(self, w: int) -> list[str] | None:
        draw = DEADLINES[w][3] if self.draw_at is None else self.draw_at
        if self.now() < draw:
            return None
        return sorted(h for h in self.select if (w, h) in self.stored_commits)

    def view(self, w: int) -> dict[str, Any] | None:
        view = super().view(w)
        if view is None:
            return None
        selected = self.selected(w)
        jobs = []
        for i, target in enumerate(selected or ()):
            env, ch = self.challenge(w, target)
            serves = [
                {"t": t, "blob_sha256": body["uri"].rsplit("/", 1)[1]}
                for (h, t), body in sorted(self.serves.items())
                if h == ch
            ]
            starts = {a * self.manifest.inner.J for a, _ in self.segments}
            state = "done" if starts <= {s["t"] for s in serves} else "waiting"
            jobs.append({
                "id": f"a_{w:08x}{i:08x}", "target": target, "state": state, "result": None,
                "challenge": env, "challenge_hash": ch,
                "serves": serves if self.list_serves else [],
            })  # fmt: skip
        scoring = {"job": "j1", "challenge": "delta-loss", "state": "settled"}
        return {
            **view,
            "audit_beacon_round": DEADLINES[w][3],
            "audit_beacon_signature": SIG.hex() if selected is not None else None,
            "selected": selected,
            "jobs": [scoring, *jobs],
        }

    async def handle(self, request: httpx.Request) -> httpx.Response:
        prefix = f"/v1/runs/{self.run_id}"
        path, method = request.url.path, request.method
        if method == "POST" and path == prefix + "/state":
            await trio.lowlevel.checkpoint()
            return self.state(json.loads(request.content))
        if method == "PUT" and path.rsplit("/", 1)[1] in self.blob_grant_ids:
            await trio.lowlevel.checkpoint()
            if self.fail_blob_puts > 0:
                self.fail_blob_puts -= 1
                return _err(503, "busy")
        return await super().handle(request)

    def leaves(self, body: dict[str, Any]) -> httpx.Response:
        response = super().leaves(body)
        if response.status_code == 200:
            self.preimages[(body["w"], body["hotkey"])] = body["preimages"]
        return response

    def _find(self, w: int, hotkey: str, ch: str) -> bool:
        return hotkey in (self.selected(w) or ()) and self.challenge(w, hotkey)[1] == ch

    def uploads(self, body: dict[str, Any]) -> httpx.Response:
        if "challenge_hash" not in body:
            return super().uploads(body)
        w, hotkey, ch = body["w"], body["hotkey"], body["challenge_hash"]
        if not self._find(w, hotkey, ch):
            return _err(404, "no such challenge for the hotkey")
        if self.now() > self.serve_deadline(w):
            return _err(409, "past serve_deadline")
        self.blob_grants += 1
        self.events.append((self.now(), f"blob-grant w={w}"))
        grant = f"g{len(self.grants)}"
        self.grants[grant] = (w, hotkey, body["sha256"])
        self.blob_grant_ids.add(grant)
        return _ok({"method": "PUT", "sha256": body["sha256"], "url": f"/v1/uploads/{grant}"})

    def delta(self, raw: Any) -> httpx.Response:
        response = super().delta(raw)
        self.events.append((self.now(), f"delta w={raw['body']['w']}"))
        return response

    def state(self, raw: Any) -> httpx.Response:
        self.state_posts += 1
        serve = verify(
            raw, expected_run_id=self.run_id, signer_allowed=lambda t, _: t == "StateServe"
        ).message
        assert isinstance(serve, StateServe)
        match = [
            w for (w, h) in self.stored_commits if h == serve.hotkey
            and self._find(w, h, serve.challenge_hash)
        ]  # fmt: skip
        if not match:
            return _err(404, "no such challenge for the hotkey")
        w = match[0]
        self.events.append((self.now(), f"state w={w} t={serve.t}"))
        if self.now() > self.serve_deadline(w):
            return _err(409, "past serve_deadline")
        key = (serve.challenge_hash, serve.t)
        body = unstructure(serve)
        if key in self.serves:
            if self.serves[key] != body:
                return _err(409, "a different serve is stored for t")
            return _ok({"challenge_hash": key[0], "t": key[1], "stored": True})
        problem = self._check(w, serve)
        if problem:
            return _err(422, problem)
        self.serves[key] = body
        return _ok({"challenge_hash": key[0], "t": key[1], "stored": True})

    def _check(self, w: int, serve: StateServe) -> str:
        J = self.manifest.inner.J  # noqa: N806
        starts = {a * J: a for a, _ in self.segments}
        if serve.t not in starts:
            return "t is not the start of a challenged window"
        a = starts[serve.t]
        sha = serve.uri.rsplit("/", 1)[1]
        if sha not in self.objects:
            return "blob not uploaded"
        state = unpack_state(self.objects[sha])
        if state.m is None or state.v is None or state.step is None:
            return "blob holds no optimizer state"
        root = tensor_root(th_bytes(state.theta), th_bytes(state.m), th_bytes(state.v), state.step)
        if root != serve.tensor_root:
            return "tensor_root does not match the blob"
        preimages = [structure(LeafPreimage, p) for p in self.preimages[(w, serve.hotkey)]]
        model, layout = self.manifest.model, self.manifest.reference_spec.layout
        if stage_states(state.theta, state.m, state.v, model.n_layers, layout.pp) != (
            preimages[a].stages
        ):
            return "stage hashes do not match the committed preimage"
        commit = self.stored_commits[(w, serve.hotkey)]
        proof = [bytes.fromhex(p) for p in serve.merkle_proof_leaf_in_leaves_root]
        digest = preimage_digest(preimages[a])
        root_bytes = bytes.fromhex(commit["leaves_root"])
        if not verify_proof(digest, a, commit["n_leaves"], proof, root_bytes):
            return "bad proof"
        return ""
