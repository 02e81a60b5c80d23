"""The miner answers segment audits (issue 13): leaf states kept bit for bit, challenges in the
round view served (grant, PUT, StateServe with a proof against the Commit's leaves_root),
restarts that never serve twice, challenges not sealed by K_coord ignored, and a run that waits
after its last round until its audits settle, within bounds. Fake coordinator, virtual time,
the tiny carry manifest (H = 6, J = 2: leaves 0..3, windows [0,1], [1,2], [2,3])."""

from __future__ import annotations

import io
import json
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from hypertrain.datasets.reader import Dataset
from hypertrain.miner.artifacts import RoundDir, leaf_state_file
from hypertrain.miner.auditserve import Served
from hypertrain.miner.config import MinerConfig
from hypertrain.miner.journal import Journal
from hypertrain.miner.progress import Progress
from hypertrain.miner.round import RoundStatus
from hypertrain.miner.serves import prepare_serve
from hypertrain.miner.session import Summary, run_miner
from hypertrain.protocol.converter import structure
from hypertrain.protocol.hashes import tensor_root
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.merkle import verify_proof
from hypertrain.protocol.messages import LeafPreimage
from hypertrain.protocol.tensorhash import th_bytes
from hypertrain.trainer.leaves import preimage_digest, stage_states
from hypertrain.trainer.loop import train_round
from hypertrain.trainer.params import init_params
from hypertrain.trainer.state import pack_state
from tests.miner.fake import API, DEADLINES
from tests.miner.fake_audit import AuditingCoordinator

OTHER = Keypair.from_seed(b"\x09" * 32)
D_AUDIT = DEADLINES[0][3]
RUN_TIMEOUT = 3600.0  # virtual seconds: a hang guard, far beyond any serve deadline here


@pytest.fixture
def run_manifest(run_manifest: RunManifest) -> RunManifest:
    """The miner fixtures' manifest naming an auditor: only such a run is audited, and only
    then does a miner wait for its audits after its last round."""
    return attrs.evolve(run_manifest, auditors=(OTHER.ss58,))


class Crash(Exception):
    """A simulated kill -9 at a hook point."""


def _config(tmp_path: Path, data_dir: Path) -> MinerConfig:
    return MinerConfig(
        api=API, keyfile=tmp_path / "unused.key", workdir=tmp_path / "work", data_dir=data_dir,
        poll_seconds=1.0, chunk_bytes=4096,
    )  # fmt: skip


async def _mine(
    fake: AuditingCoordinator,
    config: MinerConfig,
    key: Keypair,
    *,
    rounds: int = 1,
    crash_at: str | None = None,
) -> tuple[Summary, Progress]:
    progress = Progress(io.StringIO())
    crashed: list[str] = []

    def hook(point: str, w: int) -> None:
        if point == crash_at and not crashed:
            crashed.append(point)
            raise Crash(point)

    with trio.fail_after(RUN_TIMEOUT):
        summary = await run_miner(
            config, key, rounds=rounds, start=0, transport=fake.transport(), progress=progress,
            hook=hook, configure=lambda env: None,
        )  # fmt: skip
    return summary, progress


@pytest.fixture
def fake(
    run_manifest: RunManifest, coord: Keypair, owner: Keypair, miner_key: Keypair
) -> AuditingCoordinator:
    return AuditingCoordinator(
        run_manifest, coord, owner, roster=[miner_key.ss58, OTHER.ss58], select=[miner_key.ss58]
    )


def _lines(progress: Progress, phase: str) -> list[str]:
    return [line for line in progress.lines if f": {phase}" in line]


