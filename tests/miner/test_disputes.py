"""The miner reacts to a MISMATCH by itself (issue 14): a glitch reruns to TRANSIENT, a faulty
miner that stands by its commitment contests and bisects down to the op it loses on, a rerun
that matches neither side accepts the fault; lost answers and restarts never repeat a step, a
referee that never comes is given up within bounds, honeypots and matched rounds never dispute.
Fake coordinator with an honest auditor (tests/miner/fake_dispute.py), virtual time, the tiny
manifest (H = 6, J = 2: leaves 0..3), windows [0,1], [1,2], [2,3] under ``carry`` (segments)
and the whole round under ``reset`` (full mode)."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from hypertrain.datasets.reader import Dataset
from hypertrain.miner.artifacts import RoundDir
from hypertrain.miner.config import MinerConfig, load_config
from hypertrain.miner.disputes import DisputeRecord
from hypertrain.miner.errors import ConfigError
from hypertrain.miner.faults import NO_FAULTS, Faults
from hypertrain.miner.honeypot import HoneypotMode
from hypertrain.miner.journal import Journal
from hypertrain.miner.main import build_parser
from hypertrain.miner.progress import Progress
from hypertrain.miner.rerun import dispute_recompute
from hypertrain.miner.round import DEFAULT_SETTINGS, RoundSettings
from hypertrain.miner.session import Summary, run_miner
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from hypertrain.rounds import bisection
from hypertrain.trainer.fault import Fault
from nurseries import run_inline
from tests.miner.fake import API
from tests.miner.fake_dispute import DisputingCoordinator

AUDITOR = Keypair.from_seed(b"\x09" * 32)
RUN_TIMEOUT = 3600.0  # virtual seconds: a hang guard
FAULT = Fault(t=3, layer=2, op="update", index=0)
"""Inner step 3 (leaf 2's interval [2, 4]), the tail's (layer n_layers = 2) update."""
OP_SPEC = "step=3;layer=2;op=update"
OTHER_FAULT = Fault(t=3, layer=2, op="update", index=1)


class Crash(Exception):
    """A simulated kill -9 at a hook point."""


@pytest.fixture(params=["segments", "full"])
def mode(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture
def run_manifest(run_manifest: RunManifest, mode: str) -> RunManifest:
    """The miner fixtures' manifest naming the auditor; ``reset`` for full-mode audits."""
    policy = "carry" if mode == "segments" else "reset"
    inner = attrs.evolve(run_manifest.inner, state_policy=policy)
    return attrs.evolve(run_manifest, auditors=(AUDITOR.ss58,), inner=inner)


@pytest.fixture
def fake(
    run_manifest: RunManifest,
    coord: Keypair,
    owner: Keypair,
    miner_key: Keypair,
    data_dir: Path,
    mode: str,
) -> DisputingCoordinator:
    return DisputingCoordinator(
        run_manifest, coord, owner, roster=[miner_key.ss58, AUDITOR.ss58],
        select=[miner_key.ss58], segments=((0, 1), (1, 2), (2, 3)), auditor=AUDITOR,
        samples=Dataset.open(data_dir).samples, mode=mode,
    )  # fmt: skip


def _config(tmp_path: Path, data_dir: Path) -> MinerConfig:
    return MinerConfig(
        api=API, keyfile=tmp_path / "unused.key", workdir=tmp_path / "work", data_dir=data_dir,
        poll_seconds=1.0, chunk_bytes=4096,
    )  # fmt: skip


async def _mine(
    fake: DisputingCoordinator,
    config: MinerConfig,
    key: Keypair,
    *,
    faults: Faults = NO_FAULTS,
    crash_at: str | None = None,
    mode: HoneypotMode = HoneypotMode.HONEST,
    settings: RoundSettings = DEFAULT_SETTINGS,
    progress: Progress | None = None,
    rounds: int = 1,
) -> Summary:
    def hook(point: str, w: int) -> None:
        if point == crash_at:
            raise Crash(point)

    with trio.fail_after(RUN_TIMEOUT):
        return await run_miner(
            config, key, rounds=rounds, start=0, transport=fake.transport(),
            progress=progress or Progress(io.StringIO()), hook=hook, configure=lambda env: None,
            faults=faults, mode=mode, settings=settings, run_sync=run_inline,
        )  # fmt: skip


async def _crash(fake: DisputingCoordinator, config: MinerConfig, key: Keypair, **kw: Any) -> None:
    with pytest.RaisesGroup(Crash, flatten_subgroups=True):
        await _mine(fake, config, key, **kw)


def _phases(config: MinerConfig, phase: str) -> list[dict[str, object]]:
    return Journal.load(config.workdir).all_of(0, phase)


async def test_a_glitch_is_rerun_to_transient_and_nothing_more(
    fake: DisputingCoordinator,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = _config(tmp_path, data_dir)
    summary = await _mine(fake, config, miner_key, faults=Faults(glitch=FAULT))
    assert summary.exit_code == 0
    assert fake.status[(0, miner_key.ss58)] == "TRANSIENT"
    assert summary.disputes == (DisputeRecord(0, "transient", "TRANSIENT"),)
    assert dict(fake.posts) == {"rerun": 1}
    assert [e["reason"] for e in _phases(config, "dispute_settled")] == ["transient"]
    assert summary.to_json()["disputes"][0]["classification"] == "TRANSIENT"


@pytest.mark.parametrize("mode", ["segments"], indirect=True)
async def test_a_glitch_in_a_later_round_reruns_from_the_kept_carried_in_state(
    fake: DisputingCoordinator,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Round 1's window [0, 1] starts from leaf_state_0.bin with the m, v and step carried in
    from round 0 (not a reset state): what the auditor replays from the served blob."""
    fake.rounds = 2
    glitch = Fault(t=1, layer=2, op="update", index=0)  # leaf 1 of round 1 only
    faults = Faults(glitch=glitch, glitch_rounds=frozenset({1}))
    summary = await _mine(fake, _config(tmp_path, data_dir), miner_key, faults=faults, rounds=2)
    assert summary.exit_code == 0
    hotkey = miner_key.ss58
    assert (fake.status[(0, hotkey)], fake.status[(1, hotkey)]) == ("MATCH", "TRANSIENT")
    assert summary.disputes == (DisputeRecord(1, "transient", "TRANSIENT"),)


async def test_a_faulty_miner_contests_and_bisects_down_to_the_op_it_loses_on(
    mode: str,
    fake: DisputingCoordinator,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = _config(tmp_path, data_dir)
    summary = await _mine(fake, config, miner_key, faults=Faults(fault=FAULT))
    assert fake.reruns[(0, miner_key.ss58)] == "CONTEST"
    (dispute,) = fake.disputes.values()
    assert dispute.first_bad_leaf == 2
    levels = [b["level"] for b in dispute.bisects if b["role"] == "miner"]
    assert levels[0] == "step"
    assert levels[-1] == "op"
    assert "layer" in levels
    assert [e["level"] for e in _phases(config, "bisected")] == levels
    # each Bisect holds the miner's own faulty recomputation's hashes at the stage's points
    mine = dispute_recompute(
        fake.manifest, fake.run_id, RoundDir(config.workdir, 0), None if mode == "full" else 1,
        fake.samples, FAULT,
    )  # fmt: skip
    for b in dispute.bisects:
        where = {k: b[k] for k in ("t", "layer") if b[k] is not None}
        stage = bisection.Stage(b["level"], *b["interval"], b["N"], **where)
        if b["role"] == "miner":
            assert b["hashes"] == mine.hashes(stage)
        else:  # the honest auditor agrees at each stage's start, not at its end (the fault)
            assert b["hashes"][0] == mine.hashes(stage)[0]
            assert b["hashes"][-1] != mine.hashes(stage)[-1]
    assert dispute.outcome is not None
    assert dispute.outcome["op_spec"] == OP_SPEC
    (record,) = summary.disputes
    assert record == DisputeRecord(
        0, "resolved", "CONTEST", dispute.id, "contest", "resolved", miner_key.ss58, "miner",
        "referee", OP_SPEC,
    )  # fmt: skip
    assert fake.posts == {"rerun": 1, "dispute": 1, "bisect": len(levels)}


async def test_a_rerun_that_matches_neither_side_accepts_the_fault(
    fake: DisputingCoordinator,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = _config(tmp_path, data_dir)
    faults = Faults(fault=FAULT, glitch=OTHER_FAULT)  # committed glitched, rerun faulty
    summary = await _mine(fake, config, miner_key, faults=faults)
    assert fake.reruns[(0, miner_key.ss58)] == "FAULT"
    (record,) = summary.disputes
    assert (record.reason, record.action, record.state) == ("accepted", "accept", "accepted")
    assert fake.posts == {"rerun": 1, "dispute": 1}


async def test_lost_answers_and_restarts_never_repeat_a_step(
    fake: DisputingCoordinator,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = _config(tmp_path, data_dir)
    progress = Progress(io.StringIO())
    faults = Faults(fault=FAULT)
    fake.drop_answers = {"rerun", "dispute"}  # handled, answer lost: the retry meets a 409
    for point in ("rerun_computed", "reran", "disputed", "bisected"):
        await _crash(fake, config, miner_key, faults=faults, crash_at=point, progress=progress)
    summary = await _mine(fake, config, miner_key, faults=faults, progress=progress)
    assert [r.reason for r in summary.disputes] == ["resolved"]
    assert fake.posts["rerun"] == 2
    assert fake.posts["dispute"] == 2
    assert len([line for line in progress.lines if "rerun-computing" in line]) == 1
    assert len(_phases(config, "reran")) == 1
    assert len(_phases(config, "disputed")) == 1
    assert _phases(config, "reran")[0]["classification"] == "CONTEST"
    again = await _mine(fake, config, miner_key, faults=faults)
    assert again.disputes == summary.disputes  # settled: read from the journal, nothing posted
    assert fake.posts["rerun"] == 2


@pytest.mark.parametrize("mode", ["segments"], indirect=True)
async def test_a_referee_that_never_comes_is_given_up_after_the_grace(
    fake: DisputingCoordinator,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake.referee_rounds = None
    config = _config(tmp_path, data_dir)
    settings = attrs.evolve(DEFAULT_SETTINGS, dispute_grace_seconds=200.0)
    summary = await _mine(fake, config, miner_key, faults=Faults(fault=FAULT), settings=settings)
    (record,) = summary.disputes
    assert record.reason.startswith("gave-up: the dispute did not move while waiting for the ref")
    assert record.state is None
    assert record.dispute_id is not None
    (dispute,) = fake.disputes.values()
    waited = trio.current_time() - (dispute.referee_round - 1) * fake.manifest.beacon.period
    assert 200.0 <= waited <= 200.0 + 2 * config.poll_seconds + fake.manifest.beacon.period
    assert _phases(config, "dispute_settled") == []  # a restart looks again


@pytest.mark.parametrize("mode", ["segments"], indirect=True)
async def test_a_silent_auditor_is_waited_for_until_the_stage_deadline_and_the_grace(
    fake: DisputingCoordinator,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake.auditor_silent = True
    config = _config(tmp_path, data_dir)
    settings = attrs.evolve(DEFAULT_SETTINGS, dispute_grace_seconds=50.0)
    summary = await _mine(fake, config, miner_key, faults=Faults(fault=FAULT), settings=settings)
    (record,) = summary.disputes
    assert record.reason == "gave-up: the dispute did not move while waiting for the auditor"
    (dispute,) = fake.disputes.values()
    assert [b["role"] for b in dispute.bisects] == ["miner"]  # its one stage, once
    period = fake.manifest.beacon.period
    deadline_time = (dispute.stage_round + fake.manifest.verify.T.dispute_per_level - 1) * period
    assert deadline_time + 50.0 <= trio.current_time() <= deadline_time + 50.0 + 2 * period + 1


@pytest.mark.parametrize("mode", ["segments"], indirect=True)
async def test_a_coordinator_that_stops_answering_is_given_up_after_the_grace(
    fake: DisputingCoordinator,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake.unavailable = True  # the dispute opens, its view never answers
    config = _config(tmp_path, data_dir)
    settings = attrs.evolve(DEFAULT_SETTINGS, dispute_grace_seconds=100.0)
    summary = await _mine(fake, config, miner_key, faults=Faults(fault=FAULT), settings=settings)
    (record,) = summary.disputes
    silent = re.fullmatch(r"gave-up: no answer from the coordinator for (\d+)s", record.reason)
    assert silent is not None, record.reason
    assert 100 <= int(silent.group(1)) <= 100 + 2 * DEFAULT_SETTINGS.step_retry_seconds
    assert fake.posts == {"rerun": 1, "dispute": 1}
    (dispute,) = fake.disputes.values()
    started = (dispute.opened_round - 1) * fake.manifest.beacon.period
    retries = DEFAULT_SETTINGS.step_retry_seconds + config.poll_seconds  # one poll's tries
    assert started + 100.0 <= trio.current_time() <= started + 100.0 + 2 * retries


@pytest.mark.parametrize("mode", ["segments"], indirect=True)
async def test_a_matched_round_is_settled_without_a_step(
    fake: DisputingCoordinator,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = _config(tmp_path, data_dir)
    summary = await _mine(fake, config, miner_key)
    assert fake.status[(0, miner_key.ss58)] == "MATCH"
    assert summary.disputes == ()
    assert not fake.posts
    assert [e["reason"] for e in _phases(config, "dispute_settled")] == ["verdict MATCH"]


@pytest.mark.parametrize("mode", ["segments"], indirect=True)
async def test_a_honeypot_never_disputes(
    fake: DisputingCoordinator,
    miner_key: Keypair,
    tmp_path: Path,
    data_dir: Path,
    configured: None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    config = _config(tmp_path, data_dir)
    summary = await _mine(fake, config, miner_key, mode=HoneypotMode.NOISE)
    fake.view(0)  # the auditor replays what was served
    assert fake.status[(0, miner_key.ss58)] == "MISMATCH"
    assert summary.disputes == ()
    assert not fake.posts
    assert _phases(config, "dispute_settled") == []


@pytest.mark.parametrize("key", ["fault", "glitch", "faults"])
def test_the_fault_injection_is_reachable_from_neither_the_cli_nor_the_config(
    key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--config", "miner.toml", f"--{key}", "x"])
    assert "unrecognized arguments" in capsys.readouterr().err
    path = tmp_path / "miner.toml"
    path.write_text(f'api = "http://127.0.0.1:1"\nkeyfile = "k"\nworkdir = "w"\n{key} = "x"\n')
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(path, environ={})
    path.write_text('api = "http://127.0.0.1:1"\nkeyfile = "k"\nworkdir = "w"\n')
    with pytest.raises(ConfigError, match="unknown miner setting"):
        load_config(path, environ={f"HYPERTRAIN_MINER_{key.upper()}": "x"})
