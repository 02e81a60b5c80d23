"""Round states and per-miner statuses (spec 1.3), derived from ``D`` and stored facts.

A round's state is never stored as a flag: it follows from the latest verified drand round
``D``, the round's deadlines and a few facts the store keeps (the next round opened, an open
dispute row, a stored Finalize and the ledger round it was finalised in). :func:`round_state`
applies spec 1.3's *implementation order*:

1. finalize-based states: ``RELEASED`` (ledger round >= final round + vest_rounds), ``VESTING``
   (ledger round > final round), else ``FINAL``;
2. ``DISPUTE`` (any open dispute row);
3. ``APPLIED`` / ``AUDIT`` once round ``w+1`` is opened: ``APPLIED`` while
   ``D < d_assign(w+1)``, ``AUDIT`` from ``D >= d_assign(w+1)`` on (the reference's
   ``"AUDIT" if d >= d_assign_next else "APPLIED"``); a run's last round (no ``w+1`` will
   open) is ``APPLIED`` once merged;
4. ``UPLOAD_CLOSED`` (``D >= d_upload``), ``COMMIT_CLOSED`` (``D >= d_commit``),
   ``TRAINING`` (``D > d_assign``), ``ASSIGNED`` (``D == d_assign``), ``OPEN`` (``D < d_assign``,
   also before ``d_open``).

``d_audit`` and ``d_final`` are not state boundaries by themselves: audit selection happens at
``d_audit`` whatever the state, and ``FINAL`` needs a stored Finalize, not just ``D >= d_final``.
"""

from __future__ import annotations

import enum
from typing import Final

from hypertrain.rounds.deadlines import Deadlines

__all__ = [
    "FAULT_STATUSES",
    "MinerStatus",
    "RoundState",
    "round_state",
    "transitions",
]


class RoundState(enum.StrEnum):
    """The derived state of a round; the value is the name the round view shows."""

    OPEN = "OPEN"
    ASSIGNED = "ASSIGNED"
    TRAINING = "TRAINING"
    COMMIT_CLOSED = "COMMIT_CLOSED"
    UPLOAD_CLOSED = "UPLOAD_CLOSED"
    APPLIED = "APPLIED"
    AUDIT = "AUDIT"
    DISPUTE = "DISPUTE"
    FINAL = "FINAL"
    VESTING = "VESTING"
    RELEASED = "RELEASED"


class MinerStatus(enum.StrEnum):
    """A miner's status within one round (stored per ``(run, w, hotkey)``).

    ``ASSIGNED`` at RoundOpen, ``ACCEPTED`` after Accept, ``COMMITTED`` / ``EXCLUDED`` after
    Commit (excluded when received at or after ``d_audit``), ``UPLOADED`` after DeltaManifest,
    then the audit verdict (``MATCH`` or one of :data:`FAULT_STATUSES`), or ``TRANSIENT`` set by
    the rerun route; a dispute the miner wins makes it ``MATCH``, one it loses
    ``DISPUTE_LOST``.
    """

    ASSIGNED = "ASSIGNED"
    ACCEPTED = "ACCEPTED"
    COMMITTED = "COMMITTED"
    UPLOADED = "UPLOADED"
    EXCLUDED = "EXCLUDED"
    MATCH = "MATCH"
    MISMATCH = "MISMATCH"
    WITHHELD = "WITHHELD"
    BAD_PROOF = "BAD_PROOF"
    ASSIGNMENT_VIOLATION = "ASSIGNMENT_VIOLATION"
    TRANSIENT = "TRANSIENT"
    DISPUTE_LOST = "DISPUTE_LOST"


FAULT_STATUSES: Final = frozenset(
    {
        MinerStatus.MISMATCH,
        MinerStatus.WITHHELD,
        MinerStatus.BAD_PROOF,
        MinerStatus.ASSIGNMENT_VIOLATION,
        MinerStatus.DISPUTE_LOST,
    }
)
"""Verdicts that blacklist the miner and seal a provisional Forfeit (spec 6.3)."""


def round_state(
    D: int,  # noqa: N803 (the spec's name for the latest verified drand round)
    deadlines: Deadlines,
    *,
    next_round_d_assign: int | None = None,
    merged_last: bool = False,
    has_open_dispute: bool = False,
    finalized_ledger_round: int | None = None,
    ledger_round: int | None = None,
    vest_rounds: int | None = None,
) -> RoundState:
    """The state of a round at drand round ``D`` (see the module doc for the order).

    - ``next_round_d_assign``: ``d_assign`` of round ``w+1`` once the aggregator opened it (the
      round was applied), else ``None``.
    - ``merged_last``: the round was merged but no round ``w+1`` follows (the run's last round,
      ``total_rounds``): it is ``APPLIED`` as well, since nothing will ever open after it.
    - ``has_open_dispute``: a dispute row of this round is ``open``.
    - ``finalized_ledger_round``: the ledger round the Finalize was recorded in (``None`` while
      not finalised); ``ledger_round`` is the current ledger round and ``vest_rounds`` the
      manifest's ``E_vest_rounds``. Without ``ledger_round`` a finalised round is ``FINAL``;
      without ``vest_rounds`` it never becomes ``RELEASED``.
    """
    now = D
    if finalized_ledger_round is not None:
        if ledger_round is not None:
            if vest_rounds is not None and ledger_round >= finalized_ledger_round + vest_rounds:
                return RoundState.RELEASED
            if ledger_round > finalized_ledger_round:
                return RoundState.VESTING
        return RoundState.FINAL
    if has_open_dispute:
        return RoundState.DISPUTE
    if next_round_d_assign is not None:
        return RoundState.AUDIT if now >= next_round_d_assign else RoundState.APPLIED
    if merged_last:
        return RoundState.APPLIED
    if now >= deadlines.d_upload:
        return RoundState.UPLOAD_CLOSED
    if now >= deadlines.d_commit:
        return RoundState.COMMIT_CLOSED
    if now > deadlines.d_assign:
        return RoundState.TRAINING
    if now == deadlines.d_assign:
        return RoundState.ASSIGNED
    return RoundState.OPEN


def transitions(deadlines: Deadlines) -> list[tuple[int, RoundState]]:
    """The rounds ``D`` at which a round that is never aggregated changes state, in order.

    ``[(d_open, OPEN), (d_assign, ASSIGNED), (d_assign + 1, TRAINING), (d_commit,
    COMMIT_CLOSED), (d_upload, UPLOAD_CLOSED)]``; the ``TRAINING`` entry is left out when
    ``d_commit == d_assign + 1`` (a one-round training window goes straight from ``ASSIGNED``
    to ``COMMIT_CLOSED``). For each entry ``(D, s)``, ``round_state(D) == s`` and
    ``round_state(D - 1) != s`` (the ``OPEN`` entry is where the round starts to exist).
    """
    steps = [
        (deadlines.d_open, RoundState.OPEN),
        (deadlines.d_assign, RoundState.ASSIGNED),
    ]
    if deadlines.d_assign + 1 < deadlines.d_commit:
        steps.append((deadlines.d_assign + 1, RoundState.TRAINING))
    steps.append((deadlines.d_commit, RoundState.COMMIT_CLOSED))
    steps.append((deadlines.d_upload, RoundState.UPLOAD_CLOSED))
    return steps