async def test_the_leaf_states_written_are_train_rounds_bit_for_bit_and_what_was_committed(
    fake: AuditingCoordinator,
    miner_key: Keypair,
    run_manifest: RunManifest,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake.select = []  # not selected: this test is about what is kept
    config = _config(tmp_path, data_dir)
    summary, _ = await _mine(fake, config, miner_key)
    assert summary.exit_code == 0
    rd = RoundDir(config.workdir, 0)
    samples = rd.read_json("samples.json")
    want = train_round(
        run_manifest, fake.run_id, 0, init_params(run_manifest.model), samples,
        Dataset.open(data_dir).samples, None, keep_leaf_states=True,
    )  # fmt: skip
    n_leaves = run_manifest.inner.H // run_manifest.inner.J + 1
    assert len(want.leaf_states) == n_leaves
    kept = sorted(p.name for p in rd.path.glob("leaf_state_*.bin"))
    assert kept == sorted(leaf_state_file(k) for k in range(n_leaves))
    preimages = [structure(LeafPreimage, p) for p in rd.read_json("preimages.json")]
    commit = fake.stored_commits[(0, miner_key.ss58)]
    model, layout = run_manifest.model, run_manifest.reference_spec.layout
    for k, state in enumerate(want.leaf_states):
        m, v, step = state.opt.m, state.opt.v, state.opt.step
        assert rd.read_bytes(leaf_state_file(k)) == pack_state(state.theta, m, v, step)
        assert stage_states(state.theta, m, v, model.n_layers, layout.pp) == preimages[k].stages
        served = prepare_serve(rd, run_manifest, miner_key.ss58, "ab" * 32, k).body
        assert served.t == k * run_manifest.inner.J == preimages[k].t
        assert served.tensor_root == tensor_root(th_bytes(state.theta), th_bytes(m), th_bytes(v),
                                                 step)  # fmt: skip
        proof = [bytes.fromhex(p) for p in served.merkle_proof_leaf_in_leaves_root]
        root = bytes.fromhex(commit["leaves_root"])
        assert verify_proof(preimage_digest(preimages[k]), k, n_leaves, proof, root)
    # the last leaf's state is the round's end state
    assert rd.read_bytes(leaf_state_file(n_leaves - 1)) == rd.read_bytes("final_state.bin")


async def test_full_mode_keeps_no_leaf_state(
    run_manifest: RunManifest,
    coord: Keypair,
    owner: Keypair,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    reset = attrs.evolve(run_manifest, inner=attrs.evolve(run_manifest.inner, state_policy="reset"))
    fake = AuditingCoordinator(
        reset, coord, owner, roster=[miner_key.ss58], select=[miner_key.ss58]
    )
    config = _config(tmp_path, data_dir)
    summary, progress = await _mine(fake, config, miner_key)
    assert summary.exit_code == 0
    rd = RoundDir(config.workdir, 0)
    assert rd.exists("final_state.bin")
    assert not list(rd.path.glob("leaf_state_*"))
    assert fake.blob_grants == fake.state_posts == 0
    assert not _lines(progress, "audit-settled")  # nothing was watched by the audit server
    # the dispute follower waited for the verdict (this fake gives none), within its bound
    assert any("reason=gave-up" in line for line in _lines(progress, "dispute-settled"))
    assert D_AUDIT < fake.now() <= fake.serve_deadline(0) + 120 // fake.manifest.beacon.period + 2


async def test_a_challenge_in_the_view_is_served_at_once_and_verifies(
    fake: AuditingCoordinator,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = _config(tmp_path, data_dir)
    summary, progress = await _mine(fake, config, miner_key)
    assert summary.exit_code == 0
    _, ch = fake.challenge(0, miner_key.ss58)
    # the fake's state route checked each one (blob, tensor_root, stages, proof)
    assert sorted(fake.serves) == [(ch, 0), (ch, 4)]
    assert fake.state_posts == fake.blob_grants == 2
    assert summary.served == (Served(0, 0, ch), Served(0, 4, ch))
    assert summary.to_json()["served"] == [
        {"w": 0, "t": 0, "challenge_hash": ch}, {"w": 0, "t": 4, "challenge_hash": ch},
    ]  # fmt: skip
    served = [e for e in Journal.load(config.workdir).events if e["phase"] == "served"]
    assert [(e["w"], e["challenge_hash"], e["t"]) for e in served] == [(0, ch, 0), (0, ch, 4)]
    assert len(_lines(progress, "served")) == 2
    assert not _lines(progress, "audit-ignored")  # the scoring job in `jobs` is skipped quietly
    # served as soon as the challenge appeared, and the run ended once all was served
    posts = [d for d, what in fake.events if what.startswith("state")]
    assert len(posts) == 2
    assert all(D_AUDIT <= d <= D_AUDIT + 1 for d in posts)
    assert fake.now() <= D_AUDIT + 2 < fake.serve_deadline(0)
    assert any("reason=served" in line for line in _lines(progress, "audit-settled"))


async def test_serving_runs_beside_the_round_loop(
    fake: AuditingCoordinator,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake.rounds, fake.draw_at = 2, DEADLINES[1][0]  # round 0's draw while round 1 is under way
    config = _config(tmp_path, data_dir)
    summary, _ = await _mine(fake, config, miner_key, rounds=2)
    assert [r.status for r in summary.rounds] == [RoundStatus.UPLOADED] * 2
    order = [what for _, what in fake.events]
    assert order.index("state w=0 t=0") < order.index("delta w=1")
    assert {(s.w, s.t) for s in summary.served} == {(0, 0), (0, 4), (1, 0), (1, 4)}


@pytest.mark.parametrize("list_serves", [True, False])
async def test_a_restart_after_serving_serves_nothing_again(
    list_serves: bool,
    fake: AuditingCoordinator,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake.list_serves = list_serves  # not listed: only the journal knows what was served
    config = _config(tmp_path, data_dir)
    await _mine(fake, config, miner_key)
    assert fake.state_posts == 2
    again, progress = await _mine(fake, config, miner_key)
    assert again.exit_code == 0
    assert again.served == ()
    assert (fake.state_posts, fake.blob_grants) == (2, 2)
    assert any("reason=served" in line for line in _lines(progress, "audit-settled"))


@pytest.mark.parametrize("list_serves", [True, False])
async def test_a_crash_between_the_post_and_the_journal_never_serves_twice(
    list_serves: bool,
    fake: AuditingCoordinator,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake.list_serves = list_serves
    config = _config(tmp_path, data_dir)
    with pytest.raises(ExceptionGroup) as info:
        await _mine(fake, config, miner_key, crash_at="serve_posted")
    assert info.group_contains(Crash)
    _, ch = fake.challenge(0, miner_key.ss58)
    assert list(fake.serves) == [(ch, 0)]  # stored, but not journaled
    assert Journal.load(config.workdir).served(0) == frozenset()
    summary, _ = await _mine(fake, config, miner_key)
    assert summary.exit_code == 0
    assert sorted(fake.serves) == [(ch, 0), (ch, 4)]
    assert Journal.load(config.workdir).served(0) == {(ch, 0), (ch, 4)}
    served = [e for e in Journal.load(config.workdir).events if e["phase"] == "served"]
    assert len(served) == 2
    # listed by the view: journaled without a post; not listed: the identical re-post is a 200
    assert fake.state_posts == (2 if list_serves else 3)
    assert [s.t for s in summary.served] == ([4] if list_serves else [0, 4])


async def test_a_challenge_not_sealed_by_k_coord_is_ignored_until_the_deadline(
    fake: AuditingCoordinator,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake.challenge_signer = OTHER
    summary, progress = await _mine(fake, _config(tmp_path, data_dir), miner_key)
    assert summary.exit_code == 0  # the round was mined; the coordinator's fault is logged
    assert fake.blob_grants == fake.state_posts == 0
    assert summary.served == ()
    ignored = _lines(progress, "audit-ignored")
    assert len(ignored) == 1
    assert "does not verify" in ignored[0] or "may not sign" in ignored[0]
    assert any("reason=deadline" in line for line in _lines(progress, "audit-settled"))
    assert fake.now() == fake.serve_deadline(0) + 1


async def test_after_the_last_round_the_run_waits_for_the_draw_then_exits(
    fake: AuditingCoordinator,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake.select = [OTHER.ss58]  # the draw picks someone else
    summary, progress = await _mine(fake, _config(tmp_path, data_dir), miner_key)
    assert summary.exit_code == 0
    uploaded = next(d for d, what in fake.events if what == "delta w=0")
    assert uploaded < D_AUDIT <= fake.now() <= D_AUDIT + 1
    assert any("reason=not-selected" in line for line in _lines(progress, "audit-settled"))
    assert fake.state_posts == 0


async def test_a_draw_that_never_comes_is_waited_for_until_the_serve_deadline(
    fake: AuditingCoordinator,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake.draw_at = 10**9
    _, progress = await _mine(fake, _config(tmp_path, data_dir), miner_key)
    assert fake.now() == fake.serve_deadline(0) + 1
    assert any("reason=deadline" in line for line in _lines(progress, "audit-settled"))


async def test_a_stalled_beacon_is_waited_for_only_until_the_serve_deadlines_time(
    fake: AuditingCoordinator,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake.freeze_at = DEADLINES[0][2] + 5  # D stops after the upload, before the draw
    config = _config(tmp_path, data_dir)
    summary, progress = await _mine(fake, config, miner_key)
    assert summary.exit_code == 0
    received = Journal.load(config.workdir).phases(0)["committed"]["received_round"]
    period, grace = fake.manifest.beacon.period, 120.0  # RoundSettings.serve_grace_seconds
    # watched from about the Receipt's time, (received - 1) * period: given up
    # (serve_deadline - received) * period + grace later, whatever D says
    left = (fake.serve_deadline(0) - received) * period + grace
    assert left <= trio.current_time() <= received * period + left + config.poll_seconds
    assert any("reason=gave-up" in line for line in _lines(progress, "audit-settled"))


async def test_network_failures_while_serving_are_retried_and_never_reach_the_round(
    fake: AuditingCoordinator,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake.fail_blob_puts = 4  # retried within the call, until the serve deadline's time
    summary, progress = await _mine(fake, _config(tmp_path, data_dir), miner_key)
    assert summary.exit_code == 0
    _, ch = fake.challenge(0, miner_key.ss58)
    assert sorted(fake.serves) == [(ch, 0), (ch, 4)]
    assert len(_lines(progress, "serve-retry")) == 4
    assert json.loads(json.dumps(summary.to_json()))["ok"] is True
