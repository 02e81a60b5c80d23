"""The fake auditing coordinator of tests/miner/fake_audit.py with an honest auditor and the
dispute side of the wire contract (notes/disputes-wire.md), in virtual time.

The auditor (``auditor``, one of ``manifest.auditors``) replays a selected miner's round
honestly as soon as what it needs is there (segments: every window's serve; full mode, the
challenge ``mode``: the posted leaves): its verdict is MATCH or MISMATCH (``first_bad_leaf``,
``recomputed_leaves_root``), sealed and listed in the round view's ``miners[].verdict``, the
miner's status follows and its job is ``done``. Routes:

- ``POST rerun``: the signature over ``rerun_claim_bytes``, status MISMATCH (409 otherwise or
  when rerun already), classified with the coordinator's own ``classify`` over its
  ``compared_leaves``; TRANSIENT sets the status;
- ``POST dispute``: a Dispute envelope of the miner, its ``verdict_hash`` the verdict's (404),
  ``contest`` only after a CONTEST rerun, once (409); ``accept`` ends at once (miner loses);
- a contested dispute bisects with ``arity``: at each new stage the auditor publishes its
  honest :class:`~hypertrain.trainer.recompute.Recompute` hashes at once, so the stage awaits
  the miner; ``POST bisect`` checks the stage (409), the signer and ``party`` (403), then
  :func:`~hypertrain.rounds.bisection.advance`; a referee case waits ``referee_rounds`` beacon
  rounds (None: forever) and is resolved from the honest hash (the miner's differs: it loses);
  an ``auditor_silent`` auditor never publishes (and nothing times it out here);
  an ``accept`` is ``accepted`` at once, with no outcome (as the coordinator answers);
- ``GET disputes[?party=]`` and ``GET disputes/{id}``.

``posts`` counts the dispute routes' POSTs by name.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import attrs
import httpx

from hypertrain.coordinator.flows.rerun import classify, compared_leaves
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.envelope import seal
from hypertrain.protocol.hashes import rerun_claim_bytes
from hypertrain.protocol.jcs import body_digest
from hypertrain.protocol.keys import Keypair, verify_signature
from hypertrain.protocol.merkle import merkle_root_hex
from hypertrain.protocol.messages import (
    AuditChallenge,
    Bisect,
    Dispute,
    LeafPreimage,
    ReplayEnv,
    ReplayVerdict,
)
from hypertrain.protocol.validators import ss58_public_key
from hypertrain.rounds import bisection
from hypertrain.rounds.assignment import assign
from hypertrain.trainer.leaves import preimage_digest
from hypertrain.trainer.loop import Moments, StateAt, round_start, train_round
from hypertrain.trainer.params import init_params
from hypertrain.trainer.recompute import Recompute
from hypertrain.trainer.replay import replay
from hypertrain.trainer.state import unpack_state
from tests.miner.fake import SIG, _err, _ok
from tests.miner.fake_audit import AuditingCoordinator

__all__ = ["DisputingCoordinator"]

REPLAY_ENV = {
    "image_digest": "sha256:" + "00" * 32, "driver": "cpu",
    "gpu_uuid_sha256": "00" * 32, "sm_count": 1,
}  # fmt: skip


@attrs.define
class _Dispute:
    id: str
    w: int
    miner: str
    verdict_hash: str
    first_bad_leaf: int
    action: str
    opened_round: int
    honest: Recompute | None
    state: str = "open"
    stage: bisection.Stage | None = None
    stage_round: int = 0
    auditor_hashes: list[str] = attrs.Factory(list)
    awaiting: list[str] = attrs.Factory(list)
    referee: bisection.RefereeCase | None = None
    referee_round: int = 0
    outcome: dict[str, Any] | None = None
    bisects: list[dict[str, Any]] = attrs.Factory(list)


@attrs.define
class DisputingCoordinator(AuditingCoordinator):
    """AuditingCoordinator plus an honest auditor and disputes (module docstring)."""

    auditor: Keypair | None = None
    samples: Callable[[Any], Any] | None = None
    mode: str = "segments"
    arity: int = 2
    referee_rounds: int | None = 2
    auditor_silent: bool = False
    """The auditor never publishes a stage (and nothing times it out here)."""
    forgive: int = 1
    verdicts: dict[tuple[int, str], dict[str, Any]] = attrs.Factory(dict)
    reruns: dict[tuple[int, str], str] = attrs.Factory(dict)
    disputes: dict[str, _Dispute] = attrs.Factory(dict)
    posts: Counter[str] = attrs.Factory(Counter)
    unavailable: bool = False
    """Every dispute view answers 503."""
    drop_answers: set[str] = attrs.Factory(set)
    """Routes whose next answer is lost on the way back (handled, then a ReadError)."""

    # -- the audit -----------------------------------------------------------------------------

    def challenge(self, w: int, target: str) -> tuple[dict[str, Any], str]:
        env, ch = super().challenge(w, target)
        if self.mode == "segments":
            return env, ch
        body = structure(AuditChallenge, env["body"])
        body = attrs.evolve(body, mode="full", segments=())
        signer = self.challenge_signer or self.coord
        env = seal(signer, "AuditChallenge", self.run_id, body, 2**53 - 1).to_json()
        return env, body_digest(unstructure(body))

    def _sample_ids(self, w: int, hotkey: str) -> list[int]:
        ro = self.round_open(w)
        rows = assign(self.manifest, self.run_id, w, SIG, ro.roster, base=self.base(w))
        return list(next(a for a in rows if a.hotkey == hotkey).samples)

    def _digests(self, w: int, hotkey: str) -> list[bytes]:
        return [preimage_digest(structure(LeafPreimage, p)) for p in self.preimages[(w, hotkey)]]

    def _served_state(self, ch: str, a: int) -> StateAt | None:
        body = self.serves.get((ch, a * self.manifest.inner.J))
        if body is None:
            return None
        state = unpack_state(self.objects[body["uri"].rsplit("/", 1)[1]])
        assert state.m is not None
        assert state.v is not None
        assert state.step is not None
        opt = Moments(m=state.m, v=state.v, step=state.step)
        return StateAt(t=a * self.manifest.inner.J, theta=state.theta, opt=opt)

    def _audit(self, w: int, hotkey: str) -> None:
        """The honest auditor's verdict, once it can replay (module docstring)."""
        if (w, hotkey) in self.verdicts or (w, hotkey) not in self.preimages:
            return
        if hotkey not in (self.selected(w) or ()):
            return
        env, ch = self.challenge(w, hotkey)
        challenge = structure(AuditChallenge, env["body"])
        ids, committed = self._sample_ids(w, hotkey), self._digests(w, hotkey)
        assert self.samples is not None
        rebuilt: list[bytes] = []
        if challenge.mode == "full":
            theta = init_params(self.manifest.model)
            result = train_round(self.manifest, self.run_id, w, theta, ids, self.samples)
            rebuilt = [leaf.digest for leaf in result.leaves]
        else:
            for a, b in challenge.segments:
                state = self._served_state(ch, a)
                if state is None:
                    return  # not served yet
                segment = replay(self.manifest, self.run_id, w, state, a, b, ids, self.samples)
                rebuilt += segment.digests
        compared = compared_leaves(challenge, len(committed))
        bad = [k for k, d in zip(compared, rebuilt, strict=True) if committed[k] != d]
        body = ReplayVerdict(
            challenge_hash=ch,
            first_bad_leaf=min(bad) if bad else None,
            result="MISMATCH" if bad else "MATCH",
            recomputed_leaves_root=merkle_root_hex(rebuilt),
            replay_env=structure(ReplayEnv, REPLAY_ENV),
        )
        assert self.auditor is not None
        exp = challenge.serve_deadline + 1200
        self.verdicts[(w, hotkey)] = seal(self.auditor, "ReplayVerdict", self.run_id, body, exp)
        self.status[(w, hotkey)] = body.result

    def view(self, w: int) -> dict[str, Any] | None:
        for hotkey in self.selected(w) or ():
            self._audit(w, hotkey)
        view = super().view(w)
        if view is None:
            return None
        for miner in view["miners"]:
            verdict = self.verdicts.get((w, miner["hotkey"]))
            miner["verdict"] = None if verdict is None else verdict.to_json()
        for job in view["jobs"]:
            if (w, job.get("target")) in self.verdicts:
                job["state"] = "done"
        return view

    # -- the routes ----------------------------------------------------------------------------

    async def handle(self, request: httpx.Request) -> httpx.Response:
        prefix = f"/v1/runs/{self.run_id}"
        path, method = request.url.path, request.method
        name = path.removeprefix(prefix + "/")
        if method == "POST" and name in ("rerun", "dispute", "bisect"):
            self.posts[name] += 1
            body = json.loads(request.content)
            route = {"rerun": self.rerun, "dispute": self.dispute, "bisect": self.bisect}[name]
            response: httpx.Response = route(body)
            if name in self.drop_answers:
                self.drop_answers.discard(name)
                raise httpx.ReadError("the answer was lost", request=request)
            return response
        if method == "GET" and name == "disputes":
            party = request.url.params.get("party")
            views = [self._dispute_json(d) for d in self.disputes.values()]
            return _ok({"run_id": self.run_id, "disputes": [
                v for v in views if party in (None, v["miner"], v["auditor"])
            ]})  # fmt: skip
        if method == "GET" and name.startswith("disputes") and self.unavailable:
            return _err(503, "busy")
        if method == "GET" and name.startswith("disputes/"):
            found = self.disputes.get(name.split("/", 1)[1])
            return _ok(self._dispute_json(found)) if found else _err(404, "no such dispute")
        return await super().handle(request)

    def rerun(self, body: dict[str, Any]) -> httpx.Response:
        w, hotkey, root = body["w"], body["hotkey"], body["leaves_root"]
        claim = rerun_claim_bytes(self.run_id, w, hotkey, root)
        if not verify_signature(ss58_public_key(hotkey), claim, bytes.fromhex(body["sig"])):
            return _err(401, "sig does not verify")
        if self.status.get((w, hotkey)) != "MISMATCH":
            return _err(409, "only MISMATCH reruns")
        if (w, hotkey) in self.reruns:
            return _err(409, "already rerun")
        verdict = structure(ReplayVerdict, self.verdicts[(w, hotkey)].body)
        env, _ = self.challenge(w, hotkey)
        digests = self._digests(w, hotkey)
        leaves = compared_leaves(structure(AuditChallenge, env["body"]), len(digests))
        result = classify(
            root,
            verdict.recomputed_leaves_root,
            merkle_root_hex([digests[k] for k in leaves]),
            transients_this_epoch=list(self.reruns.values()).count("TRANSIENT"),
            forgive_per_epoch=self.forgive,
        )
        self.reruns[(w, hotkey)] = result
        if result == "TRANSIENT":
            self.status[(w, hotkey)] = "TRANSIENT"
        return _ok({"w": w, "hotkey": hotkey, "classification": result})

    def dispute(self, raw: dict[str, Any]) -> httpx.Response:
        msg: Dispute = self._verify(raw, "Dispute").message
        assert raw["signer"] == msg.hotkey
        found = [
            (w, h) for (w, h), v in self.verdicts.items()
            if h == msg.hotkey and body_digest(v.body) == msg.verdict_hash
        ]  # fmt: skip
        if not found:
            return _err(404, "no such verdict of this hotkey")
        w, hotkey = found[0]
        if any(d.verdict_hash == msg.verdict_hash for d in self.disputes.values()):
            return _err(409, "already disputed")
        verdict = structure(ReplayVerdict, self.verdicts[(w, hotkey)].body)
        if msg.action == "contest" and self.reruns.get((w, hotkey)) != "CONTEST":
            return _err(409, "contest without a CONTEST rerun")
        dispute_id = body_digest({"dispute": msg.verdict_hash})
        k = verdict.first_bad_leaf or 0
        d = _Dispute(dispute_id, w, hotkey, msg.verdict_hash, k, msg.action, self.now(), None)
        if msg.action == "accept":
            d.state = "accepted"
            d.outcome = {
                "loser": hotkey,
                "loser_role": "miner",
                "cause": "accepted",
                "op_spec": None,
                "resolved_round": self.now(),
                "reason": "accepted",
            }
        else:
            d.honest = self._honest(w, hotkey, k)
            inner, n_layers = self.manifest.inner, self.manifest.model.n_layers
            self._open_stage(d, bisection.first_stage(k, inner.J, n_layers, self.arity))
        self.disputes[dispute_id] = d
        return _ok({"dispute_id": dispute_id, "state": d.state})

    def _honest(self, w: int, hotkey: str, k: int) -> Recompute:
        env, ch = self.challenge(w, hotkey)
        challenge = structure(AuditChallenge, env["body"])
        ids = self._sample_ids(w, hotkey)
        if challenge.mode == "full":
            start = round_start(self.manifest, init_params(self.manifest.model), None)
        else:
            a = next(a for a, b in challenge.segments if a < k <= b)
            served = self._served_state(ch, a)
            assert served is not None
            start = served
        return Recompute(self.manifest, self.run_id, w, ids, self.samples, start)

    def _open_stage(self, d: _Dispute, stage: bisection.Stage) -> None:
        assert d.honest is not None
        d.stage, d.stage_round, d.awaiting = stage, self.now(), ["miner"]
        if self.auditor_silent:
            d.awaiting.append("auditor")
            return
        d.auditor_hashes = d.honest.hashes(stage)
        assert self.auditor is not None
        d.bisects.append(
            self._bisect_json(d, stage, "auditor", self.auditor.ss58, d.auditor_hashes)
        )

    def _bisect_json(
        self, d: _Dispute, stage: bisection.Stage, role: str, party: str, hashes: list[str]
    ) -> dict[str, Any]:
        return {
            "seq": len(d.bisects), "party": party, "role": role, "level": stage.level,
            "t": stage.t, "layer": stage.layer, "interval": [stage.a, stage.b], "N": stage.n,
            "hashes": hashes, "received_round": self.now(),
        }  # fmt: skip

    def bisect(self, raw: dict[str, Any]) -> httpx.Response:
        msg: Bisect = self._verify(raw, "Bisect").message
        d = self.disputes.get(msg.dispute_id)
        if d is None:
            return _err(404, "no such dispute")
        if raw["signer"] != msg.party or msg.party != d.miner:
            return _err(403, "not a party of the dispute")
        stage = d.stage
        if d.state != "open" or stage is None or "miner" not in d.awaiting:
            return _err(409, "not waiting for the miner")
        if (msg.level, msg.interval, msg.N) != (stage.level, (stage.a, stage.b), stage.n):
            return _err(409, "not the current stage")
        if self.now() > d.stage_round + self.manifest.verify.T.dispute_per_level:
            return _err(409, "past the stage's deadline")
        d.bisects.append(self._bisect_json(d, stage, "miner", msg.party, list(msg.hashes)))
        if self.auditor_silent:
            d.awaiting.remove("miner")
            return _ok({"dispute_id": d.id, "seq": len(d.bisects) - 1, "state": d.state,
                        "stage": self._stage_json(d), "referee": None})  # fmt: skip
        n_layers = self.manifest.model.n_layers
        nxt = bisection.advance(
            n_layers, stage, list(msg.hashes), d.auditor_hashes, self.arity,
            first_bad_leaf=d.first_bad_leaf, agreed_step=None,
        )  # fmt: skip
        if isinstance(nxt, bisection.Stage):
            self._open_stage(d, nxt)
        else:
            d.stage, d.awaiting, d.referee, d.referee_round = None, [], nxt, self.now()
        return _ok({"dispute_id": d.id, "seq": len(d.bisects) - 1, "state": d.state,
                    "stage": self._stage_json(d), "referee": self._referee_json(d)})  # fmt: skip

    def _resolve(self, d: _Dispute) -> None:
        case = d.referee
        if case is None or d.state != "open" or self.referee_rounds is None:
            return
        if self.now() < d.referee_round + self.referee_rounds:
            return
        assert d.honest is not None
        assert self.auditor is not None
        honest = d.honest.point_hash(case.point) if case.kind != "leaf" else None
        miner_lost = case.kind == "leaf" or case.miner_hash != honest
        d.state = "resolved"
        d.outcome = {
            "loser": d.miner if miner_lost else self.auditor.ss58,
            "loser_role": "miner" if miner_lost else "auditor", "cause": "referee",
            "op_spec": case.op_spec, "inputs_hash": "00" * 32, "output_hash": honest,
            "referee": None, "resolved_round": self.now(), "reason": "fake referee",
        }  # fmt: skip
        d.referee = None

    def _stage_json(self, d: _Dispute) -> dict[str, Any] | None:
        s = d.stage
        if s is None:
            return None
        return {
            "level": s.level, "t": s.t, "layer": s.layer, "interval": [s.a, s.b], "N": s.n,
            "points": bisection.points(s.a, s.b, s.n),
            "deadline_round": d.stage_round + self.manifest.verify.T.dispute_per_level,
            "awaiting": list(d.awaiting),
        }  # fmt: skip

    def _referee_json(self, d: _Dispute) -> dict[str, Any] | None:
        case = d.referee
        return None if case is None else {"kind": case.kind, "op_spec": case.op_spec}

    def _dispute_json(self, d: _Dispute) -> dict[str, Any]:
        self._resolve(d)
        assert self.auditor is not None
        return {
            "dispute_id": d.id, "run_id": self.run_id, "w": d.w, "miner": d.miner,
            "auditor": self.auditor.ss58, "job_id": "a_0", "challenge_hash": "00" * 32,
            "verdict_hash": d.verdict_hash, "first_bad_leaf": d.first_bad_leaf,
            "action": d.action, "state": d.state, "opened_round": d.opened_round,
            "stage": self._stage_json(d), "referee": self._referee_json(d),
            "outcome": d.outcome, "bisects": list(d.bisects),
        }  # fmt: skip
