"""The fallback evaluator pool: the daemon scores the steps the compute network did not settle.

A daemon service. Steps reach the fallback when their wait window ends with a copy unleased,
when a copy expired too often, when all answers differ, or when an answer was inconclusive
(timeout, oom); :func:`~hypertrain.compute.pending_fallbacks` lists them (from the database, so
nothing is lost across a restart). Each is scored by ``score`` (production:
:func:`~hypertrain.scoring.sandbox.run_scorer`, the same sandboxed worker the nodes run, on the
job's input objects straight from the object store) and settled with
:func:`~hypertrain.compute.settle_trusted`, which pays or strikes the nodes that answered.

The pool also re-scores the settled steps the beacon drew for a sampled trusted re-score
(:func:`~hypertrain.compute.pending_rescores`, also from the database): the same scorer on the
same inputs, recorded with :func:`~hypertrain.coordinator.flows.rescores.record_rescore`, which
replaces a result the trusted evaluator disagrees with, strikes the agreeing nodes and claws
back their credit. Both kinds of work share the workers, the queue and the retry rule below.

At most ``concurrency`` scorers run at once (default: the cores) behind a queue of as many
again; when it is full the step simply waits for the next pass: *busy is never a verdict*. A
scorer that raises is logged and the step retried after :data:`RETRY_AFTER` seconds. The pool
is woken when the reaper or a result sends a step to the fallback or the beacon draws one for a
re-score, and passes at least every :data:`IDLE_WAIT` seconds.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Final, Literal

import attrs
import trio

from hypertrain.compute import (
    Answer,
    Job,
    parse_answer,
    pending_fallbacks,
    pending_rescores,
    settle_trusted,
)
from hypertrain.coordinator.computehub import FALLBACK
from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.flows.rescores import record_rescore
from hypertrain.protocol.errors import HypertrainError
from hypertrain.scoring.outcome import ScoreOutcome
from hypertrain.scoring.registry import Challenge, get_challenge
from nurseries import Stopping

__all__ = [
    "IDLE_WAIT",
    "RETRY_AFTER",
    "FallbackPool",
    "Score",
    "Work",
    "pending_work",
    "trusted_answer",
]

log = logging.getLogger(__name__)

IDLE_WAIT: Final = 30.0
RETRY_AFTER: Final = 60.0

Score = Callable[[Challenge, Mapping[str, Path]], Awaitable[ScoreOutcome]]
Work = tuple[Literal["fallback", "rescore"], Job]
"""A step to settle with the trusted evaluator, or a settled one to re-score."""


def pending_work(conn: sqlite3.Connection) -> list[Work]:
    """The pool's work list: the fallback steps, then the drawn re-scores, oldest first."""
    fallbacks: list[Work] = [("fallback", job) for job in pending_fallbacks(conn)]
    return fallbacks + [("rescore", job) for job in pending_rescores(conn)]


def trusted_answer(challenge: Challenge, outcome: ScoreOutcome) -> Answer:
    """The fallback evaluator's outcome as an answer of the book (checked as a node's is)."""
    if outcome.ok:
        result = {**(outcome.result or {}), "wallMs": outcome.wall_ms}
        return parse_answer(challenge, ok=True, result=result)
    return parse_answer(challenge, ok=False, failure=outcome.failure, error=outcome.error)


@attrs.define(eq=False)
class FallbackPool:
    """The service (module doc)."""

    ctx: Coordinator
    score: Score
    concurrency: int
    _in_flight: set[str] = attrs.field(factory=set, init=False)
    _retry_at: dict[str, float] = attrs.field(factory=dict, init=False)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        send, receive = trio.open_memory_channel[Work](self.concurrency)
        async with trio.open_nursery() as nursery:
            for _ in range(self.concurrency):
                nursery.start_soon(self._worker, receive.clone())
            task_status.started()
            while True:
                pending = await self.ctx.db.read(pending_work)
                waiting = {job.job_id for _, job in pending}
                self._retry_at = {j: t for j, t in self._retry_at.items() if j in waiting}
                for work in pending:
                    job = work[1]
                    if job.job_id in self._in_flight:
                        continue
                    if self._retry_at.get(job.job_id, 0.0) > trio.current_time():
                        continue
                    try:
                        send.send_nowait(work)
                    except trio.WouldBlock:
                        break  # busy: the step waits for the next pass
                    self._in_flight.add(job.job_id)
                deadline = trio.current_time() + IDLE_WAIT
                woken = await self.ctx.compute.waiter.wait(FALLBACK, deadline=deadline)
                if isinstance(woken, Stopping):
                    await trio.sleep_forever()  # the daemon is stopping: cancelled right after

    async def _worker(self, receive: trio.MemoryReceiveChannel[Work]) -> None:
        async for kind, job in receive:
            try:
                await (self.settle(job) if kind == "fallback" else self.rescore(job))
            except (HypertrainError, OSError, ValueError) as e:
                log.error("%s for job %s failed: %s; retrying later", kind, job.job_id, e)
                self._retry_at[job.job_id] = trio.current_time() + RETRY_AFTER
            finally:
                self._in_flight.discard(job.job_id)

    async def _trusted(self, job: Job) -> tuple[Answer, int]:
        """The trusted evaluator's answer on ``job``'s inputs, and the wall ms after it."""
        challenge = get_challenge(job.challenge)
        paths = {i.name: self.ctx.objects.path_of(i.sha256) for i in job.inputs}
        outcome = await self.score(challenge, paths)
        return trusted_answer(challenge, outcome), int(self.ctx.wall.now() * 1000)

    async def settle(self, job: Job) -> None:
        """Score one step with the trusted evaluator and settle it."""
        answer, now = await self._trusted(job)
        hub = self.ctx.compute
        await hub.write(partial(settle_trusted, settings=hub.settings), job.job_id, answer, now)
        log.info("fallback settled job %s (%s): %s", job.job_id, job.challenge, answer.to_json())

    async def rescore(self, job: Job) -> None:
        """Re-score one drawn step with the trusted evaluator and record the outcome."""
        answer, now = await self._trusted(job)
        hub = self.ctx.compute
        events = await hub.write(
            partial(record_rescore, settings=hub.settings), job.job_id, answer, now
        )
        for kind, payload in events:
            if kind == "audit":
                level = logging.WARNING if payload["change"] == "replaced" else logging.INFO
                log.log(level, "re-score of job %s: %s", job.job_id, payload["change"])
            if kind == "audit" and payload.get("consumed"):
                log.warning("re-score of job %s: %s", job.job_id, payload["consumed"])
