"""``hypertrain aggregate`` finalises too: each merged round, in order, once the server can.

The daemon decides when round ``w`` can be final and what its Finalize says (spec 7, "Finalize
route"): ``GET .../rounds/{w}/inputs`` answers ``final``, ``finalize_template`` (the body it
accepts now) and ``finalize_blocked`` (why not yet). The external aggregator holds K_coord, so
it seals that body and posts it. One call of :meth:`RemoteFinality.finalize_due`, from the
run's oldest round that is not final (:attr:`~hypertrain.aggregator.remote_plan.RunFacts.
not_final`) up to its newest:

1. ``GET .../rounds/{w}/inputs``; a round already ``final`` is skipped (an earlier run of this
   command, or another aggregator, finalised it);
2. without a ``finalize_template`` it stops and answers :class:`Pending` (the round, the
   server's reason and the D at which to ask again: ``d_final`` while D is before it, else one
   ``max_poll`` later); the later rounds wait too, since rounds are final in order;
3. it seals the template as a K_coord ``Finalize`` and ``POST .../rounds/{w}/finalize``. A 200
   is reported (:class:`~hypertrain.aggregator.remote_plan.FinalReport`) and the next round is
   tried. A 409 (final meanwhile, or blocked meanwhile) or a 422 (the plan changed since the
   read: a late verdict, a rollback) reads the inputs again, at most :data:`FINALIZE_TRIES`
   posts per round, after which :class:`~hypertrain.aggregator.remote_client.Refused` is
   raised; a round found final after a refusal is reported with a ``note`` and its verdicts
   from the round view.

Nothing is kept locally: finality is the server's record, so a restarted aggregator finalises
what is left and skips what is final. Waiting is the caller's (bounded polls of D).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from attrs import frozen

from hypertrain.aggregator.remote_client import AggregatorClient, Refused
from hypertrain.aggregator.remote_plan import (
    FinalReport,
    Report,
    RunFacts,
    final_offer,
    final_retry_round,
    final_verdicts,
)
from hypertrain.protocol.envelope import NEVER, seal
from hypertrain.protocol.errors import Malformed
from hypertrain.protocol.keys import Keypair

__all__ = ["FINALIZE_TRIES", "Pending", "RemoteFinality"]

log = logging.getLogger(__name__)

FINALIZE_TRIES: Final = 3
"""How many times one round's Finalize is posted when the server refuses it (409/422) while
still offering a template."""


@frozen
class Pending:
    """Round ``w`` cannot be final yet: ``blocked`` is the server's reason, ``retry_at`` the D
    at which to ask again."""

    w: int
    blocked: str
    retry_at: int


class RemoteFinality:
    """The finalisation of module doc, for one run; ``report`` gets each finalised round."""

    def __init__(
        self,
        coord: Keypair,
        client: AggregatorClient,
        report: Callable[[Report], None],
        *,
        max_poll: float,
    ) -> None:
        self.coord = coord
        self.client = client
        self.report = report
        self.max_poll = max_poll
        self._logged: Pending | None = None

    async def finalize_due(self, run: RunFacts) -> Pending | None:
        """Finalise, in order, every round the server accepts now (module doc); None once every
        opened round is final, else the first one that is not."""
        w = run.not_final
        if w is None or run.newest_round is None:
            return None
        while w <= run.newest_round:
            pending = await self._finalize(run, w)
            if pending is not None:
                if self._logged is None or self._logged.blocked != pending.blocked:
                    log.info("round %d is not final yet: %s", w, pending.blocked)
                self._logged = pending
                return pending
            w += 1
        return None

    async def _finalize(self, run: RunFacts, w: int) -> Pending | None:
        run_id = run.run_id
        period = float(run.manifest.beacon.period)
        refusal: tuple[int, str] | None = None
        for posts in range(FINALIZE_TRIES + 1):
            inputs = await self.client.inputs(run_id, w)
            offer = final_offer(inputs)
            if offer.final:
                if refusal is not None:
                    await self._found_final(run_id, w, refusal[1])
                return None
            if offer.template is None:
                blocked = offer.blocked or "the server offers no Finalize"
                retry_at = final_retry_round(inputs, period=period, max_poll=self.max_poll)
                return Pending(w, blocked, retry_at)
            if posts == FINALIZE_TRIES:
                break
            envelope = seal(self.coord, "Finalize", run_id, offer.template, NEVER).to_json()
            status, answer = await self.client.finalize(run_id, w, envelope)
            if status not in (409, 422):
                verdicts = answer.get("verdicts")
                if not isinstance(verdicts, dict):
                    raise Malformed(f"the finalize answer of round {w} has no verdicts")
                self.report(FinalReport.of(w, verdicts))
                return None
            refusal = (status, str(answer.get("detail")))
            log.info("round %d: Finalize refused (HTTP %d: %s); reading again", w, *refusal)
        assert refusal is not None
        raise Refused(
            "POST",
            f"/v1/aggregator/runs/{run_id}/rounds/{w}/finalize",
            refusal[0],
            f"{refusal[1]} ({FINALIZE_TRIES} tries, each with a fresh template)",
        )

    async def _found_final(self, run_id: str, w: int, detail: str) -> None:
        view = await self.client.round_view(run_id, w)
        verdicts = {} if view is None else final_verdicts(view)
        note = f"round {w} was final already ({detail})"
        self.report(FinalReport.of(w, verdicts, note))
