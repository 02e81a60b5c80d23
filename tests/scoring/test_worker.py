"""The delta-loss and step-throughput scorers, in the sandboxed worker and inline.

Workers are real processes (real time: no autojump clock here). Each test has an absolute
deadline so a hung worker fails fast.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import trio

from hypertrain.protocol.f32 import f32_from_hex
from hypertrain.scoring.outcome import ScoreOutcome
from hypertrain.scoring.registry import DELTA_LOSS, STEP_THROUGHPUT, Challenge
from hypertrain.scoring.sandbox import run_scorer, score_inline, worker_env
from hypertrain.trainer.codec import encode_dense_int8
from hypertrain.trainer.params import init_params
from tests.scoring.helpers import scoring_model

DEADLINE = 60.0


async def _both(challenge: Challenge, inputs: dict[str, Path]) -> list[ScoreOutcome]:
    out: list[ScoreOutcome] = []

    async def one() -> None:
        out.append(await run_scorer(challenge, inputs))

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(one)
            nursery.start_soon(one)
    return out


def _inline_in_a_configured_process(
    inputs: dict[str, Path], challenge: Challenge = DELTA_LOSS
) -> dict[str, object]:
    """score_inline in a fresh process that applied SCORING_ENV before importing torch."""
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from hypertrain.trainer.determinism import configure\n"
        "from hypertrain.scoring.jobs import SCORING_ENV\n"
        "configure(SCORING_ENV)\n"
        "from hypertrain.scoring.registry import get_challenge\n"
        "from hypertrain.scoring.sandbox import score_inline\n"
        "paths = {k: Path(v) for k, v in json.loads(sys.argv[1]).items()}\n"
        "print(json.dumps(score_inline(get_challenge(sys.argv[2]), paths).result))\n"
    )
    paths = json.dumps({k: str(v) for k, v in inputs.items()})
    argv = [sys.executable, "-c", code, paths, challenge.id]
    env = worker_env("/nonexistent-scratch")
    env.pop("TORCHINDUCTOR_CACHE_DIR")
    done = subprocess.run(argv, env=env, capture_output=True, check=True, timeout=DEADLINE)
    result: dict[str, object] = json.loads(done.stdout)
    return result


async def test_two_workers_agree_bit_for_bit_and_match_score_inline(
    job: dict[str, Path],
) -> None:
    first, second = await _both(DELTA_LOSS, job)
    assert first.ok, first
    assert first.result == second.result
    assert first.result is not None
    assert set(first.result) == {"loss", "fingerprint", "sequences", "losses"}
    assert first.result["sequences"] == 12
    inline = await trio.to_thread.run_sync(_inline_in_a_configured_process, job)
    assert inline == first.result


def test_inline_loss_of_init_weights_is_near_ln_vocab(
    job: dict[str, Path], configured: None
) -> None:
    model = scoring_model()
    zero = {n: a * 0 for n, a in init_params(model).items()}
    job["delta.bin"].write_bytes(encode_dense_int8(zero))
    outcome = score_inline(DELTA_LOSS, job)
    assert outcome.ok
    assert outcome.result is not None
    loss = f32_from_hex(outcome.result["loss"])
    assert loss == pytest.approx(math.log(model.vocab), rel=0.02)


def test_a_changed_delta_byte_changes_the_fingerprint(
    job: dict[str, Path], configured: None
) -> None:
    before = score_inline(DELTA_LOSS, job)
    payload = bytearray(job["delta.bin"].read_bytes())
    payload[-1] = (payload[-1] + 1) % 127  # a code of the last tensor's last value
    job["delta.bin"].write_bytes(bytes(payload))
    after = score_inline(DELTA_LOSS, job)
    assert before.ok
    assert after.ok
    assert before.result
    assert after.result
    assert before.result["fingerprint"] != after.result["fingerprint"]


async def test_bad_inputs_through_the_worker_name_the_file(job: dict[str, Path]) -> None:
    job["delta.bin"].write_bytes(job["delta.bin"].read_bytes()[:-7])
    with trio.fail_after(DEADLINE):
        outcome = await run_scorer(DELTA_LOSS, job)
        version = await run_scorer(attrs.evolve(DELTA_LOSS, version=2), job)
    assert (outcome.failure, outcome.error.split(":")[0]) == ("bad-input", "delta.bin")
    assert version.failure == "bad-input"
    assert "version 2" in version.error


async def test_bad_job_files_are_refused_before_spawning(job: dict[str, Path]) -> None:
    missing = {k: v for k, v in job.items() if k != "trace.u16"}
    renamed = dict(job) | {"../x": job["trace.u16"]}
    directory = dict(job) | {"trace.u16": job["trace.u16"].parent}
    relative = dict(job) | {"trace.u16": Path("trace.u16")}
    for inputs, problem in [
        (missing, "missing ['trace.u16']"),
        (renamed, "input name '../x'"),
        (directory, "not a regular file"),
        (relative, "not absolute"),
    ]:
        outcome = await run_scorer(DELTA_LOSS, inputs)
        assert (outcome.failure, outcome.wall_ms) == ("bad-input", 0)
        assert problem in outcome.error


async def test_step_throughput_fingerprints_agree(job: dict[str, Path]) -> None:
    inputs = {k: v for k, v in job.items() if k != "delta.bin"}
    first, second = await _both(STEP_THROUGHPUT, inputs)
    assert first.ok, first
    assert second.ok, second
    assert first.result is not None
    assert second.result is not None
    assert first.result["fingerprint"] == second.result["fingerprint"]
    for result in (first.result, second.result):
        speed = result["tokens_per_s"]
        assert isinstance(speed, float)
        assert math.isfinite(speed)
        assert speed > 0
    assert first.wall_ms < 30_000
