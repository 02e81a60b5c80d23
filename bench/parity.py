"""DiLoCo parity, measured: the protocol's merge against data-parallel AdamW at equal tokens.

Run: ``.venv/bin/python bench/parity.py [--quick] [--seeds 0,1,2] [--steps 300]
[--holdout 128] [--top 3] [--extra H:lr:mu,...] [--no-ablate] [--big-steps 150] [--json FILE]
[--plot FILE]``. The committed results (docs/results/parity.md) ran ``--extra
6:1:0,30:1:0,100:1:0,6:0.5:0.5,6:1.5:0,2:1:0 --json parity.json --plot docs/results/parity.png``.

In process, no network, on the demo's dataset (the standard library's sources, 64-token samples,
built as the demo builds it) and the CPU test-mode manifest's model, 1 thread on the pinned CPU
kernel path (``reference_spec.env``, set before torch is imported), with the very functions a
miner and the aggregator run (bench/_parity_run.py says which). Every arm trains ``--steps``
global steps of 4 miners x ``micro_batch`` rows, so every arm sees the same tokens; the
held-out loss (the daemon's, on the first ``--holdout`` holdout rows) is measured at fixed
token counts: every 30 and every 100 global steps, where an arm's round ends there.

The grid (a full factorial does not fit the time bound):

1. data-parallel (one AdamW over the union of the miners' batches of every step), every seed;
2. DiLoCo, H in {6, 30, 100} x outer lr in {0.4, 0.7, 1.0}, the int8 codec, clipping off
   (preclip and CenteredClip at the float32 maximum: the plain mean), the first seed; the
   ``--top`` (3) best cells then run every seed, and so do the ``--extra`` arms
   (``H:lr:momentum``: another outer momentum than the manifest's 0.9, or another H);
3. at the best of those with H in the grid (mean over the seeds): clipping as the test-mode
   manifest has it (preclip 1, tau 1: every honest delta clipped), as the demo has it
   (:mod:`hypertrain.demo.tuning`), and float32 deltas instead of the int8 codec; every seed
   (``--no-ablate``: none);
4. a 2.46M-parameter model (4 layers, d 192, d_ff 768; same data) with ``--big-steps``:
   data-parallel and DiLoCo at the best arm (H 30 when the best H does not divide the steps),
   the first seed only.

``--quick``: seed 0, data-parallel and DiLoCo H 6 lr 0.7, 60 steps, 64 holdout rows, no
ablation and no big model (what tests/bench/test_parity.py runs). Prints one line per run and
then, per arm, the final held-out loss (mean +- half the range over the seeds), its gap to
data-parallel, the tokens, the wall time of a run and the merge's clip counts; ``--json`` keeps
every run's curve (written after each run; runs already in the file are reused, so an
interrupted grid resumes), ``--plot`` draws held-out loss against tokens (data-parallel, the
3 best arms, the best at the manifest's outer momentum, and the big model's).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import attrs

# Run as a script (sys.path[0] is bench/): the repository root too.
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from _parity_report import dump, load, plot, summarise, table
from _parity_run import Arm, Run, Setup, run_arm

from hypertrain.datasets import BuildOptions, build
from hypertrain.datasets.reader import Dataset
from hypertrain.datasets.sources import stdlib_sources
from hypertrain.demo.workspace import DATASET_BYTES
from hypertrain.protocol.example import example_manifest
from hypertrain.protocol.testmode import build_test_mode_manifest, decoder_param_count
from hypertrain.trainer.determinism import configure

H_GRID = (6, 30, 100)
LR_GRID = (0.4, 0.7, 1.0)
GOAL = 0.01
BIG_DIMS = {"n_layers": 4, "d_model": 192, "n_heads": 3, "n_kv_heads": 3, "d_ff": 768}


def checkpoints(steps: int) -> set[int]:
    """Global steps where losses are measured: every 30th and every 100th, and the last."""
    return {s for s in range(1, steps + 1) if s % 30 == 0 or s % 100 == 0} | {steps}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, 2 arms, 60 steps")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    parser.add_argument("--steps", type=int, default=300, help="global steps of every arm")
    parser.add_argument("--holdout", type=int, default=128, help="holdout rows evaluated")
    parser.add_argument("--big-steps", type=int, default=150, help="0: no big model")
    parser.add_argument(
        "--extra", default="", help="more DiLoCo arms, every seed: H:lr:momentum,... "
    )
    parser.add_argument("--top", type=int, default=3, help="cells that run every seed")
    parser.add_argument("--no-ablate", dest="ablate", action="store_false", help="no ablation")
    parser.add_argument("--json", type=Path, help="every run's curve (runs there are reused)")
    parser.add_argument("--plot", type=Path, help="write the loss plot (PNG) here")
    return parser


class Runner:
    """Runs arms over seeds, printing a line per run; keeps every run (in ``--json`` after each,
    and a run already there is taken from it instead of run again)."""

    def __init__(self, setup: Setup, seeds: list[int], path: Path | None) -> None:
        self.setup, self.seeds, self.path = setup, seeds, path
        self.runs: list[Run] = load(path) if path is not None and path.exists() else []

    def arm(self, arm: Arm, steps: int, seeds: list[int] | None = None) -> list[Run]:
        if arm.kind == "diloco" and steps % arm.H:
            raise SystemExit(f"{arm.label}: H does not divide {steps} steps")
        out = []
        for seed in seeds if seeds is not None else self.seeds:
            done = [r for r in self.runs if r.arm == arm and r.seed == seed]
            if done:
                out.append(done[0])
                continue
            run = run_arm(self.setup, arm, seed, steps, checkpoints(steps))
            clips = (
                f" preclipped {run.preclipped}/{run.merged}, cclip {run.cclipped}/{run.merged},"
                f" max |delta| {run.max_norm:.3g}, max |delta - center| {run.max_diff:.3g}"
                if arm.kind == "diloco"
                else ""
            )
            print(
                f"{arm.label:<44} seed {seed}: loss {run.final:.4f} at {run.tokens:,} tokens"
                f" in {run.wall_s:.1f} s{clips}",
                flush=True,
            )
            out.append(run)
            self.runs.append(run)
            if self.path is not None:
                dump(self.runs, self.path)
        return out


def _mean(runs: list[Run]) -> float:
    return sum(r.final for r in runs) / len(runs)


def grid(runner: Runner, args: argparse.Namespace) -> list[Arm]:
    """Run the grid of the module doc; the arms to plot besides data-parallel."""
    steps, first = args.steps, runner.seeds[:1]
    runner.arm(Arm("dp", H=30), steps)
    if args.quick:
        cell = Arm("diloco", H=6, outer_lr=0.7)
        runner.arm(cell, steps)
        return [cell]
    cells = {Arm("diloco", H=h, outer_lr=lr): 0.0 for h in H_GRID for lr in LR_GRID}
    for cell in cells:
        cells[cell] = _mean(runner.arm(cell, steps, first))
    top = sorted(cells, key=cells.__getitem__)[: args.top]
    for cell in top:
        cells[cell] = _mean(runner.arm(cell, steps))
    for spec in filter(None, args.extra.split(",")):
        h, lr, mu = spec.split(":")
        extra = Arm("diloco", H=int(h), outer_lr=float(lr), momentum=float(mu))
        top.append(extra)
        cells[extra] = _mean(runner.arm(extra, steps))
    best = min((a for a in top if a.H in H_GRID), key=cells.__getitem__)
    print(f"best arm: {best.label} (mean loss {cells[best]:.4f})", flush=True)
    if args.ablate:
        for change in ({"clip": "old"}, {"clip": "demo"}, {"codec": False}):
            runner.arm(attrs.evolve(best, **change), steps)  # type: ignore[arg-type]
    default = [a for a in top if a.momentum is None]  # the manifest's momentum
    shown = sorted(top, key=cells.__getitem__)[:3]
    shown += [a for a in sorted(default, key=cells.__getitem__)[:1] if a not in shown]
    if args.big_steps:
        h = best.H if args.big_steps % best.H == 0 else 30
        runner.arm(Arm("dp", H=h, model="2.46M"), args.big_steps, first)
        shown.append(attrs.evolve(best, H=h, model="2.46M"))
        runner.arm(shown[-1], args.big_steps, first)
    return shown


def verdict(runner: Runner, best: list[Arm], plot_path: Path | None) -> None:
    summaries = summarise(runner.runs)
    print(table(summaries))
    diloco = [s for s in summaries if s.arm.kind == "diloco"]
    for model in dict.fromkeys(s.arm.model for s in diloco):
        top = min((s for s in diloco if s.arm.model == model), key=lambda s: s.gap)
        met = (
            "better than data-parallel"
            if top.gap < 0
            else (f"within {GOAL:.0%}" if top.gap <= GOAL else f"NOT within {GOAL:.0%}")
        )
        print(
            f"{model}: best DiLoCo arm {top.arm.label}: gap {top.gap:+.2%} to data-parallel"
            f" ({top.mean:.4f} vs {top.baseline:.4f}): {met}"
        )
    if plot_path is not None:
        plot(summaries, best, plot_path)
        print(f"plot: {plot_path} ({plot_path.stat().st_size:,} bytes)")


def main() -> None:
    args = _parser().parse_args()
    if args.quick:
        args.seeds, args.steps, args.holdout, args.big_steps = "0", 60, 64, 0
    seeds = [int(s) for s in args.seeds.split(",") if s]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ht-parity-") as tmp:
        out = Path(tmp) / "dataset"
        options = BuildOptions(
            sources=tuple(stdlib_sources()),
            out=out,
            seq_len=64,
            max_bytes=DATASET_BYTES,
            salt=b"\x00" * 32,
        )
        dataset = build(options)
        manifest, _ = build_test_mode_manifest(
            coord_pubkey=example_manifest().coord_pubkey, dataset=dataset.dataset_spec()
        )
        torch = configure(manifest.reference_spec.env)
        holdout_set = Dataset.open(out, split="holdout")
        holdout = holdout_set.samples(range(min(args.holdout, holdout_set.n_samples)))
        big = attrs.evolve(
            manifest.model,
            **BIG_DIMS,
            param_count=decoder_param_count(vocab=manifest.model.vocab, **BIG_DIMS),
        )
        models = {"test-mode": manifest.model, "2.46M": big}
        setup = Setup(manifest, Dataset.open(out, split="train"), holdout, models)
        inner, outer = manifest.inner, manifest.outer
        print(
            f"torch threads {torch.get_num_threads()}; dataset {dataset.n_samples} samples of"
            f" {dataset.seq_len} tokens, {len(holdout)} holdout rows evaluated; test-mode model"
            f" {manifest.model.param_count:,} params, big {big.param_count:,}; 4 miners x"
            f" micro_batch {inner.micro_batch}, peak lr {inner.lr_schedule.peak_lr} (f32 hex),"
            f" manifest preclip {outer.preclip_norm} tau {outer.cclip_tau} x{outer.cclip_iters}"
            f" (f32 hex), ef_beta {outer.ef_beta}; {args.steps} global steps, seeds {seeds}",
            flush=True,
        )
        runner = Runner(setup, seeds, args.json)
        best = grid(runner, args)
    verdict(runner, best, args.plot)
    print(f"done in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
