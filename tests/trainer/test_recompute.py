"""A party's recomputation and the referee (issue 14): states, leaves, whole bisections."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

from hypertrain.protocol.manifest import RunManifest
from hypertrain.rounds import bisection
from hypertrain.rounds.bisection import Party, RefereeCase
from hypertrain.trainer.fault import Fault
from hypertrain.trainer.leaves import preimage_digest
from hypertrain.trainer.loop import Stepper, train_round
from hypertrain.trainer.recompute import Recompute
from hypertrain.trainer.trace import state_hash
from tests.trainer.disputes import Round, W, make_round, small_manifest, spreading_fault
from tests.trainer.helpers import RUN_ID
from tests.trainer.test_trace import _same_state


def _recompute(rd: Round, fault: Fault | None = None, start_leaf: int = 0) -> Recompute:
    start = rd.start if start_leaf == 0 else rd.state_before(start_leaf * rd.manifest.inner.J + 1)
    return Recompute(rd.manifest, RUN_ID, W, rd.ids, rd.rows, start, fault)


def first_bad_leaf(miner: Recompute, auditor: Recompute) -> int:
    """The first leaf whose digests differ (what the audit's verdict names)."""
    inner = miner.manifest.inner
    first = miner.start.t // inner.J + 1
    for k in range(first, inner.H // inner.J + 1):
        if miner.leaf_digest(k) != auditor.leaf_digest(k):
            return k
    raise AssertionError("the parties agree on every leaf")


def bisect(miner: Recompute, auditor: Recompute, arity: int) -> RefereeCase:
    """A whole dispute between two recomputations, stage by stage, as the coordinator runs it
    (``agreed_step`` is the hash both published at the step before the one bisected)."""
    n, J = miner.n_layers, miner.manifest.inner.J  # noqa: N806
    leaf = first_bad_leaf(miner, auditor)
    stage = bisection.first_stage(leaf, J, n, arity)
    agreed_step: str | None = None
    for _ in range(64):
        ours, theirs = miner.hashes(stage), auditor.hashes(stage)
        after = bisection.advance(
            n, stage, ours, theirs, arity, first_bad_leaf=leaf, agreed_step=agreed_step
        )
        if isinstance(after, RefereeCase):
            return after
        if stage.level == "step" and after.level == "layer":
            assert after.t is not None
            agreed_step = bisection.claims(n, stage, ours)[bisection.Point("step", after.t - 1)]
        stage = after
    raise AssertionError("the bisection does not end")


FAULTS = [(0, "embed"), (1, "attn"), (2, "update")]


@pytest.mark.parametrize("faulty", ["miner", "auditor"])
@pytest.mark.parametrize(("layer", "op"), FAULTS)
@pytest.mark.parametrize("J", [1, 4])
@pytest.mark.parametrize("grad_accum", [1, 2])
def test_a_bisection_names_the_faulted_op_and_the_referee_the_faulty_party(
    manifest: RunManifest,
    grad_accum: int,
    J: int,  # noqa: N803
    layer: int,
    op: str,
    faulty: Party,
) -> None:
    rd = make_round(small_manifest(manifest, grad_accum=grad_accum, J=J))
    fault = spreading_fault(rd, 3, layer, op)
    honest, wrong = _recompute(rd), _recompute(rd, fault)
    miner, auditor = (wrong, honest) if faulty == "miner" else (honest, wrong)
    case = bisect(miner, auditor, arity=2)
    assert case.kind == "op"
    assert case.op_spec == f"step=3;layer={layer};op={op}"
    assert case.agreed_step == (None if J == 1 else honest.step_hash(2))
    ruling, output = _recompute(rd).judge(case)
    assert ruling.loser == faulty
    assert output == honest.point_hash(case.point)
    assert case.agreed is not None
    assert case.agreed_hash == honest.point_hash(case.agreed) == wrong.point_hash(case.agreed)


@pytest.mark.parametrize("faulty", ["miner", "auditor"])
@pytest.mark.parametrize("J", [1, 2])
def test_a_wrong_loss_ends_at_the_leaf_and_the_referee_rebuilds_it(
    manifest: RunManifest,
    J: int,  # noqa: N803
    faulty: Party,
) -> None:
    """A leaf records its last step's loss: the fault is at step 4, leaf 4 / J's last."""
    rd = make_round(small_manifest(manifest, J=J))
    honest, wrong = _recompute(rd), _recompute(rd, Fault(4, 2, "loss"))
    miner, auditor = (wrong, honest) if faulty == "miner" else (honest, wrong)
    case = bisect(miner, auditor, arity=3)
    leaf = 4 // J
    assert (case.kind, case.leaf, case.op_spec) == ("leaf", leaf, f"leaf={leaf}")
    committed = miner.leaf_digest(leaf).hex()
    ruling, output = _recompute(rd).judge(case, committed_leaf=committed)
    assert ruling.loser == faulty
    assert output == honest.leaf_digest(leaf).hex()


def test_a_leaf_case_rules_on_the_committed_digest(manifest: RunManifest) -> None:
    """Honest states, but the miner committed leaf 2 with another loss: the miner loses; with
    the honest digest the auditor does."""
    rd = make_round(small_manifest(manifest, J=2))
    referee = _recompute(rd)
    n = rd.manifest.model.n_layers
    stage = bisection.first_stage(2, 2, n, 2)
    same = referee.hashes(stage)
    case = bisection.advance(n, stage, same, same, 2, first_bad_leaf=2, agreed_step=None)
    assert isinstance(case, RefereeCase)
    assert case.kind == "leaf"
    stepper = Stepper(rd.manifest, RUN_ID, W, rd.ids, rd.rows, referee.state_at(2))
    stepper.step()
    stepper.step()
    honest = stepper.leaf()
    loss = np.float32(stepper.losses[-1]) + np.float32(0.5)
    other = preimage_digest(
        attrs.evolve(honest.preimage, loss_f32=np.array(loss, "<f4").tobytes().hex())
    )
    assert other != honest.digest
    assert referee.judge(case, committed_leaf=other.hex())[0].loser == "miner"
    ruling, output = referee.judge(case, committed_leaf=honest.digest.hex())
    assert (ruling.loser, output) == ("auditor", honest.digest.hex())
    with pytest.raises(ValueError, match="committed leaf"):
        referee.judge(case)


def test_a_disputed_start_is_decided_on_the_referees_state(manifest: RunManifest) -> None:
    """Segments mode, the auditor replays window [1, 2] from a state that is not leaf 1's: the
    first hashes differ and the referee, from the honest served state, rules for the miner."""
    rd = make_round(small_manifest(manifest, J=2))
    miner, referee = _recompute(rd, start_leaf=1), _recompute(rd, start_leaf=1)
    served = miner.start
    theta = {n: p.copy() for n, p in served.theta.items()}
    theta["head.weight"][0, 0] += 1
    auditor = Recompute(rd.manifest, RUN_ID, W, rd.ids, rd.rows, attrs.evolve(served, theta=theta))
    n = rd.manifest.model.n_layers
    stage = bisection.first_stage(2, 2, n, 2)
    case = bisection.advance(
        n, stage, miner.hashes(stage), auditor.hashes(stage), 2, first_bad_leaf=2, agreed_step=None
    )
    assert isinstance(case, RefereeCase)
    assert (case.kind, case.point) == ("start", bisection.Point("step", 2))
    ruling, output = referee.judge(case)
    assert (ruling.loser, output) == ("auditor", state_hash(served))


@pytest.mark.parametrize("grad_accum", [1, 2])
def test_states_traces_and_leaves_are_the_training_rounds(
    manifest: RunManifest, grad_accum: int
) -> None:
    small = small_manifest(manifest, grad_accum=grad_accum, J=2)
    rd = make_round(small)
    trained = train_round(small, RUN_ID, W, rd.start.theta, rd.ids, rd.rows, keep_leaf_states=True)
    full, window = _recompute(rd), _recompute(rd, start_leaf=1)
    for rc in (full, window):
        assert rc.leaf_digest(2) == trained.leaves[2].digest
        assert _same_state(rc.state_at(4), trained.leaf_states[2])
        assert _same_state(rc.trace(3).after, rc.state_at(3))
        assert rc.trace(3).before_hash == rc.step_hash(2)
        assert rc.point_hash(bisection.Point("layer", 3, None, 3)) == rc.step_hash(3)
    assert full.leaf_digest(1) == trained.leaves[1].digest
    for bad in (lambda: window.state_at(1), lambda: window.leaf_digest(1), lambda: full.trace(0)):
        with pytest.raises(ValueError, match="outside"):
            bad()


def test_repeated_queries_do_not_replay_from_the_start(
    manifest: RunManifest, monkeypatch: pytest.MonkeyPatch
) -> None:
    rd = make_round(small_manifest(manifest, J=2))
    rc = _recompute(rd)
    steps: list[int] = []
    real = Stepper.step

    def counted(self: Stepper, *args: object, **kwargs: object) -> None:
        steps.append(self.t + 1)
        real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Stepper, "step", counted)
    rc.state_at(4)
    assert steps == [1, 2, 3, 4]
    rc.state_at(3), rc.state_at(4), rc.step_hash(2)
    assert steps == [1, 2, 3, 4, 3]  # from the state at leaf 1 (t = 2)
    rc.trace(4), rc.trace(4)
    assert steps == [1, 2, 3, 4, 3, 4]
    rc.leaf_digest(2)
    assert steps == [1, 2, 3, 4, 3, 4, 3, 4]
    rc.leaf_digest(2)
    assert len(steps) == 8
