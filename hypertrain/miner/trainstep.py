"""The TRAIN phase of a round: carry in, train, compress, seal the Commit, save the artifacts.

Imports torch (through :mod:`hypertrain.miner.training`): :mod:`hypertrain.miner.round` imports
it lazily, after :func:`hypertrain.trainer.determinism.configure` ran.

- optimizer state in: under ``state_policy = carry`` the ``m, v, step`` of the previous round's
  ``final_state.bin`` when this miner has it, else a reset state;
- ``ef_in``: the previous round's ``ef_out.bin`` when present, else zeros; ``ef_beta`` is the
  manifest's ``outer.ef_beta``;
- under ``carry`` the state at every leaf (``leaf_state_{k}.bin``, what segment audits ask the
  miner to serve); under ``reset``/``derived`` the audit replays the whole round (full mode),
  so none is kept, only the start theta (``start_state.bin``, what a rerun after a MISMATCH
  replays from: :mod:`hypertrain.miner.rerun`);
- the training runs with the test-only fault of the round (``runner.faults``,
  :mod:`hypertrain.miner.faults`), if any;
- the Commit (spec 5.5) is sealed here with ``exp_drand = d_final`` and stored whole in
  ``commit.json``, so a restart re-posts the very same bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hypertrain.miner.artifacts import START_STATE_FILE, RoundDir, leaf_state_file
from hypertrain.miner.training import train_round_async
from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.envelope import seal
from hypertrain.protocol.f32 import f32_from_hex
from hypertrain.protocol.messages import Commit, RoundOpen
from hypertrain.protocol.tensorhash import th_hex
from hypertrain.rounds.assignment import Assignment
from hypertrain.trainer.codec import compress
from hypertrain.trainer.loop import Moments
from hypertrain.trainer.params import F32Array
from hypertrain.trainer.state import pack_state

if TYPE_CHECKING:
    from hypertrain.miner.round import RoundRunner

__all__ = ["carried_state", "previous_ef_out", "train_and_save"]


def carried_state(runner: RoundRunner, w: int) -> Moments | None:
    """The optimizer state carried into round ``w`` (None: reset)."""
    if w == 0 or runner.manifest.inner.state_policy != "carry":
        return None
    prev = RoundDir(runner.config.workdir, w - 1)
    if not prev.exists("final_state.bin"):
        return None
    state = prev.read_state("final_state.bin")
    if state.m is None or state.v is None or state.step is None:
        return None
    return Moments(m=state.m, v=state.v, step=state.step)


def previous_ef_out(runner: RoundRunner, w: int) -> dict[str, F32Array] | None:
    """The previous round's ``ef_out`` (this round's ``ef_in``), None when absent."""
    prev = RoundDir(runner.config.workdir, w - 1)
    if w == 0 or not prev.exists("ef_out.bin"):
        return None
    return prev.read_state("ef_out.bin").theta


async def train_and_save(
    runner: RoundRunner,
    w: int,
    rd: RoundDir,
    ro: RoundOpen,
    mine: Assignment,
    theta_start: dict[str, F32Array],
) -> None:
    """Train round ``w`` and durably write every artifact the Commit depends on."""
    manifest = runner.manifest
    inner = manifest.inner
    runner.progress.phase(w, "training", H=inner.H, mode=runner.mode.value)
    per_step = inner.micro_batch * inner.grad_accum * manifest.model.seq_len
    report = runner.progress.step_reporter(w, per_step)

    def on_step(t: int, total: int, loss: float) -> None:
        report(t, total, loss)
        if runner.hook is not None:
            runner.hook("step", w)  # mid-training: after each inner step

    result = await train_round_async(
        manifest,
        runner.run_id,
        w,
        theta_start,
        mine.samples,
        runner.samples,
        carried_state(runner, w),
        mode=runner.mode,
        on_step=on_step,
        keep_leaf_states=inner.state_policy == "carry",
        fault=runner.faults.training(w),
    )
    ef_in = previous_ef_out(runner, w)
    beta = float(f32_from_hex(manifest.outer.ef_beta))
    packed = compress(result.delta, ef_in, beta)
    zeros = {n: np.zeros_like(a) for n, a in result.delta.items()}
    commit = Commit(
        w=w,
        hotkey=runner.keypair.ss58,
        leaf_scheme="ht-leaf-v1",
        n_leaves=len(result.leaves),
        leaves_root=result.leaves_root,
        metrics_root=result.metrics_root,
        final_theta_hash=th_hex(result.theta_end),
        ef_in_hash=th_hex(ef_in if ef_in is not None else zeros),
        ef_out_hash=packed.ef_out_hash(),
        delta_hash=packed.delta_hash(),
        delta_bytes=packed.delta_bytes,
        tokens=result.tokens,
    )
    envelope = seal(runner.keypair, "Commit", runner.run_id, commit, ro.d_final)
    opt = result.opt_state_out
    rd.write_json("round_open.json", unstructure(ro))
    rd.write_json("samples.json", list(mine.samples))
    rd.write_bytes("delta.bin", packed.payload)
    rd.write_json("preimages.json", [unstructure(leaf.preimage) for leaf in result.leaves])
    rd.write_bytes("final_state.bin", pack_state(result.theta_end, opt.m, opt.v, opt.step))
    rd.write_bytes("ef_out.bin", pack_state(packed.ef_out))
    for k, state in enumerate(result.leaf_states):
        rd.write_bytes(
            leaf_state_file(k), pack_state(state.theta, state.opt.m, state.opt.v, state.opt.step)
        )
    if inner.state_policy != "carry":
        rd.write_bytes(START_STATE_FILE, pack_state(theta_start))
    rd.write_json("commit.json", envelope.to_json())
    runner.progress.phase(
        w, "trained-summary", loss=f"{result.losses[-1]:.4f}", delta_bytes=packed.delta_bytes
    )
