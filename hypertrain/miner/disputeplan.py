"""What the miner does next about one audited round (spec 6.4, issue 14): pure decisions.

:func:`next_step` reads :class:`RoundFacts` (the round view's facts about this miner, what the
journal says was done, and the dispute's view once there is one) and answers one step, applied
in this order:

1. no rerun recorded yet:

   a. the view has no ``audit_beacon_round``: the coordinator does not audit: settled;
   b. status ``MISMATCH`` with a verified verdict: :class:`Rerun`;
   c. any other verdict status (``MATCH``, ``WITHHELD``, ``BAD_PROOF``, ...): settled;
   d. the draw ran without this miner: settled (``not-selected``);
   e. this miner's job ended (``done``/``failed``) without a MISMATCH: settled;
   f. no (checked) job of this miner and ``D > serve_deadline``: settled (``deadline``);
   g. otherwise wait for the verdict;

2. rerun ``TRANSIENT``: settled. ``FAULT``: :class:`OpenDispute` ``accept``; ``CONTEST``:
   :class:`OpenDispute` ``contest`` (a verdict naming no leaf to bisect from goes straight to
   the referee, who audits the round again: the coordinator decides, not the miner);
3. dispute opened, its view not read yet: wait;
4. dispute ``accepted`` or ``resolved``: :class:`Finished` (its outcome);
5. the stage awaits ``"miner"`` and ``D <= deadline_round``: :class:`PostBisect`;
6. otherwise wait (for the auditor's Bisect, the referee or the timeout).

The adapter (:mod:`hypertrain.miner.disputes`) bounds every wait. Windows: what a rerun
recomputes and which leaves its root covers (:func:`rerun_windows`), the coordinator's
``compared_leaves`` flattened; :func:`dispute_start` is the leaf a dispute's recomputation
starts from. Imports neither trio nor httpx nor torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from attrs import frozen

from hypertrain.miner.answers import DisputeStage, DisputeView
from hypertrain.protocol.merkle import merkle_root_hex
from hypertrain.protocol.messages import AuditChallenge

__all__ = [
    "Classification",
    "Finished",
    "OpenDispute",
    "PostBisect",
    "Rerun",
    "RoundFacts",
    "Settle",
    "Step",
    "Verdict",
    "Wait",
    "Window",
    "classify_locally",
    "committed_root",
    "dispute_start",
    "next_step",
    "rerun_windows",
]

Classification = Literal["TRANSIENT", "CONTEST", "FAULT"]
VERDICT_STATUSES = frozenset(
    {"MATCH", "MISMATCH", "WITHHELD", "BAD_PROOF", "ASSIGNMENT_VIOLATION", "TRANSIENT"}
)
"""Statuses that end an audit (``DISPUTE_LOST`` only follows a dispute)."""


@frozen
class Window:
    """One recomputation of a rerun, the leaves ``leaves`` of ``[start, end]``: full mode
    (``full``) the whole round from the round start (public theta, reset optimizer state),
    every leaf, 0 included; segments mode ``[a, b]`` from the kept state at leaf ``a`` (its
    carried optimizer state included), leaves ``a+1 .. b``."""

    start: int
    end: int
    leaves: tuple[int, ...]
    full: bool = False


def rerun_windows(challenge: AuditChallenge, n_leaves: int) -> tuple[Window, ...]:
    """What a rerun recomputes, in the order its root covers the leaves (module docstring)."""
    if challenge.mode == "full":
        return (Window(0, n_leaves - 1, tuple(range(n_leaves)), full=True),)
    return tuple(Window(a, b, tuple(range(a + 1, b + 1))) for a, b in challenge.segments)


def committed_root(digests: Sequence[bytes], windows: Sequence[Window]) -> str:
    """The root of the committed leaf digests at the windows' leaves (a CONTEST rerun's)."""
    return merkle_root_hex([digests[k] for w in windows for k in w.leaves])


def dispute_start(challenge: AuditChallenge, first_bad_leaf: int) -> int | None:
    """Where a dispute's recomputation starts: None in full mode (the round start); in
    segments mode the kept state at the start ``a`` of the first challenged window ``[a, b]``
    with ``a < k <= b``."""
    if challenge.mode == "full":
        return None
    for a, b in challenge.segments:
        if a < first_bad_leaf <= b:
            return a
    raise ValueError(f"leaf {first_bad_leaf} is in no challenged window")


def classify_locally(
    rerun_root: str, verdict_root: str, committed: str, status: str
) -> Classification:
    """The rerun's classification from the roots (the coordinator's rule), for a rerun the
    coordinator already holds (409) but the journal missed: equal to the auditor's is
    TRANSIENT when the status says so (else forgiveness ran out: FAULT)."""
    if rerun_root == verdict_root:
        return "TRANSIENT" if status == "TRANSIENT" else "FAULT"
    if rerun_root == committed:
        return "CONTEST"
    return "FAULT"


@frozen
class Verdict:
    """A verified ReplayVerdict of this miner's audit."""

    verdict_hash: str
    challenge_hash: str
    first_bad_leaf: int | None
    recomputed_leaves_root: str


@frozen
class RoundFacts:
    """What :func:`next_step` decides from (module docstring)."""

    now_round: int
    audited: bool
    selected: bool | None
    """None before the draw."""
    status: str | None
    job_state: str | None
    """This miner's audit job's state (None: no job listed, or its challenge does not
    verify: a job the miner ignores)."""
    serve_deadline: int | None
    verdict: Verdict | None
    classification: Classification | None = None
    dispute_id: str | None = None
    dispute: DisputeView | None = None


@frozen
class Wait:
    why: str


@frozen
class Settle:
    why: str


@frozen
class Rerun:
    verdict: Verdict


@frozen
class OpenDispute:
    action: Literal["accept", "contest"]
    verdict: Verdict


@frozen
class PostBisect:
    stage: DisputeStage


@frozen
class Finished:
    dispute: DisputeView


Step = Wait | Settle | Rerun | OpenDispute | PostBisect | Finished


def _before_rerun(f: RoundFacts) -> Step:
    if not f.audited:
        return Settle("no-audits")
    if f.status == "MISMATCH":
        return Rerun(f.verdict) if f.verdict is not None else Wait("verdict")
    if f.status in VERDICT_STATUSES:
        return Settle(f"verdict {f.status}")
    if f.selected is False:
        return Settle("not-selected")
    if f.job_state in ("done", "failed"):
        return Settle(f"job {f.job_state}")
    if f.job_state is None and f.serve_deadline is not None and f.now_round > f.serve_deadline:
        return Settle("deadline")
    return Wait("verdict")


def next_step(f: RoundFacts) -> Step:
    """The miner's next step about the round (module docstring)."""
    if f.classification is None:
        return _before_rerun(f)
    if f.classification == "TRANSIENT":
        return Settle("transient")
    if f.dispute_id is None:
        if f.verdict is None:
            return Wait("verdict")  # journaled rerun, the view not read yet
        if f.classification == "FAULT":
            return OpenDispute("accept", f.verdict)
        return OpenDispute("contest", f.verdict)
    d = f.dispute
    if d is None:
        return Wait("dispute view")
    if d.state != "open":
        return Finished(d)
    stage = d.stage
    if stage is not None and "miner" in stage.awaiting and f.now_round <= stage.deadline_round:
        return PostBisect(stage)
    if d.referee is not None:
        return Wait("referee")
    return Wait("auditor" if stage is not None else "dispute")
