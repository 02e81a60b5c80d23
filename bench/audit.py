"""Audit replay cost: an auditor's replay next to the miner's training of the same steps.

Issue 13. On the CPU test-mode manifest (``build_test_mode_manifest``), scaled by the options
so a step takes measurable time, 1 thread and the pinned CPU kernel path
(``reference_spec.env``, applied before torch is imported, as the miner and the auditor do):

- **segment**: :func:`hypertrain.trainer.replay.replay` of the window ``[a, a+1]`` from the
  state at leaf ``a`` (what a segment audit runs), next to the original training of the same J
  steps (a :class:`~hypertrain.trainer.loop.Stepper` from the same state, J steps, the leaf at
  the end, as ``train_round`` does). ``a`` is the middle leaf; its state comes from one
  ``train_round(..., keep_leaf_states=True)``. The replay also copies the state at its leaf
  (what it returns); that copy is its only extra work.
- **full**: :func:`hypertrain.trainer.loop.train_round` from the round's start over all H
  steps (a full-mode audit), next to the miner's path,
  :func:`hypertrain.miner.training.train_round_async` in honest mode, which yields to Trio
  after every step (each call in its own ``trio.run``, which adds well under a millisecond).

Each pair runs ``--reps`` times, interleaved (the order alternates every repetition), after
one warm-up of each. The figures are medians of wall time ([min .. max]) and of the process's
CPU time (on a loaded machine the steadier of the two: it leaves out the time spent waiting
for a core), and the replayed leaves are checked to be the miner's bit for bit. Goal: a replay
costs at most 1.05x the training it checks (wall medians).

    .venv/bin/python bench/audit.py [--quick] [--d-model 128] [--n-layers 2] [--H 24] [--J 4]
        [--reps 7]

The default run takes about a minute on one core; ``--quick`` (the test-mode dims, H 6, J 2,
3 repetitions) a few seconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import numpy as np

# Run as a script (sys.path[0] is bench/): the repository root too.
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from hypertrain.protocol.example import example_manifest
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.testmode import build_test_mode_manifest, decoder_param_count
from hypertrain.trainer.determinism import configure

RUN_ID = "ad" * 32
W = 3
GOAL = 1.05


def scaled_manifest(args: argparse.Namespace) -> RunManifest:
    """The test-mode manifest with the options' model width, depth, H and J."""
    manifest, _ = build_test_mode_manifest(coord_pubkey=example_manifest().coord_pubkey)
    m = manifest.model
    d_ff = 4 * args.d_model
    dims = {
        "d_model": args.d_model,
        "n_layers": args.n_layers,
        "n_heads": m.n_heads,
        "n_kv_heads": m.n_kv_heads,
        "d_ff": d_ff,
    }
    model = attrs.evolve(
        m,
        d_model=args.d_model,
        n_layers=args.n_layers,
        d_ff=d_ff,
        param_count=decoder_param_count(vocab=m.vocab, **dims),
    )
    inner = attrs.evolve(manifest.inner, H=args.H, J=args.J)
    return attrs.evolve(manifest, model=model, inner=inner)


@attrs.frozen
class Times:
    """Seconds of each call: wall clock and this process's CPU time."""

    wall: list[float]
    cpu: list[float]


def interleaved(
    first: Callable[[], object], second: Callable[[], object], reps: int
) -> tuple[Times, Times]:
    """Times of ``first`` and ``second``, ``reps`` calls each, alternating the order."""
    first(), second()  # warm-up
    a, b = Times([], []), Times([], [])
    for rep in range(reps):
        pairs = [(first, a), (second, b)]
        for fn, out in pairs if rep % 2 == 0 else pairs[::-1]:
            wall, cpu = time.perf_counter(), time.process_time()
            fn()
            out.cpu.append(time.process_time() - cpu)
            out.wall.append(time.perf_counter() - wall)
    return a, b


def ratio(times: Times, base: Times) -> float:
    return statistics.median(times.wall) / statistics.median(base.wall)


