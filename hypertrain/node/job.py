"""One job of the node's loop: fit, inputs, score, post (:class:`JobRunner`).

:class:`~hypertrain.node.runner.NodeRunner` leases; each job it gets is run here, as its
module doc promises: checked against the local registry (:func:`~hypertrain.node.offer.fit`;
otherwise skipped with an "upgrade" line); its inputs ensured in the cache (re-hashed before
use; a mismatch abandons the job; in use, so never evicted, until the job ends), bounded by
``input_timeout`` and by the lease's deadline less the scorer's kill time
(:func:`~hypertrain.node.runner_types.download_bound`); linked into a private job directory;
scored; the result posted with the lease token (carrying the node's next lease request when the
loop gives one); the job directory dropped. An abandoned or skipped job posts nothing: its
lease expires without a strike. A post's 410 (late) or 409 is reported, not fatal.

The job counters and the last job (:class:`~hypertrain.node.runner_types.NodeStatistics`'
parts) are kept here; every line goes through ``say``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal

import attrs
import trio

from hypertrain.compute.wire import LeaseAnswer, LeaseGrant, LeaseRequest
from hypertrain.node.cache import InputCache
from hypertrain.node.client import NodeClient
from hypertrain.node.errors import (
    BadOffer,
    InputMismatch,
    NodeClientError,
    NodeFatal,
    Refused,
    Unauthorized,
    Unreachable,
)
from hypertrain.node.offer import describe, fit, result_post
from hypertrain.node.runner_types import (
    LastJob,
    RunnerSettings,
    Say,
    Score,
    Turn,
    download_bound,
)
from hypertrain.scoring.outcome import ScoreOutcome
from hypertrain.scoring.registry import Challenge
from nurseries import WallClock

__all__ = ["AskNext", "Carried", "JobRunner"]

AskNext = Callable[[], LeaseRequest | None]
"""The loop's next lease request for a result post, asked at post time (None: not this time)."""
Carried = LeaseAnswer | BadOffer | None
"""The lease a result's answer carried (``next``), for the loop's next turn."""


class JobRunner:
    """Runs the jobs :class:`~hypertrain.node.runner.NodeRunner` leases (module doc)."""

    def __init__(
        self,
        *,
        client: NodeClient,
        cache: InputCache,
        score: Score,
        wall: WallClock,
        say: Say,
        registry: Mapping[str, Challenge],
        settings: RunnerSettings,
    ) -> None:
        self.client = client
        self.cache = cache
        self.score = score
        self.registry = registry
        self.settings = settings
        self._wall, self._say = wall, say
        self.counts = {"jobs": 0, "posted": 0, "accepted": 0, "skipped": 0, "abandoned": 0}
        self.last_job: LastJob | None = None

    def drop(self, kind: Literal["skipped", "abandoned"], name: str, why: str) -> Turn:
        self.counts[kind] += 1
        self._say(f"job {name} {kind}: {why}; nothing posted (the lease expires, no strike)")
        return kind

    async def run(self, offer: LeaseGrant, *, ask_next: AskNext | None) -> tuple[Turn, Carried]:
        """Run the job of ``offer``; a posted result carries ``ask_next()`` when given."""
        challenge = fit(offer, self.registry)
        if isinstance(challenge, str):
            why = f"{challenge}; upgrade hypertrain on this node to run such jobs"
            return self.drop("skipped", f"{offer.copy_id} {offer.label}", why), None
        label = f"{offer.copy_id} {offer.label}"
        try:
            return await self._fetch_and_score(offer, challenge, label, ask_next)
        finally:
            self.cache.drop_job(offer.copy_id)

    async def _fetch_and_score(
        self, offer: LeaseGrant, challenge: Challenge, label: str, ask_next: AskNext | None
    ) -> tuple[Turn, Carried]:
        lease_left = download_bound(offer, challenge, self._wall.now())
        if lease_left <= 0:
            why = "the lease ends before the scorer's kill time would; no time for the inputs"
            return self.drop("abandoned", label, why), None
        bound = min(self.settings.input_timeout, lease_left)
        deadline = self._lease_deadline(offer)
        try:
            with trio.fail_after(bound):
                for spec in offer.inputs:
                    await self.cache.ensure(
                        spec,
                        lambda s: self.client.fetch_input(
                            offer.copy_id, offer.token, s, deadline=deadline
                        ),
                        job_id=offer.copy_id,
                    )
            paths = self.cache.link_job(offer.copy_id, offer.inputs)
        except (InputMismatch, OSError) as e:
            return self.drop("abandoned", label, str(e)), None
        except trio.TooSlowError:
            why = f"inputs not in the cache within {bound:g} s"
            if bound < self.settings.input_timeout:
                why += " (the lease's deadline less the scorer's kill time)"
            return self.drop("abandoned", label, why), None
        except Unreachable:
            self.drop("abandoned", label, "an input could not be downloaded")
            raise
        except NodeClientError as e:
            return self.drop("abandoned", label, f"input download refused ({e})"), None
        try:
            outcome = await self.score(challenge, paths)
        except Exception as e:  # the scorer could not start (OSError) or a bug: no verdict
            return self.drop("abandoned", label, f"the scorer did not run ({e!r})"), None
        self.counts["jobs"] += 1
        return await self._post(offer, challenge, outcome, label, ask_next)

    async def _post(
        self,
        offer: LeaseGrant,
        challenge: Challenge,
        outcome: ScoreOutcome,
        label: str,
        ask_next: AskNext | None,
    ) -> tuple[Turn, Carried]:
        done = describe(challenge, outcome)
        ask = ask_next() if ask_next is not None else None
        post = attrs.evolve(result_post(offer, outcome), next=ask)
        try:
            answer = await self.client.post_result(
                offer.copy_id, post, deadline=self._lease_deadline(offer)
            )
        except Unreachable:
            self.last_job = LastJob.of(offer, outcome, "not delivered")
            self._say(f"job {label}: {done} -> not delivered")
            raise
        except Unauthorized as e:
            raise NodeFatal(f"the coordinator no longer knows this node's key: {e}") from e
        except Refused as e:
            self.last_job = LastJob.of(offer, outcome, f"refused: {e}")
            self._say(f"job {label}: {done} -> refused ({e})")
            return "abandoned", None
        self.counts["posted"] += 1
        self.counts["accepted"] += answer.accepted
        self.last_job = LastJob.of(offer, outcome, answer.describe())
        c = self.counts
        self._say(
            f"job {label}: {done} -> {answer.describe()}"
            f" [{c['jobs']} done, {c['posted']} posted, {c['accepted']} accepted]"
        )
        return "posted", answer.next

    def _lease_deadline(self, offer: LeaseGrant) -> float:
        """The lease's ``deadline_ms`` (wall clock) as a Trio time: the retries' bound."""
        return trio.current_time() + (offer.deadline_ms - self._wall.now() * 1000) / 1000
