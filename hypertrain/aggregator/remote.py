"""``hypertrain aggregate``: the aggregator run from outside the daemon (issue 7, spec 7 and 9).

For a daemon started with ``aggregator = "external"``, an operator on another machine holding
K_coord and the admin token merges each round with the same code as the daemon's own service
(:func:`~hypertrain.aggregator.step.compute_step`), so the objects, the tape and RoundOpen(w + 1)
are byte for byte what the daemon would have produced. One pass of :meth:`RemoteAggregator.
merge_next`:

1. read the run view; check the key file is the manifest's ``coord_pubkey``
   (:class:`~hypertrain.aggregator.remote_plan.KeyMismatch`); take the newest round ``w``;
   wait, with bounded polls of ``GET /v1/beacon/latest``, until ``D >= d_upload(w)`` (a paused
   run or a run without rounds is polled every ``idle_poll`` seconds); past the caller's
   ``give_up_at`` (Trio time; ``--once``) the wait ends with :class:`NotDue`;
2. ``GET .../rounds/{w}/inputs``; the previous OuterState is the genesis state for ``w = 0``,
   else the one this aggregator stored in its state directory
   (:class:`~hypertrain.aggregator.statedir.StateDir`), else the ``out_state`` named by the
   daemon's tape of round ``w - 1`` (when the daemon merged it); its ``TH(theta)`` must be
   ``RoundOpen(w).theta_hash`` (:class:`StateUnknown` otherwise). Deltas are fetched with
   ``GET /v1/objects/{delta_hash}``;
3. compute the step, keep its objects and record in the state directory, ``PUT`` every object
   to ``/v1/aggregator/objects/{sha256}``;
4. unless round ``w`` is the run's last (``total_rounds``): seal RoundOpen(w + 1) from a fresh
   ``next_round_template`` and the new state's hashes, ``POST .../aggregate`` (a 409 refusing
   ``d_open`` because D moved on is retried with a fresh template), then publish the start state
   ``PUT .../rounds/{w + 1}/state``. When round ``w + 1`` is already open: with our
   ``theta_hash`` (an earlier run of this command stopped half-way) its state is still
   published; with another one (someone else merged) nothing is published and the report says so;
5. record the tape with ``PUT .../rounds/{w}/tape``
   (:mod:`hypertrain.coordinator.flows.taperecord`), also for the last round, so the daemon
   shows the merge and evaluates its held-out loss.

It finalises too (:mod:`.remote_final`: in order, every round whose ``/inputs`` offers a
``finalize_template``, sealed with K_coord and posted to ``.../rounds/{w}/finalize``): while
waiting for ``d_upload`` (waking at the ``d_final`` of a round waiting for it, if earlier), while
the run is paused, after each merge in :meth:`RemoteAggregator.run`, and, once the run's last
round is merged, until every round is final (:meth:`RemoteAggregator.wait_final`). With
``RemoteConfig.finalize`` off it never does.

Idempotent after a crash anywhere: the objects are content addressed, the start state is
write-once, each pass first makes sure the newest round's start state is published when
this aggregator's record of the previous round has its ``theta_hash``, and finality is read
from the server each time. Every wait is bounded: HTTP timeouts and retries in
:mod:`.remote_client`, sleeps of at most ``max_poll`` (or ``idle_poll``) seconds; a round that
never becomes final (a paused run's, one whose audits never end) is polled until cancelled.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from hypertrain.aggregator.outerstate import unpack_outer
from hypertrain.aggregator.remote_client import AggregatorClient, Refused, RemoteError
from hypertrain.aggregator.remote_final import Pending, RemoteFinality
from hypertrain.aggregator.remote_plan import (
    MergeReport,
    Report,
    RunFacts,
    check_coord_key,
    merge_inputs,
    round_open_body,
    round_open_of,
    run_facts,
)
from hypertrain.aggregator.rollback import RollbackInputs, compute_rollback, seal_rollback
from hypertrain.aggregator.statedir import StateDir
from hypertrain.aggregator.step import Step, compute_step
from hypertrain.aggregator.tape import parse_signed_tape, tape_bytes, verify_tape
from hypertrain.protocol.envelope import NEVER, seal
from hypertrain.protocol.keys import Keypair
from nurseries import run_inline

__all__ = ["OPEN_TRIES", "NotDue", "RemoteAggregator", "RemoteConfig", "StateUnknown"]

log = logging.getLogger(__name__)

OPEN_TRIES: Final = 3
"""How many times RoundOpen(w + 1) is posted when D moves past the template's ``d_open``."""


