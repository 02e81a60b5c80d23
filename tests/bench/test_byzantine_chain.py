"""bench/_byzantine_chain.py: the rollback model and the audit draw the Byzantine bench uses.

The rollback must give, bit for bit, the chain that never merged the faulted miner in rounds
``w`` and ``w + 1`` (while later rounds keep it out), and the draw must follow the audit-rate
rule: every unbonded miner on probation, a bonded one at ``q_base``, a ``copy``-flagged one at 1.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from hypertrain.aggregator.merge import Params
from hypertrain.aggregator.outerstate import OuterState
from hypertrain.protocol.example import example_manifest
from hypertrain.protocol.f32 import f32_from_hex
from hypertrain.protocol.testmode import build_test_mode_manifest

F32 = np.float32
BENCH = Path(__file__).resolve().parents[2] / "bench" / "_byzantine_chain.py"
NAMES = ("m00", "m01", "m02", "m03")
RUN_ID = "be" * 32


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_byzantine_chain", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("_byzantine_chain", module)
    spec.loader.exec_module(module)
    return module


chain_mod = _module()
VERIFY = build_test_mode_manifest(coord_pubkey=example_manifest().coord_pubkey)[0].verify
PARAMS = Params.from_outer(example_manifest().outer)


def _genesis() -> OuterState:
    return OuterState.genesis({"a": np.ones((3, 4), F32), "b": np.zeros((5,), F32)})


def _round(rng: np.random.Generator) -> dict[str, dict[str, np.ndarray]]:
    return {
        n: {"a": rng.standard_normal((3, 4)).astype(F32), "b": rng.standard_normal(5).astype(F32)}
        for n in NAMES
    }


def _same(x: OuterState, y: OuterState) -> bool:
    return all(
        np.array_equal(getattr(x, part)[k], getattr(y, part)[k])
        for part in ("theta", "u", "center")
        for k in x.theta
    )


@pytest.mark.parametrize("w", [0, 1])
def test_rollback_equals_the_chain_that_never_merged_the_faulted_miner(w: int) -> None:
    rng = np.random.default_rng(3)
    rounds = [_round(rng) for _ in range(4)]
    chain = chain_mod.MergeChain(_genesis(), PARAMS)
    for deltas in rounds[: w + 2]:
        chain.apply(deltas)
    chain.rollback(w, ["m01"])
    chain.apply({n: d for n, d in rounds[w + 2].items() if n != "m01"})

    clean = chain_mod.MergeChain(_genesis(), PARAMS)
    for i, deltas in enumerate(rounds[: w + 3]):
        clean.apply({n: d for n, d in deltas.items() if i < w or n != "m01"})
    assert chain.blacklist == {"m01"}
    assert _same(chain.state, clean.state)
    # The rollback changed something: the chain with m01 in rounds w and w + 1 differs.
    kept = chain_mod.MergeChain(_genesis(), PARAMS)
    for deltas in rounds[: w + 3]:
        kept.apply(deltas)
    assert not _same(chain.state, kept.state)


def test_redo_last_merges_the_last_round_again_from_its_corrected_start() -> None:
    """The oracle row's step: after a rollback of rounds 0 and 1, round 1 merged again with
    other deltas equals a chain that merged those in round 1 from round 0 without the faulted
    miner; the theta round 1 started from is the corrected one."""
    rng = np.random.default_rng(6)
    rounds = [_round(rng) for _ in range(3)]
    chain = chain_mod.MergeChain(_genesis(), PARAMS)
    chain.apply(rounds[0])
    chain.apply(rounds[1])
    chain.rollback(0, ["m01"])
    fresh = {n: d for n, d in rounds[2].items() if n != "m01"}  # "trained again"
    chain.redo_last(fresh)

    clean = chain_mod.MergeChain(_genesis(), PARAMS)
    clean.apply({n: d for n, d in rounds[0].items() if n != "m01"})
    start = clean.state.theta
    clean.apply(fresh)
    assert _same(chain.state, clean.state)
    assert all(np.array_equal(chain.last_theta[k], start[k]) for k in start)
    assert chain.next_round == 2


def test_a_blacklisted_upload_is_excluded_from_later_merges() -> None:
    rng = np.random.default_rng(4)
    rounds = [_round(rng) for _ in range(3)]
    chain = chain_mod.MergeChain(_genesis(), PARAMS)
    chain.apply(rounds[0])
    chain.apply(rounds[1])
    chain.rollback(0, ["m02"])
    result = chain.apply(rounds[2])  # m02 uploads anyway
    assert [h for h, _ in result.inputs] == ["m00", "m01", "m03"]
    assert result.excluded == ("m02",)


def test_only_the_two_rounds_applied_last_can_be_rolled_back() -> None:
    rng = np.random.default_rng(5)
    chain = chain_mod.MergeChain(_genesis(), PARAMS)
    chain.apply(_round(rng))
    with pytest.raises(ValueError, match="rounds 0 and 1"):
        chain.rollback(0, ["m00"])
    chain.apply(_round(rng))
    chain.apply(_round(rng))
    with pytest.raises(ValueError, match="rounds 0 and 1"):
        chain.rollback(0, ["m00"])
    chain.rollback(1, ["m00"])


def test_the_draw_follows_the_audit_rate_rule() -> None:
    assert VERIFY.probation_rounds >= 8
    assert f32_from_hex(VERIFY.q_base) < 0.5
    new = chain_mod.Roster(VERIFY)
    bonded = chain_mod.Roster(VERIFY, frozenset(NAMES))
    rounds = range(VERIFY.probation_rounds)
    assert all(new.selected(RUN_ID, w, NAMES, (), 0) == list(NAMES) for w in rounds)
    drawn = [bonded.selected(RUN_ID, w, NAMES, (), 0) for w in rounds]
    count = sum(len(d) for d in drawn)
    assert 0 < count < len(NAMES) * len(rounds) // 2
    assert drawn == [bonded.selected(RUN_ID, w, NAMES, (), 0) for w in rounds]  # seeded
    assert drawn != [bonded.selected(RUN_ID, w, NAMES, (), 1) for w in rounds]
    assert all("m01" in bonded.selected(RUN_ID, w, NAMES, ("m01",), 0) for w in rounds)
    # After probation an unbonded miner drops to q_base too.
    late = range(VERIFY.probation_rounds, VERIFY.probation_rounds + 10)
    assert sum(len(new.selected(RUN_ID, w, NAMES, (), 0)) for w in late) < len(NAMES) * 10


def test_the_copy_screen_raise_can_be_ignored_and_reasons_are_named() -> None:
    bonded = chain_mod.Roster(VERIFY, frozenset(NAMES))
    plain = chain_mod.Roster(VERIFY, frozenset(NAMES), copy_screen=False)
    rounds = range(20)
    assert [plain.selected(RUN_ID, w, NAMES, ("m01",), 0) for w in rounds] == [
        bonded.selected(RUN_ID, w, NAMES, (), 0) for w in rounds
    ]
    assert bonded.reasons(0, "m01", ("m01",)) == ("outlier",)
    assert plain.reasons(0, "m01", ("m01",)) == ("random",)
    assert chain_mod.Roster(VERIFY).reasons(0, "m01", ()) == ("probation",)
