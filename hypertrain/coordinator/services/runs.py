"""The run lifecycle's live side: round-state events, run events and the assignment cache.

One :class:`RunsService` per coordinator, built by
:func:`hypertrain.coordinator.web.runs.register`, which adds :meth:`RunsService.on_beacon`
to ``ctx.beacon_observers``:

- after each new D, :meth:`~RunsService.on_beacon` derives the state of every round (one read)
  and, for each round whose state is not the last one published, records the new one (one
  compare-and-set write) and publishes ``round_state`` ``{run_id, w, state, D}``. The last
  published state lives in the ``rounds`` table, so a restart resumes the feed where it was;
  D jumping several deadlines at once publishes only the state reached.
- :meth:`~RunsService.publish_run` publishes ``run`` ``{run_id, change, ...}`` for created,
  configured, paused, unpaused, roster and honeypot changes (called by the routes after their
  write committed).
- :meth:`~RunsService.round_view`: the round view from one read transaction, with the
  assignment derived outside it and kept in a small LRU keyed by everything it depends on
  (run, w, the ``drand[d_assign]`` signature, base and the RoundOpen roster), so a hot round
  costs no PRP work per poll; kept as an
  :class:`~hypertrain.coordinator.flows.roundview.EncodedAssignment`, so a render after an
  unrelated commit does not unstructure and encode the page's items again either (an entry
  holds a round's items and, once shown, their JSON: about 2 KB per item in
  ``bench/views.py``).
"""

from __future__ import annotations

import collections
from typing import Any, Final

from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.flows.pages import Page
from hypertrain.coordinator.flows.roundview import (
    EncodedAssignment,
    RoundFacts,
    derive_assignment,
    round_facts,
)
from hypertrain.coordinator.flows.roundview import round_view as render_round_view
from hypertrain.coordinator.tables.rounds import (
    RoundRow,
    StateChange,
    mark_published,
    pending_state_changes,
)
from hypertrain.rounds.states import RoundState

__all__ = ["ASSIGNMENT_CACHE_SIZE", "RunsService"]

ASSIGNMENT_CACHE_SIZE: Final = 64
"""Rounds whose derived assignment is kept in memory."""

_AssignmentKey = tuple[str, int, str, int, str]


class RunsService:
    """See the module docstring."""

    def __init__(self, ctx: Coordinator, *, cache_size: int = ASSIGNMENT_CACHE_SIZE) -> None:
        self._ctx = ctx
        self._cache_size = cache_size
        self._assignments: collections.OrderedDict[_AssignmentKey, EncodedAssignment] = (
            collections.OrderedDict()
        )

    async def on_beacon(self, D: int) -> None:  # noqa: N803 (spec name)
        """Beacon observer: publish the round states that changed at ``D``."""
        changes = await self._ctx.db.read(pending_state_changes, D)
        if changes:
            done = await self._ctx.db.write(mark_published, changes)
            self._publish_states(done, D)

    def _publish_states(self, changes: list[StateChange], D: int) -> None:  # noqa: N803
        for change in changes:
            self._ctx.events.publish("round_state", change.event(D))

    def round_opened(self, row: RoundRow, D: int) -> None:  # noqa: N803 (spec name)
        """Publish the state of a round just opened (stored as published ``OPEN``)."""
        self._publish_states([StateChange(row.run_id, row.w, None, RoundState.OPEN)], D)

    def publish_run(self, run_id: str, change: str, **data: Any) -> None:
        """Publish a ``run`` event ``{run_id, change, **data}``."""
        self._ctx.events.publish("run", {"run_id": run_id, "change": change, **data})

    def assignment(self, facts: RoundFacts) -> EncodedAssignment | None:
        """:func:`derive_assignment`, cached (see the module docstring)."""
        if facts.assign_signature is None or not facts.assignment_due:
            return None
        body = facts.round.body
        key = (facts.run.run_id, body.w, facts.assign_signature, facts.round.base, body.roster_hash)
        cached = self._assignments.get(key)
        if cached is not None:
            self._assignments.move_to_end(key)
            return cached
        derived = derive_assignment(facts)
        if derived is None:
            return None
        result = self._assignments[key] = EncodedAssignment(derived)
        while len(self._assignments) > self._cache_size:
            self._assignments.popitem(last=False)
        return result

    async def round_view(self, run_id: str, w: int, page: Page | None = None) -> dict[str, Any]:
        """``GET /v1/runs/{id}/rounds/{w}``: its miners of ``page`` (all without one); 404 for
        an unknown run or round. Encode it with
        :func:`~hypertrain.coordinator.flows.compactjson.encode_json` (its ``assignment`` is
        already encoded)."""
        facts = await self._ctx.db.read(round_facts, run_id, w, page)
        return render_round_view(facts, self.assignment(facts))
