"""The node's loop: probe, register, then lease, fetch, score and post, forever or once.

:meth:`NodeRunner.run` promises (spec/compute-network.md section 1, DESIGN.md section 6):

- **Start**: probe the machine (``probe``; production runs
  :func:`~hypertrain.node.probe.probe_machine` in a worker thread), choose the key
  (:func:`~hypertrain.node.identity.choose_key`: ``--key`` > node.json for the same origin >
  mint), register, and save node.json (0600) after every successful register. A coordinator
  that cannot be reached, or a mint's 429, is retried with the loop's backoff (``--once``:
  exit 1); another refused register (401, 409, 400) is :class:`~.errors.NodeFatal`.
- **Loop**: re-probe once :data:`CAPABILITY_REFRESH` seconds (Trio time) have passed since the
  last probe; lease (a long poll; lease calls start at least ``min_poll_interval`` apart, so a
  server answering ``{"job": null}`` at once cannot make the node spin). A job arrives decoded
  (a :class:`~hypertrain.compute.wire.LeaseGrant`; malformed or hostile:
  :class:`~hypertrain.node.errors.BadOffer`, abandoned) and is run by a
  :class:`~hypertrain.node.job.JobRunner`: checked against the local
  registry (:func:`~hypertrain.node.offer.fit`; otherwise skipped with an "upgrade" line). Its
  inputs are ensured in the cache (re-hashed before use; a mismatch abandons the job; in use,
  so never evicted, until the job ends), bounded by ``input_timeout`` and by the lease's
  deadline less the scorer's kill time (:func:`download_bound`: a download that would leave the
  scorer too little time is abandoned, not finished for nothing); linked into a private job
  directory; scored (``score``; production
  :func:`~hypertrain.scoring.sandbox.run_scorer`); the result posted with the lease token; the
  job directory dropped. An abandoned or skipped job posts nothing: its lease
  expires without a strike. A post's 410 (late) or 409 is reported, not fatal.
- **One request a cycle**: outside ``--once``, a result post carries the node's next lease
  request (``ResultPost.next``: the last probed profile and ``lease_wait_ms``), unless the
  coordinator refused the field once (:attr:`~hypertrain.node.client.NodeClient.
  next_in_results`) or the capabilities are due to be probed again; the job its answer carries
  is the next turn's, with no lease poll of its own (a malformed one is abandoned, a
  ``{"job": null}`` is an empty poll). An answer without ``next`` (a late post, a node
  disabled by now, a stopping or an older coordinator): the next turn leases the plain way.
  A carried request counts as a lease start for ``min_poll_interval`` but is not delayed by it
  (a job ran since the last lease), so a coordinator that answers ``{"job": null}`` at once
  still cannot make the node spin.
- **Disabled** (the lease's 403): one line with the re-enable time, then bounded sleeps
  (at most ``disabled_recheck`` each) until then, and leasing again; never an exit (``--once``:
  exit 1).
- **Errors** (unreachable, 5xx, 429, other refusals) back off on the project's one retry
  schedule (:func:`nurseries.next_delay`: ``backoff_start`` doubling to ``backoff_cap``
  seconds, full jitter from ``draw``; never shorter than the answer's ``Retry-After``), reset
  by the next successful lease. A job's input downloads and its result post retry network
  errors (and the downloads 5xx, after their ``Retry-After``) until the lease's deadline
  (``deadline_ms``, carried over to the Trio clock). A 401 during the loop is
  :class:`~hypertrain.node.errors.NodeFatal` (the key is gone on the coordinator).
- **Stopping**: cancellation (Ctrl-C/SIGTERM/SIGHUP through the supervisor) ends everything at
  once (a scorer worker's process group is killed); a job in progress is not posted;
  :meth:`NodeRunner.statistics` still answers.
- **Output**: one line per event through ``say`` (stderr in production); never the key.
  Outside ``--once``, every ``standing_every`` seconds (Trio time, the first that long after
  registering) the loop prints the node's own leaderboard line before its next turn
  (:func:`~hypertrain.node.runner_types.standing_line`: rank, compute credits, jobs done,
  agreement, strikes), when the coordinator answers it.
  :meth:`NodeRunner.statistics` is a :class:`NodeStatistics` (``--json`` prints its
  converter JSON).

``--once`` (:meth:`NodeRunner.run` with ``once=True``): one lease poll; returns 0 after an empty
poll or a posted job (whatever the coordinator answered), 1 otherwise.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from pathlib import Path

import trio

from hypertrain.compute.keys import is_node_key
from hypertrain.compute.wire import LeaseGrant, LeaseRequest
from hypertrain.node.cache import InputCache
from hypertrain.node.client import NodeClient
from hypertrain.node.errors import (
    BadOffer,
    Disabled,
    NodeClientError,
    NodeFatal,
    Refused,
    Unauthorized,
    Unreachable,
    register_refused,
)
from hypertrain.node.identity import choose_key, origin_of
from hypertrain.node.job import Carried, JobRunner
from hypertrain.node.nodefile import NodeRecord, load_record, save_record
from hypertrain.node.runner_types import (
    DEFAULT_SETTINGS,
    NodeStatistics,
    Probe,
    Probed,
    RunnerSettings,
    Say,
    Score,
    Turn,
    registered_line,
    standing_line,
)
from hypertrain.scoring.registry import REGISTRY, Challenge
from nurseries import Backoff, WallClock, next_delay

__all__ = ["NodeRunner"]


class NodeRunner:
    """One node's life (module doc); build it in the composition root, then ``await run()``."""

    def __init__(
        self,
        *,
        client: NodeClient,
        directory: Path,
        key_flag: str | None,
        handle: str | None,
        probe: Probe,
        score: Score,
        wall: WallClock,
        say: Say,
        registry: Mapping[str, Challenge] = REGISTRY,
        settings: RunnerSettings = DEFAULT_SETTINGS,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self.client = client
        self.directory = directory
        self.cache = InputCache(directory, settings.cache_max_bytes)
        self.key_flag = key_flag
        self.handle = handle
        self.origin = origin_of(client.base_url)
        self._probe, self._wall, self._say = probe, wall, say
        self.registry = registry
        self.settings = settings
        self._probed: Probed | None = None
        self._probed_at = -float("inf")
        self._last_lease_at = -float("inf")
        self._standing_at = -float("inf")
        self._handed: LeaseGrant | None = None
        self._disabled_seen: tuple[int | None, str] | None = None
        self._backoff = Backoff(initial=settings.backoff_start, maximum=settings.backoff_cap)
        self._draw = draw
        self._failures = 0
        self._node_id: str | None = None
        self._handle: str | None = None
        self.jobs = JobRunner(
            client=client,
            cache=self.cache,
            score=score,
            wall=wall,
            say=say,
            registry=registry,
            settings=settings,
        )

    def statistics(self) -> NodeStatistics:
        jobs = self.jobs
        return NodeStatistics(
            node_id=self._node_id, handle=self._handle, last_job=jobs.last_job, **jobs.counts
        )

    # -- the loop ------------------------------------------------------------------------

    async def run(self, *, once: bool = False) -> int:
        """Register, then loop (module doc); returns only with ``once`` (its exit status)."""
        self.cache.open()  # removes temp files a crash left, before any job
        while True:
            try:
                await self.register()
                break
            except Unreachable as e:
                if once:
                    raise NodeFatal(f"cannot register at {self.client.base_url}: {e}") from e
                why = f"cannot register at {self.client.base_url}: {e}"
                await self._back_off(why, e.retry_after)
        self._failures = 0
        if once:
            try:
                turn = await self.turn(once=True)
            except (Unreachable, Refused) as e:
                self._say(f"lease failed: {e}")
                return 1
            return 0 if turn in ("empty", "posted") else 1
        self._standing_at = trio.current_time()
        while True:
            try:
                await self._standing()
                await self.turn()
            except (Unreachable, Refused) as e:
                await self._back_off(str(e), e.retry_after)

    async def _standing(self) -> None:
        """The node's own leaderboard line, once ``standing_every`` seconds have passed since
        the last (module doc); nothing when the coordinator does not answer it."""
        every = self.settings.standing_every
        now = trio.current_time()
        if every is None or self._node_id is None or now < self._standing_at + every:
            return
        self._standing_at = now
        try:
            row = await self.client.standing(self._node_id)
        except NodeClientError:
            return  # an older coordinator, or none reachable: the next one, later
        self._say(standing_line(row))

    async def _back_off(self, why: str, retry_after: float | None) -> None:
        """The next wait of the error backoff, at least ``retry_after`` (the server's) but
        never above the backoff's ``maximum``: a node has no deadline, so a proxy's
        ``Retry-After: 86400`` would otherwise park it for a day."""
        self._failures += 1
        now = trio.current_time()
        asked = min(retry_after or 0.0, self._backoff.maximum)
        delay = next_delay(
            self._backoff, self._failures, self._draw(),
            now=now, deadline=math.inf, not_before=asked,
        )  # fmt: skip
        if delay is None:  # pragma: no cover - no deadline: there is always a next try
            raise AssertionError("next_delay gave up without a deadline")
        self._say(f"{why}; retrying in {delay:.3g} s")
        await trio.sleep(delay)

    async def register(self) -> None:
        """Probe, choose the key, register, save node.json (module doc)."""
        record = load_record(self.directory)
        key = choose_key(self.key_flag, record, self.origin, self.directory)
        probed = await self._refresh_probe()
        try:
            answer = await self.client.register(
                key, self.handle, probed.capabilities, probed.hardware
            )
        except (Unauthorized, Refused) as e:
            raise register_refused(e, self.client.base_url) from e
        minted = answer.key
        key = minted if key is None else key
        if key is None:
            raise NodeFatal("the coordinator minted no key")
        if not is_node_key(key):
            raise NodeFatal("the coordinator minted a key of the wrong shape")
        node_id, handle = answer.node_id, answer.handle
        record = NodeRecord(
            key=key,
            node_id=node_id,
            handle=handle,
            coordinator=self.origin,
            saved_at=int(self._wall.now()),
        )
        path = save_record(self.directory, record)  # NodeFileError: exit 2
        self.client.use_key(record.key)
        self._node_id, self._handle = node_id, handle
        self._say(registered_line(answer, self.client.base_url, minted is not None, path))

    async def _refresh_probe(self) -> Probed:
        now = trio.current_time()
        if self._probed is not None and now - self._probed_at < self.settings.capability_refresh:
            return self._probed
        probed = await self._probe()
        self._probed_at = trio.current_time()
        if probed != self._probed:
            can = ", ".join(probed.capabilities) or "nothing (no job will be offered)"
            self._say(f"can run: {can} on {probed.hardware} ({probed.described})")
        self._probed = probed
        return probed

    async def turn(self, *, once: bool = False) -> Turn:
        """One lease poll (or the job the last result's answer handed over) and, if a job
        comes, that job (module doc)."""
        grant, self._handed = self._handed, None
        if grant is None:
            probed = await self._refresh_probe()
            await trio.sleep_until(self._last_lease_at + self.settings.min_poll_interval)
            self._last_lease_at = trio.current_time()
            try:
                grant = await self.client.lease(
                    probed.capabilities, probed.hardware, self.settings.lease_wait_ms
                )
            except Disabled as e:
                await self._disabled(e, once)
                return "disabled"
            except Unauthorized as e:
                raise NodeFatal(f"the coordinator no longer knows this node's key: {e}") from e
            except BadOffer as e:
                self._answered()
                return self.jobs.drop("abandoned", "offer", f"malformed offer ({e})")
            self._answered()
            if grant is None:
                return "empty"
        turn, carried = await self.jobs.run(grant, ask_next=None if once else self._ask_next)
        self._take_next(carried)
        return turn

    def _answered(self) -> None:
        """The lease was answered: the error backoff and the disabled notice start over."""
        self._failures = 0
        self._disabled_seen = None

    async def _disabled(self, e: Disabled, once: bool) -> None:
        now_ms = round(self._wall.now() * 1000)
        seen = (e.reenable_at_ms, e.detail)
        if self._disabled_seen != seen:
            self._disabled_seen = seen
            waiting = "" if once else "; waiting"
            self._say(f"disabled until {e.reenable_at} ({e.detail}){waiting}")
        if once:
            return
        await trio.sleep(self.settings.disabled_wait((e.reenable_at_ms - now_ms) / 1000))

    # -- the job's ends ----------------------------------------------------------------

    def _ask_next(self) -> LeaseRequest | None:
        """A result post's next lease request, asked at post time: a lease start."""
        ask = self._next_request()
        if ask is not None:
            self._last_lease_at = trio.current_time()
        return ask

    def _next_request(self) -> LeaseRequest | None:
        """The lease request a result post carries (module doc): None when the coordinator
        does not take one or the capabilities are due to be probed again."""
        probed = self._probed
        fresh = trio.current_time() - self._probed_at < self.settings.capability_refresh
        if probed is None or not fresh or not self.client.next_in_results:
            return None
        return LeaseRequest(
            capabilities=probed.capabilities,
            hardware=probed.hardware,
            wait_ms=self.settings.lease_wait_ms,
        )

    def _take_next(self, carried: Carried) -> None:
        """The lease a result's answer carried: its job is the next turn's (module doc)."""
        if carried is None:
            return
        self._answered()
        if isinstance(carried, BadOffer):
            self.jobs.drop("abandoned", "offer", f"malformed offer ({carried})")
        else:
            self._handed = carried.job
