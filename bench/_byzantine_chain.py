"""The trust loop of bench/byzantine.py: the merge chain, its rollback and the audit draw.

What the protocol does about a miner whose upload is corrupted (spec/protocol.md section 6,
DESIGN.md section 9), modelled with the project's own pure functions and no network:

- **Audit rate**: each round's roster is :func:`hypertrain.rounds.audit.roster_entries` over
  the active (not blacklisted) miners, every one admitted in round 0; a miner is bonded or not
  (:class:`Roster`), and the previous merge's copy screen (``raise_q``) flags ``copy`` as the
  coordinator does. So an unbonded miner is at ``q = 1`` for its first ``probation_rounds``
  rounds and a bonded one at ``q_base``.
- **Selection**: :func:`hypertrain.rounds.audit.select_for_audit` with a fake, seeded beacon
  signature per round (:func:`fake_beacon_sig`, 48 bytes like drand's).
- **Verdict**: a selected corrupted upload is a fault (the replay recomputes the final window and
  the delta from the public start state, and a corrupted delta cannot hash to what the miner
  committed, nor can a commitment to it come out of any replay); an honest one matches.
- **Rollback**: :class:`MergeChain` keeps the two rounds a rollback may recompute. A fault in
  round ``w`` is settled before round ``w + 2`` opens (no round builds on an unaudited fault of
  two rounds back): the miner is blacklisted (not rostered again) and rounds ``w`` and
  ``w + 1`` are merged again without it, from round ``w``'s previous state, with the very
  deltas uploaded (round ``w + 1``'s honest miners trained from the old theta), as
  :mod:`hypertrain.aggregator.rollback` does through the one merge
  (:func:`hypertrain.aggregator.merge.aggregate_round` with the faulted ids excluded).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping

import attrs
import numpy as np

from hypertrain.aggregator.merge import MergeResult, Params, aggregate_round
from hypertrain.aggregator.outerstate import OuterState
from hypertrain.protocol.manifest import VerifySpec
from hypertrain.protocol.ss58 import ss58_encode
from hypertrain.rounds.audit import (
    RosterMember,
    audit_reasons,
    roster_entries,
    select_for_audit,
)
from hypertrain.trainer.codec import F32Array

Delta = Mapping[str, F32Array]
BEACON_SIG_BYTES = 48


def fake_beacon_sig(seed: int, w: int) -> bytes:
    """A stand-in for ``drand_sig[d_audit(w)]``: 48 bytes derived from ``seed`` and ``w``."""
    return hashlib.shake_256(f"ht-bench-byzantine|{seed}|{w}".encode()).digest(BEACON_SIG_BYTES)


def hotkey(name: str) -> str:
    """The SS58 hotkey a bench miner's name stands for in the roster and the draw."""
    return ss58_encode(hashlib.sha256(f"ht-bench-byzantine|{name}".encode()).digest())


@attrs.frozen
class Roster:
    """Who is bonded, the manifest's audit parameters (``verify``), and whether the previous
    merge's copy screen raises ``q`` (``copy_screen``: on, as the coordinator does)."""

    verify: VerifySpec
    bonded: frozenset[str] = frozenset()
    copy_screen: bool = True

    def selected(
        self,
        run_id: str,
        w: int,
        active: Collection[str],
        raised: Collection[str],
        seed: int,
    ) -> list[str]:
        """The miners of ``active`` that round ``w``'s draw audits (all of them commit);
        each name stands for the hotkey :func:`hotkey` gives it."""
        names = {hotkey(name): name for name in active}
        members = [self._member(name, raised) for name in active]
        entries = roster_entries(members, w, self.verify)
        return sorted(
            names[h] for h in select_for_audit(run_id, w, fake_beacon_sig(seed, w), entries)
        )

    def reasons(self, w: int, name: str, raised: Collection[str]) -> tuple[str, ...]:
        """Why ``name`` is audited at ``q = 1`` in round ``w`` (``("random",)``: ``q_base``)."""
        return audit_reasons(self._member(name, raised), w, self.verify)

    def _member(self, name: str, raised: Collection[str]) -> RosterMember:
        copy = self.copy_screen and name in raised
        return RosterMember(
            hotkey=hotkey(name),
            bond=name in self.bonded,
            flags=frozenset({"copy"}) if copy else frozenset(),
            admitted_w=0,
        )


@attrs.frozen(eq=False)
class _Applied:
    w: int
    prev: OuterState
    deltas: Mapping[str, Delta]
    result: MergeResult


class MergeChain:
    """The aggregator's applied rounds, the last two kept for a rollback (module doc)."""

    def __init__(self, genesis: OuterState, params: Params) -> None:
        self.params = params
        self.blacklist: set[str] = set()
        self._applied: list[_Applied] = []
        self._genesis = genesis

    @property
    def state(self) -> OuterState:
        """The state the next round starts from (its theta is RoundOpen's)."""
        return self._applied[-1].result.state_out if self._applied else self._genesis

    @property
    def raised(self) -> tuple[str, ...]:
        """The last merge's copy-screen ``raise_q`` (``copy`` flags in the next roster)."""
        return self._applied[-1].result.raise_q if self._applied else ()

    @property
    def next_round(self) -> int:
        """The round the chain applies next."""
        return self._applied[-1].w + 1 if self._applied else 0

    def apply(self, deltas: Mapping[str, Delta]) -> MergeResult:
        """Merge the next round's uploads (blacklisted miners excluded)."""
        w, prev = self.next_round, self.state
        result = aggregate_round(prev, deltas, self.params, excluded=self._excluded(deltas))
        self._applied = [*self._applied[-1:], _Applied(w, prev, deltas, result)]
        return result

    def rollback(self, w: int, faulted: Collection[str]) -> None:
        """Blacklist ``faulted`` (found in round ``w``) and merge rounds ``w`` and ``w + 1``
        again without them; ``ValueError`` unless those are the two rounds applied last."""
        if [a.w for a in self._applied] != [w, w + 1]:
            raise ValueError(f"a rollback of round {w} needs rounds {w} and {w + 1} applied last")
        self.blacklist |= set(faulted)
        prev = self._applied[0].prev
        redone: list[_Applied] = []
        for old in self._applied:
            excluded = self._excluded(old.deltas)
            result = aggregate_round(prev, old.deltas, self.params, excluded=excluded)
            redone.append(_Applied(old.w, prev, old.deltas, result))
            prev = result.state_out
        self._applied = redone

    def redo_last(self, deltas: Mapping[str, Delta]) -> MergeResult:
        """Merge the last applied round again from its previous state with ``deltas`` instead
        of its uploads (blacklisted miners excluded). Not the protocol: the bench's oracle row,
        round ``w + 1`` trained again from the theta a rollback of round ``w`` corrected."""
        last = self._applied[-1]
        result = aggregate_round(last.prev, deltas, self.params, excluded=self._excluded(deltas))
        self._applied = [*self._applied[:-1], _Applied(last.w, last.prev, deltas, result)]
        return result

    @property
    def last_theta(self) -> Delta:
        """The theta the last applied round's miners started from (after any rollback)."""
        return self._applied[-1].prev.theta

    def _excluded(self, deltas: Mapping[str, Delta]) -> list[str]:
        return sorted(h for h in deltas if h in self.blacklist)


def theta_digest(theta: Mapping[str, F32Array]) -> bytes:
    """sha256 over theta's names and bytes in name order (a cache key, not the protocol's TH)."""
    h = hashlib.sha256()
    for name in sorted(theta):
        h.update(name.encode())
        h.update(np.ascontiguousarray(theta[name]).tobytes())
    return h.digest()
