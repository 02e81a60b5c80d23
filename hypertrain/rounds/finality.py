"""Finality of a round, as pure rules: when round ``w`` may be finalised and each miner's verdict.

The coordinator gathers :class:`MinerFacts` for every committed, not EXCLUDED miner of round
``w`` and :class:`RoundFacts` for the round (:mod:`hypertrain.coordinator.flows.finalize`); this
module decides. The rules are spec 7's "Finalize route", with one generalisation:

*in the chain* means the miner's delta is an input of the round's applied tape (after any
rollback). A miner that is not in the chain (its delta was never merged: no upload, a verdict
known before the merge, a delta that did not decode, or a rollback took it out) cannot have
shaped theta, so an audit or dispute still open about it does not hold finality back, exactly as
the spec allows for a rolled-back miner.

:func:`blockers` lists why round ``w`` cannot be finalised yet (empty: it can):

- ``D < d_final``; the previous round is not final; the round was not applied (merged);
- the audit draw has not run (for a run with auditors);
- a selected miner whose audit is not resolved (job done or failed for good): *in the chain*,
  until it is; out of it, until the audit's serve deadline has passed (a verdict that comes in
  time can still be rerun and contested; after that the miner's verdict is NO_UPLOAD);
- an open dispute about a miner *in the chain*;
- a faulted miner *in the chain* while the round can still be rolled back (the rollback takes
  it out at the merge of round ``w + 1``; once round ``w + 2`` is open, or for a run's last
  round, a fault is handled with money only);
- a MISMATCH its miner may still contest (no Dispute yet and ``D`` before its verdict round +
  ``T.dispute_per_level``): a round final at once would leave a miner no time to rerun and
  contest a wrong verdict.

:func:`verdict_of` gives each miner's ledger verdict, first match wins:

1. an open dispute: ``NO_UPLOAD`` (the slice is forgone, payable if the miner wins: vindicate);
2. a fault status (``MISMATCH``, ``WITHHELD``, ``BAD_PROOF``, ``ASSIGNMENT_VIOLATION``,
   ``DISPUTE_LOST``): ``FAULT``;
3. ``TRANSIENT``: ``TRANSIENT``;
4. not in the chain (no DeltaManifest, a delta the merge could not use, rolled back, or selected
   and never resolved): ``NO_UPLOAD``;
5. ``MATCH``: ``MATCH``; selected but the audit failed for good without a verdict:
   ``NO_UPLOAD``; otherwise (never selected) ``UNSAMPLED``.

``included`` (the Finalize body's) is the sorted hotkeys with ``MATCH`` or ``UNSAMPLED``.
:func:`entitlements_root` commits to the ledger's inputs: ``sha256_hex(b"ht-entitlements-v1|" +
JCS([{hotkey, verdict, tokens, soft_score_ppm}] sorted by hotkey))``, so anyone holding the
round's verdicts, the Commits' tokens and the scores can check a Finalize.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from attrs import frozen

from hypertrain.protocol.hashes import sha256_hex
from hypertrain.protocol.jcs import canonical_json
from hypertrain.rounds.states import FAULT_STATUSES, MinerStatus

__all__ = [
    "ENTITLEMENTS_DOMAIN",
    "Entry",
    "MinerFacts",
    "RoundFacts",
    "Verdict",
    "blockers",
    "entitlements_root",
    "included",
    "verdict_of",
]

ENTITLEMENTS_DOMAIN = b"ht-entitlements-v1|"


class Verdict(enum.StrEnum):
    """The ledger verdict of one committed miner of a final round (spec 8)."""

    MATCH = "MATCH"
    UNSAMPLED = "UNSAMPLED"
    FAULT = "FAULT"
    TRANSIENT = "TRANSIENT"
    NO_UPLOAD = "NO_UPLOAD"


@frozen
class MinerFacts:
    """What finality needs to know of one committed, not EXCLUDED miner of the round."""

    hotkey: str
    status: str
    """The miner's round status (:class:`~hypertrain.rounds.states.MinerStatus` value)."""
    selected: bool
    """Drawn for audit."""
    audit: str | None
    """The audit job's state (``queued``, ``leased``, ``done``, ``failed``) or None."""
    open_dispute: bool
    in_chain: bool
    """Its delta is an input of the round's applied tape (module doc)."""
    serve_deadline: int | None = None
    """The audit challenge's serve deadline (None: not selected)."""
    dispute_until: int | None = None
    """For a MISMATCH not disputed yet: the drand round until which the miner may still rerun
    and contest it (its verdict round + ``T.dispute_per_level``); None otherwise."""

    @property
    def audit_resolved(self) -> bool:
        """The audit has a verdict or failed for good."""
        return self.audit in ("done", "failed")


