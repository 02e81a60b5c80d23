"""The follower's pure decisions (hypertrain.miner.disputeplan): what a rerun recomputes is what
the coordinator compares, where a dispute's recomputation starts, and the next step of a round
for each verdict, classification and dispute state."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import attrs
import pytest

from hypertrain.coordinator.flows.rerun import classify, compared_leaves
from hypertrain.miner.answers import DisputeView, read_answer
from hypertrain.miner.disputeplan import (
    Finished,
    OpenDispute,
    PostBisect,
    Rerun,
    RoundFacts,
    Settle,
    Verdict,
    Wait,
    classify_locally,
    committed_root,
    dispute_start,
    next_step,
    rerun_windows,
)
from hypertrain.miner.errors import MinerProtocolError
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.merkle import merkle_root_hex
from hypertrain.protocol.messages import AuditChallenge

MINER = Keypair.from_seed(b"\x03" * 32).ss58
AUDITOR = Keypair.from_seed(b"\x09" * 32).ss58
H64 = "ab" * 32


def challenge(mode: str, segments: tuple[tuple[int, int], ...] = ()) -> AuditChallenge:
    return AuditChallenge(
        w=0, target=MINER, beacon_round=80, beacon_sig_sha256=H64, mode=mode,  # type: ignore[arg-type]
        segments=segments, reasons=("random",), serve_deadline=100,
    )  # fmt: skip


@pytest.mark.parametrize(
    "ch",
    [
        challenge("full"),
        challenge("segments", ((0, 1), (2, 3))),
        challenge("segments", ((1, 2), (0, 1), (2, 3))),
        challenge("segments", ((0, 3),)),
    ],
)
def test_the_rerun_covers_exactly_the_leaves_the_coordinator_compares(ch: AuditChallenge) -> None:
    n_leaves = 4
    windows = rerun_windows(ch, n_leaves)
    assert [k for w in windows for k in w.leaves] == compared_leaves(ch, n_leaves)
    digests = [hashlib.sha256(bytes([k])).digest() for k in range(n_leaves)]
    want = merkle_root_hex([digests[k] for k in compared_leaves(ch, n_leaves)])
    assert committed_root(digests, windows) == want
    for w in windows:  # each window recomputes from its start: the auditor's starting point
        assert (w.full, w.start) == ((True, 0) if ch.mode == "full" else (False, w.leaves[0] - 1))


def test_a_dispute_recomputes_from_the_round_start_or_the_window_holding_the_leaf() -> None:
    assert dispute_start(challenge("full"), 3) is None  # the round start
    segments = challenge("segments", ((0, 1), (1, 2), (2, 3)))
    assert [dispute_start(segments, k) for k in (1, 2, 3)] == [0, 1, 2]
    with pytest.raises(ValueError, match="no challenged window"):
        dispute_start(challenge("segments", ((2, 3),)), 1)


@pytest.mark.parametrize(
    ("rerun", "status", "expected"),
    [("a", "TRANSIENT", "TRANSIENT"), ("a", "MISMATCH", "FAULT"), ("c", "MISMATCH", "CONTEST"),
     ("x", "MISMATCH", "FAULT")],
)  # fmt: skip
def test_a_rerun_the_journal_missed_is_classified_as_the_coordinator_did(
    rerun: str, status: str, expected: str
) -> None:
    roots = {k: k * 64 for k in "acx"}
    assert classify_locally(roots[rerun], roots["a"], roots["c"], status) == expected
    forgiven = 0 if expected == "TRANSIENT" else 1
    assert expected == classify(
        roots[rerun], roots["a"], roots["c"], transients_this_epoch=forgiven, forgive_per_epoch=1
    )


VERDICT = Verdict("11" * 32, "22" * 32, 2, "33" * 32)
BASE = RoundFacts(
    now_round=90, audited=True, selected=True, status="UPLOADED", job_state="leased",
    serve_deadline=100, verdict=None,
)  # fmt: skip


def dispute(**over: Any) -> DisputeView:
    raw: dict[str, Any] = {
        "dispute_id": "44" * 32, "run_id": "55" * 32, "w": 0, "miner": MINER, "auditor": AUDITOR,
        "job_id": "a_1", "challenge_hash": "22" * 32, "verdict_hash": VERDICT.verdict_hash,
        "first_bad_leaf": 2, "action": "contest", "state": "open", "opened_round": 95,
        "stage": {"level": "step", "t": None, "layer": None, "interval": [2, 4], "N": 2,
                  "points": [2, 3, 4], "deadline_round": 120, "awaiting": ["miner", "auditor"]},
        "referee": None, "outcome": None, "bisects": [],
    }  # fmt: skip
    raw.update(over)
    return read_answer(DisputeView, raw, "GET disputes")


@pytest.mark.parametrize(
    ("over", "expected"),
    [
        ({"audited": False}, Settle("no-audits")),
        ({"status": "MISMATCH", "verdict": VERDICT}, Rerun(VERDICT)),
        ({"status": "MISMATCH"}, Wait("verdict")),
        ({"status": "MATCH"}, Settle("verdict MATCH")),
        ({"status": "WITHHELD"}, Settle("verdict WITHHELD")),
        ({"selected": False}, Settle("not-selected")),
        ({"selected": None, "job_state": None}, Wait("verdict")),
        ({"job_state": "failed"}, Settle("job failed")),
        ({"job_state": None, "now_round": 101}, Settle("deadline")),
        ({"job_state": None, "now_round": 100}, Wait("verdict")),
        ({"classification": "TRANSIENT"}, Settle("transient")),
        ({"classification": "FAULT", "verdict": VERDICT}, OpenDispute("accept", VERDICT)),
        ({"classification": "CONTEST", "verdict": VERDICT}, OpenDispute("contest", VERDICT)),
        (  # no leaf to bisect from: the coordinator sends it to the referee's new audit
            {"classification": "CONTEST", "verdict": attrs.evolve(VERDICT, first_bad_leaf=None)},
            OpenDispute("contest", attrs.evolve(VERDICT, first_bad_leaf=None)),
        ),
        ({"classification": "CONTEST", "dispute_id": "44" * 32}, Wait("dispute view")),
    ],
)
def test_the_next_step_before_a_dispute(over: dict[str, Any], expected: object) -> None:
    assert next_step(attrs.evolve(BASE, **over)) == expected


def test_the_next_step_of_an_open_dispute() -> None:
    facts = attrs.evolve(
        BASE, status="MISMATCH", verdict=VERDICT, classification="CONTEST", dispute_id="44" * 32
    )
    open_ = dispute()
    step = next_step(attrs.evolve(facts, dispute=open_))
    assert step == PostBisect(open_.stage)  # type: ignore[arg-type]
    assert open_.stage is not None
    published = attrs.evolve(open_, stage=attrs.evolve(open_.stage, awaiting=("auditor",)))
    assert next_step(attrs.evolve(facts, dispute=published)) == Wait("auditor")
    late = attrs.evolve(facts, dispute=open_, now_round=121)
    assert next_step(late) == Wait("auditor")  # too late to publish: wait for the timeout
    referee = dispute(stage=None, referee={"kind": "op"})
    assert next_step(attrs.evolve(facts, dispute=referee)) == Wait("referee")
    for state in ("accepted", "resolved"):
        ended = dispute(state=state, stage=None)
        assert next_step(attrs.evolve(facts, dispute=ended)) == Finished(ended)


def test_a_stage_whose_points_are_not_its_intervals_is_refused() -> None:
    view = dispute()
    assert view.stage is not None
    assert view.stage.to_stage().a == 2
    with pytest.raises(ValueError, match="points"):
        attrs.evolve(view.stage, points=(2, 4, 4)).to_stage()
    with pytest.raises(ValueError, match="op stage"):
        attrs.evolve(view.stage, level="op", t=3).to_stage()


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"state": "closed"}, "$.state"),
        ({"verdict_hash": "nope"}, "$.verdict_hash"),
        ({"stage": {"level": "step", "interval": [2, 4], "N": 2, "points": [2, 3, 4],
                    "deadline_round": 9, "awaiting": ["referee"]}}, "$.stage.awaiting"),
        ({"outcome": {"loser_role": "miner", "cause": "referee"}}, "$.outcome.loser"),
    ],
)  # fmt: skip
def test_a_broken_dispute_view_is_a_protocol_error_naming_the_field(
    over: dict[str, Any], field: str
) -> None:
    with pytest.raises(
        MinerProtocolError, match=re.escape(f"GET disputes: DisputeView body: {field}")
    ):
        dispute(**over)