class StateUnknown(RemoteError):
    """The previous round's OuterState is neither in the state directory nor the daemon's."""


class NotDue(RemoteError):
    """The newest round did not become due before the caller's bound (a paused run, a run
    without rounds, D short of ``d_upload``)."""


@attrs.frozen
class RemoteConfig:
    """What the aggregator is told: the run, K_coord, the state directory and its polls."""

    run_id: str
    coord: Keypair
    state_dir: Path
    max_poll: float = 30.0
    """The longest sleep between two polls of D while waiting for ``d_upload`` or ``d_final``;
    also how long a round held back by something else (audits, disputes) waits to be asked
    about again."""
    idle_poll: float = 10.0
    """Seconds between polls of a paused run or one with no open round."""
    finalize: bool = True
    """Finalise the merged rounds too (module doc); off: merge only."""


class RemoteAggregator:
    """The loop of module doc; ``report`` gets one :class:`MergeReport` per merged round and
    one :class:`~hypertrain.aggregator.remote_plan.FinalReport` per finalised round."""

    def __init__(
        self,
        config: RemoteConfig,
        client: AggregatorClient,
        report: Callable[[Report], None],
    ) -> None:
        self.config = config
        self.client = client
        self.report = report
        self.state = StateDir(config.state_dir)
        self.finality = RemoteFinality(config.coord, client, report, max_poll=config.max_poll)
        self._published: set[int] = set()

    async def facts(self) -> RunFacts:
        """The run view's facts; KeyMismatch unless our key is the run's K_coord."""
        run = run_facts(await self.client.run_view(self.config.run_id))
        check_coord_key(run.manifest, self.config.coord)
        return run

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Merge every round as it becomes due and finalise each once the server can; returns
        once the run's last round is merged and every round is final."""
        await self.facts()
        task_status.started()
        while await self.merge_next() is not None:
            await self.finalize_due()
        await self.wait_final()

    async def finalize_due(self) -> Pending | None:
        """Finalise, in order, every round the server accepts now; None once every opened
        round is final (or finalising is off), else the first one that is not."""
        return await self._finalize_due(await self.facts())

    async def wait_final(self) -> None:
        """Finalise until every opened round is final, waiting for each round as the server
        says (bounded polls of D; forever while a round cannot become final)."""
        while True:
            run = await self.facts()
            pending = await self._finalize_due(run)
            if pending is None:
                return
            await self._wait_round(run, pending.retry_at)

    async def _finalize_due(self, run: RunFacts) -> Pending | None:
        if not self.config.finalize:
            return None
        return await self.finality.finalize_due(run)

    async def merge_next(self, *, give_up_at: float = math.inf) -> MergeReport | None:
        """Wait until the newest round is due and merge it (module doc), finalising what the
        server accepts while waiting; None when the run's last round is merged already.

        :class:`NotDue` when the wait reaches ``give_up_at`` (Trio time); a merge that has
        begun is never cut short by it."""
        run_id = self.config.run_id
        while True:
            run = await self.facts()
            w = run.newest_round
            if w is None or not run.running:
                await self._finalize_due(run)
                why = "the run is paused" if w is not None else "the run has no open round"
                await _pause(self.config.idle_poll, give_up_at, why)
                continue
            await self._ensure_published(run, w)
            merged = self.state.merged(run_id, w)
            if run.is_last(w) and merged is not None:
                await self.client.record_tape(run_id, w, merged.tape_key)
                return None
            inputs = await self.client.inputs(run_id, w)
            d_upload = int(round_open_of(inputs)["d_upload"])
            if int(inputs["now_round"]) < d_upload:
                pending = await self._finalize_due(run)
                target = d_upload if pending is None else min(d_upload, pending.retry_at)
                await self._wait_round(run, target, give_up_at)
                continue
            return await self._merge(run, w, inputs)

    async def _wait_round(self, run: RunFacts, target: int, give_up_at: float = math.inf) -> None:
        """Poll D until it reaches ``target`` (each sleep at most ``max_poll``); NotDue at
        ``give_up_at``."""
        period = float(run.manifest.beacon.period)
        while True:
            now = await self.client.beacon_latest()
            if now >= target:
                return
            # Polling a remote clock: there is no local event to wait on.
            sleep = min(max((target - now) * period, 0.5), self.config.max_poll)
            await _pause(sleep, give_up_at, f"D={now} is short of round {target}")

    async def _fetch(self, key: str) -> bytes:
        local = self.state.get(key)
        return local if local is not None else await self.client.get_object(key)

    async def _prev_state_key(self, run: RunFacts, w: int, theta_hash: str) -> str | None:
        if w == 0:
            return None
        merged = self.state.merged(run.run_id, w - 1)
        if merged is not None and merged.theta_hash == theta_hash:
            return merged.out_state
        view = await self.client.round_view(run.run_id, w - 1)
        tape_key = None if view is None else view.get("tape_key")
        if tape_key is not None:
            signed = parse_signed_tape(await self.client.get_object(str(tape_key)))
            verify_tape(signed, coord_ss58=run.manifest.coord_pubkey)
            blob = await self.client.get_object(signed.body.out_state)
            if unpack_outer(blob).theta_hash() == theta_hash:
                self.state.put(tape_bytes(signed))
                return self.state.put(blob)
        raise StateUnknown(
            f"the OuterState of round {w - 1} (TH(theta) {theta_hash}) is unknown: it is not in"
            f" {self.config.state_dir} and the daemon has no tape of round {w - 1}"
        )

    async def _merge(self, run: RunFacts, w: int, inputs: Mapping[str, Any]) -> MergeReport:
        theta_hash = str(round_open_of(inputs)["theta_hash"])
        prev_key = await self._prev_state_key(run, w, theta_hash)
        step = await compute_step(
            self._fetch, merge_inputs(run, inputs, prev_key), self.config.coord, run_inline
        )
        self.state.save(step)
        for blob in step.objects:
            await self.client.put_object(blob)
        note = None
        if w > 0:
            corrected = await self._rollback(run, step)
            if corrected is not step:
                note = f"rolled back round {w - 1} and round {w}: round {w + 1} opens corrected"
            step = corrected
        if run.is_last(w):
            report = MergeReport.of(step, None, note or f"round {w} is the run's last round")
        else:
            report = await self._open_next(run, step)
            if note is not None and report.note is None:
                report = attrs.evolve(report, note=note)
        if report.opened is not None or run.is_last(w):
            await self.client.record_tape(run.run_id, w, step.tape_key)
        self.report(report)
        return report

    async def _rollback(self, run: RunFacts, step: Step) -> Step:
        """Roll round ``w - 1`` back when a miner it merged is faulted (the daemon's rule,
        :mod:`hypertrain.coordinator.flows.rollback`): recompute rounds ``w - 1`` and ``w``
        without it, upload the objects, post the K_coord Rollback, and return the corrected
        step of round ``w`` (round ``w + 1`` opens from it); ``step`` itself when there is
        nothing to roll back. A rollback the daemon recorded already (this command stopped
        after posting it) is recomputed to the same bytes, not posted again."""
        run_id, w = run.run_id, step.w - 1
        inputs = await self.client.inputs(run_id, w)
        recorded = inputs.get("rollback")
        if recorded is not None:
            body = recorded["envelope"]["body"]
            faulted = tuple(str(h) for h in body["excluded"])
            causes = tuple(str(c) for c in body["cause_hashes"])
            old_key = str(recorded["old_tapes"][0])
        else:
            listed = inputs.get("rollback_causes") or []
            if not listed:
                return step
            faulted = tuple(sorted(str(c["hotkey"]) for c in listed))
            causes = tuple(sorted(str(c["verdict_hash"]) for c in listed))
            view = await self.client.round_view(run_id, w)
            old_key = str((view or {}).get("tape_key"))
        tape_w = parse_signed_tape(await self._fetch(old_key))
        tape_w1 = parse_signed_tape(step.objects[-1])
        request = RollbackInputs(run.manifest, tape_w, tape_w1, faulted, causes)
        rollback = await compute_rollback(self._fetch, request, self.config.coord, run_inline)
        for blob in rollback.objects:
            self.state.put(blob)
            await self.client.put_object(blob)
        if recorded is None:
            envelope = seal_rollback(self.config.coord, run_id, rollback.body).to_json()
            posted = {
                "rollback": envelope,
                "old_tape_w1": step.tape_key,
                "new_tapes": list(rollback.tape_keys),
            }
            status, detail = await self.client.rollback(run_id, w, posted)
            if status == 409:
                again = (await self.client.inputs(run_id, w)).get("rollback")
                if again is None or list(again["new_tapes"]) != list(rollback.tape_keys):
                    raise Refused(
                        "POST", f"/v1/aggregator/runs/{run_id}/rounds/{w}/rollback", 409, detail
                    )
            log.info("run %s: rolled back rounds %d and %d without %s", run_id, w, w + 1, faulted)
        self.state.save(rollback.steps[1])
        return rollback.steps[1]

    async def _open_next(self, run: RunFacts, step: Step) -> MergeReport:
        run_id, w = run.run_id, step.w
        for _ in range(OPEN_TRIES):
            template = (await self.client.inputs(run_id, w))["next_round_template"]
            if template is None:
                return await self._already_open(run_id, step)
            body = round_open_body(template, step)
            envelope = seal(self.config.coord, "RoundOpen", run_id, body, NEVER).to_json()
            status, answer = await self.client.aggregate(run_id, w, envelope)
            if status != 409:
                await self.client.publish_state(run_id, w + 1, step.theta_start_sha256)
                self._published.add(w + 1)
                return MergeReport.of(step, w + 1)
            if await self.client.round_view(run_id, w + 1) is not None:
                return await self._already_open(run_id, step)
            detail = str(answer.get("detail"))
            if "d_open" not in detail:
                raise Refused(
                    "POST", f"/v1/aggregator/runs/{run_id}/rounds/{w}/aggregate", 409, detail
                )
            log.info("round %d: %s; posting a fresh template", w, detail)
        raise Refused(
            "POST",
            f"/v1/aggregator/runs/{run_id}/rounds/{w}/aggregate",
            409,
            f"d_open was before D {OPEN_TRIES} times in a row",
        )

    async def _already_open(self, run_id: str, step: Step) -> MergeReport:
        w = step.w
        view = await self.client.round_view(run_id, w + 1)
        assert view is not None, "round w + 1 is open"
        theirs = str(view["round_open"]["body"]["theta_hash"])
        if theirs != step.theta_hash:
            return MergeReport.of(
                step,
                None,
                f"round {w + 1} was already opened by another aggregator with theta_hash"
                f" {theirs}; nothing published",
            )
        await self.client.publish_state(run_id, w + 1, step.theta_start_sha256)
        self._published.add(w + 1)
        return MergeReport.of(step, w + 1, f"round {w + 1} was already open with this theta")

    async def _ensure_published(self, run: RunFacts, w: int) -> None:
        """Publish round ``w``'s start state if we merged round ``w - 1`` into it and an earlier
        pass stopped before publishing (module doc)."""
        if w == 0 or w in self._published:
            return
        merged = self.state.merged(run.run_id, w - 1)
        view = await self.client.round_view(run.run_id, w)
        if merged is None or view is None:
            return
        if str(view["round_open"]["body"]["theta_hash"]) != merged.theta_hash:
            return
        if view.get("state_sha256") is None:
            for key in (merged.out_state, merged.theta_start_sha256, merged.tape_key):
                blob = self.state.get(key)
                if blob is not None:
                    await self.client.put_object(blob)
            await self.client.publish_state(run.run_id, w, merged.theta_start_sha256)
            log.info("round %d: published the start state an earlier pass left out", w)
        await self.client.record_tape(run.run_id, w - 1, merged.tape_key)
        self._published.add(w)


async def _pause(seconds: float, give_up_at: float, why: str) -> None:
    """Sleep ``seconds``, no later than ``give_up_at``; NotDue when that time has come."""
    now = trio.current_time()
    if now >= give_up_at:
        raise NotDue(f"not due within the wait: {why}")
    await trio.sleep(min(seconds, give_up_at - now))