@frozen
class RoundFacts:
    """What finality needs to know of the round itself."""

    w: int
    D: int
    d_final: int
    previous_final: bool
    """Round ``w - 1`` is final (True for ``w = 0``)."""
    applied: bool
    """Round ``w`` was merged (its tape recorded)."""
    drawn: bool
    """The audit draw ran (True for a run without auditors: nothing is ever drawn)."""
    rollback_possible: bool = False
    """Round ``w`` can still be rolled back: it is not the run's last round and round ``w + 2``
    is not open yet (the rollback comes with the merge of ``w + 1``, before RoundOpen(w + 2))."""


def verdict_of(miner: MinerFacts) -> Verdict:
    """The miner's ledger verdict (module doc, rules 1 to 5)."""
    if miner.open_dispute:
        return Verdict.NO_UPLOAD
    if miner.status in FAULT_STATUSES:
        return Verdict.FAULT
    if miner.status == MinerStatus.TRANSIENT:
        return Verdict.TRANSIENT
    if not miner.in_chain:
        return Verdict.NO_UPLOAD
    if miner.status == MinerStatus.MATCH:
        return Verdict.MATCH
    if miner.selected:
        return Verdict.NO_UPLOAD  # drawn, and the audit ended without a verdict
    return Verdict.UNSAMPLED


def blockers(round_facts: RoundFacts, miners: Sequence[MinerFacts]) -> list[str]:
    """Why the round cannot be finalised yet, one sentence each; empty when it can."""
    r = round_facts
    why = []
    if r.d_final > r.D:
        why.append(f"D is before d_final = {r.d_final}")
    if not r.previous_final:
        why.append(f"round {r.w - 1} is not final")
    if not r.applied:
        why.append(f"round {r.w} was not merged")
    if not r.drawn:
        why.append(f"the audit draw of round {r.w} has not run")
    for miner in miners:
        if miner.dispute_until is not None and miner.dispute_until > r.D:
            why.append(f"{miner.hotkey} may contest its MISMATCH until D = {miner.dispute_until}")
        if miner.selected and not miner.audit_resolved:
            if miner.in_chain:
                why.append(f"the audit of {miner.hotkey} is not resolved")
            elif miner.serve_deadline is None or miner.serve_deadline >= r.D:
                why.append(
                    f"the audit of {miner.hotkey} is not resolved (it holds finality until its"
                    f" serve deadline {miner.serve_deadline})"
                )
        if not miner.in_chain:
            continue
        if miner.status in FAULT_STATUSES and r.rollback_possible:
            why.append(f"{miner.hotkey} is faulted and its delta merged: awaiting the rollback")
        if miner.open_dispute:
            why.append(f"{miner.hotkey} has an open dispute and its delta is merged")
    return why


@frozen
class Entry:
    """One ledger input of a final round: the verdict, the Commit's tokens and the score."""

    hotkey: str
    verdict: Verdict
    tokens: int
    soft_score_ppm: int

    def to_json(self) -> dict[str, object]:
        """``{hotkey, verdict, tokens, soft_score_ppm}``."""
        return {
            "hotkey": self.hotkey,
            "verdict": self.verdict.value,
            "tokens": self.tokens,
            "soft_score_ppm": self.soft_score_ppm,
        }


def included(entries: Sequence[Entry]) -> tuple[str, ...]:
    """The Finalize body's ``included``: sorted hotkeys with MATCH or UNSAMPLED."""
    paid = {Verdict.MATCH, Verdict.UNSAMPLED}
    return tuple(sorted(e.hotkey for e in entries if e.verdict in paid))


def entitlements_root(entries: Sequence[Entry]) -> str:
    """The Finalize body's ``entitlements_root`` (module doc)."""
    ordered = sorted(entries, key=lambda e: e.hotkey)
    return sha256_hex(ENTITLEMENTS_DOMAIN + canonical_json([e.to_json() for e in ordered]))
