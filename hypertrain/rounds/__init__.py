"""Pure round logic: deadlines, derived round state, sample assignment PRPs, audit selection.

Nothing here imports Trio, HTTP or SQLite (DESIGN.md section 2): the coordinator, daemon,
miner and auditor adapt these functions to their I/O.

- :mod:`~hypertrain.rounds.deadlines`: :class:`RunConfig`, :class:`Deadlines`, :func:`template`
  (spec 4.1), :func:`serve_deadline`, :func:`round_at_or_after`;
- :mod:`~hypertrain.rounds.states`: :class:`RoundState`, :class:`MinerStatus`,
  :func:`round_state` (spec 1.3 order), :func:`transitions`;
- :mod:`~hypertrain.rounds.assignment`: :class:`FeistelPRP`, :func:`assign`, :func:`next_base`
  (spec 2.5, 5.4);
- :mod:`~hypertrain.rounds.audit`: :class:`RosterMember`, :func:`audit_rate`,
  :func:`roster_entries`, :func:`select_for_audit` (spec 6.1-6.2).
"""

from hypertrain.rounds.assignment import (
    Assignment,
    AssignmentError,
    AssignParams,
    FeistelPRP,
    assign,
    next_base,
    step_ids,
    window_ids,
)
from hypertrain.rounds.audit import (
    OUTLIER_FLAGS,
    Q_ONE,
    RosterMember,
    audit_rate,
    audit_reasons,
    roster_entries,
    select_for_audit,
)
from hypertrain.rounds.deadlines import (
    MAX_FINAL_AFTER_UPLOAD,
    MAX_TRAIN_ROUNDS,
    ChainSchedule,
    Deadlines,
    RunConfig,
    round_at_or_after,
    serve_deadline,
    template,
)
from hypertrain.rounds.states import (
    FAULT_STATUSES,
    MinerStatus,
    RoundState,
    round_state,
    transitions,
)

__all__ = [
    "FAULT_STATUSES",
    "MAX_FINAL_AFTER_UPLOAD",
    "MAX_TRAIN_ROUNDS",
    "OUTLIER_FLAGS",
    "Q_ONE",
    "AssignParams",
    "Assignment",
    "AssignmentError",
    "ChainSchedule",
    "Deadlines",
    "FeistelPRP",
    "MinerStatus",
    "RosterMember",
    "RoundState",
    "RunConfig",
    "assign",
    "audit_rate",
    "audit_reasons",
    "next_base",
    "roster_entries",
    "round_at_or_after",
    "round_state",
    "select_for_audit",
    "serve_deadline",
    "step_ids",
    "template",
    "transitions",
    "window_ids",
]