def row(label: str, times: Times, base: Times | None = None) -> str:
    wall, cpu = statistics.median(times.wall), statistics.median(times.cpu)
    spread = f"[{min(times.wall) * 1e3:7.1f} .. {max(times.wall) * 1e3:7.1f}]"
    line = f"  {label:<38} {wall * 1e3:8.1f} ms {spread}  cpu {cpu * 1e3:8.1f} ms"
    if base is not None:
        cpu_ratio = cpu / statistics.median(base.cpu)
        line += f"   {ratio(times, base):.3f}x (cpu {cpu_ratio:.3f}x)"
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="test-mode dims, H 6, J 2, 3 reps")
    parser.add_argument("--d-model", type=int, default=128, help="model width (d_ff = 4x)")
    parser.add_argument("--n-layers", type=int, default=2, help="decoder layers")
    parser.add_argument("--H", type=int, default=24, help="inner steps a round")
    parser.add_argument("--J", type=int, default=4, help="steps between leaves (divides H)")
    parser.add_argument("--reps", type=int, default=7, help="repetitions of each measurement")
    args = parser.parse_args()
    if args.quick:
        args.d_model, args.n_layers, args.H, args.J, args.reps = 64, 2, 6, 2, 3
    if args.H % args.J or args.H // args.J < 2:
        parser.error("J must divide H, with at least two windows")

    manifest = scaled_manifest(args)
    torch = configure(manifest.reference_spec.env)
    import trio

    from hypertrain.miner.training import train_round_async
    from hypertrain.trainer.loop import StateAt, Stepper, train_round
    from hypertrain.trainer.params import init_params
    from hypertrain.trainer.replay import replay

    model, inner = manifest.model, manifest.inner
    per_step = inner.micro_batch * inner.grad_accum
    n = per_step * inner.H
    rng = np.random.default_rng(0)
    rows = rng.integers(0, model.vocab, size=(n, model.seq_len + 1), dtype=np.uint32)
    ids = list(range(n))
    theta = init_params(model)

    windows = inner.H // inner.J
    a = windows // 2
    reference = train_round(manifest, RUN_ID, W, theta, ids, rows, keep_leaf_states=True)
    state_a: StateAt = reference.leaf_states[a]
    assert state_a.t == a * inner.J

    def original() -> Any:
        stepper = Stepper(manifest, RUN_ID, W, ids, rows, state_a)
        for _ in range(inner.J):
            stepper.step()
        return stepper.leaf()

    def segment() -> Any:
        return replay(manifest, RUN_ID, W, state_a, a, a + 1, ids, rows)

    print(f"threads {torch.get_num_threads()}, kernels {torch.backends.cpu.get_cpu_capability()}")
    print(
        f"model d {model.d_model}, {model.n_layers} layers, d_ff {model.d_ff}, "
        f"{model.param_count:,} params; H {inner.H}, J {inner.J}, {windows} windows; "
        f"{per_step * model.seq_len} tokens/step; {args.reps} reps, medians [min .. max]"
    )
    seg_train, seg_replay = interleaved(original, segment, args.reps)
    same = segment().leaves[0].digest == original().digest == reference.leaves[a + 1].digest
    print(f"(a) segment [{a}, {a + 1}] from the state at leaf {a} ({inner.J} steps)")
    print(row("original training (Stepper, J steps)", seg_train))
    print(row("segment replay (replay)", seg_replay, seg_train))
    print(f"  bitwise equal leaf: {'yes' if same else 'NO'}")

    results: dict[str, Any] = {}

    def full() -> None:
        results["full"] = train_round(manifest, RUN_ID, W, theta, ids, rows)

    def miner() -> None:
        results["miner"] = trio.run(train_round_async, manifest, RUN_ID, W, theta, ids, rows)

    miner_times, full_times = interleaved(miner, full, args.reps)
    equal = results["full"].leaves_root == results["miner"].leaves_root == reference.leaves_root
    print(f"(b) full round from the start ({inner.H} steps, {windows + 1} leaves)")
    print(row("miner training (train_round_async)", miner_times))
    print(row("full replay (train_round)", full_times, miner_times))
    print(f"  bitwise equal leaves_root: {'yes' if equal else 'NO'}")
    worst = max(ratio(seg_replay, seg_train), ratio(full_times, miner_times))
    verdict = "met" if worst <= GOAL else "NOT met"
    print(f"goal: replay at most {GOAL:.2f}x the training it checks: {verdict} ({worst:.3f}x)")


if __name__ == "__main__":
    main()
