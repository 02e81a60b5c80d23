"""The fallback evaluator pool: the daemon scores the steps the compute network did not settle.

A daemon service. Steps reach the fallback when their wait window ends with a copy unleased,
when a copy expired too often, when all answers differ, or when an answer was inconclusive
(timeout, oom); :func:`~hypertrain.compute.pending_fallbacks` lists them (from the database, so
nothing is lost across a restart). Each is scored by ``score`` (production:
:func:`~hypertrain.scoring.sandbox.run_scorer`, the same sandboxed worker the nodes run, on the
job's input objects straight from the object store) and settled with
:func:`~hypertrain.compute.settle_trusted`, which pays or strikes the nodes that answered.

At most ``concurrency`` scorers run at once (default: the cores) behind a queue of as many
again; when it is full the step simply waits for the next pass: *busy is never a verdict*. A
scorer that raises is logged and the step retried after :data:`RETRY_AFTER` seconds. The pool
is woken when the reaper or a result sends a step to the fallback, and passes at least every
:data:`IDLE_WAIT` seconds.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Final

import attrs
import trio

from hypertrain.compute import Answer, Job, parse_answer, pending_fallbacks, settle_trusted
from hypertrain.coordinator.computehub import FALLBACK
from hypertrain.coordinator.context import Coordinator
from hypertrain.protocol.errors import HypertrainError
from hypertrain.scoring.outcome import ScoreOutcome
from hypertrain.scoring.registry import Challenge, get_challenge
from nurseries import Stopping

__all__ = ["IDLE_WAIT", "RETRY_AFTER", "FallbackPool", "Score", "trusted_answer"]

log = logging.getLogger(__name__)

IDLE_WAIT: Final = 30.0
RETRY_AFTER: Final = 60.0

Score = Callable[[Challenge, Mapping[str, Path]], Awaitable[ScoreOutcome]]


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
        send, receive = trio.open_memory_channel[Job](self.concurrency)
        async with trio.open_nursery() as nursery:
            for _ in range(self.concurrency):
                nursery.start_soon(self._worker, receive.clone())
            task_status.started()
            while True:
                pending = await self.ctx.db.read(pending_fallbacks)
                waiting = {job.job_id for job in pending}
                self._retry_at = {j: t for j, t in self._retry_at.items() if j in waiting}
                for job in pending:
                    if job.job_id in self._in_flight:
                        continue
                    if self._retry_at.get(job.job_id, 0.0) > trio.current_time():
                        continue
                    try:
                        send.send_nowait(job)
                    except trio.WouldBlock:
                        break  # busy: the step waits for the next pass
                    self._in_flight.add(job.job_id)
                deadline = trio.current_time() + IDLE_WAIT
                woken = await self.ctx.compute.waiter.wait(FALLBACK, deadline=deadline)
                if isinstance(woken, Stopping):
                    await trio.sleep_forever()  # the daemon is stopping: cancelled right after

    async def _worker(self, receive: trio.MemoryReceiveChannel[Job]) -> None:
        async for job in receive:
            try:
                await self.settle(job)
            except (HypertrainError, OSError, ValueError) as e:
                log.error("fallback for job %s failed: %s; retrying later", job.job_id, e)
                self._retry_at[job.job_id] = trio.current_time() + RETRY_AFTER
            finally:
                self._in_flight.discard(job.job_id)

    async def settle(self, job: Job) -> None:
        """Score one step with the trusted evaluator and settle it."""
        challenge = get_challenge(job.challenge)
        paths = {i.name: self.ctx.objects.path_of(i.sha256) for i in job.inputs}
        outcome = await self.score(challenge, paths)
        answer = trusted_answer(challenge, outcome)
        hub = self.ctx.compute
        now = int(self.ctx.wall.now() * 1000)
        await hub.write(partial(settle_trusted, settings=hub.settings), job.job_id, answer, now)
        log.info("fallback settled job %s (%s): %s", job.job_id, job.challenge, answer.to_json())
