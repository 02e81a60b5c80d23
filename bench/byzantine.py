"""Byzantine miners measured: the held-out loss after N rounds with 30% of miners attacking.

Run: ``.venv/bin/python bench/byzantine.py [--miners 10] [--byzantine 3] [--rounds 8]
[--seed 0]``.

The demo-sized network without its network: the CPU test-mode manifest's model and inner
training (``hypertrain.trainer.loop.train_round``, bit for bit what miners run), a dataset built
from the standard library's sources (as the demo's), and the protocol's merge
(``hypertrain.aggregator.merge.aggregate_round``: preclip, CenteredClip, Nesterov). Each round
every miner trains ``H`` inner steps from theta on its own disjoint samples; a Byzantine miner
trains too, then uploads a corrupted delta that is still a valid upload (finite, the model's
shapes):

- ``sign-flip``: the negative of its delta;
- ``noise-10x``: Gaussian noise scaled to 10x the round's mean honest delta norm;
- ``scale-100x``: its delta times 100.

Each attack runs twice from the same seed: with the protocol's merge, and with a plain mean
merge (the same outer step with preclip and CenteredClip turned off: ``preclip_norm`` and
``cclip_tau`` at the float32 maximum, where one CenteredClip iteration from the centre is the
mean). The baseline is the all-honest run (every miner honest) with the protocol's merge. It
prints the held-out loss of the final theta on the first holdout samples for each, and each
attack's loss relative to the honest run; the goal is within 1%.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import numpy as np

# Run as a script (sys.path[0] is bench/): the repository root too.
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from hypertrain.aggregator.merge import Params, aggregate_round, norm
from hypertrain.aggregator.outerstate import OuterState
from hypertrain.datasets.build import BuildOptions, build
from hypertrain.datasets.reader import Dataset
from hypertrain.datasets.sources import stdlib_sources
from hypertrain.protocol.example import example_manifest
from hypertrain.protocol.f32 import f32_hex
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.testmode import build_test_mode_manifest
from hypertrain.trainer.determinism import configure

RUN_ID = "be" * 32
DATASET_BYTES = 2_000_000
HOLDOUT_ROWS = 64
GOAL = 0.01
F32_MAX = float(np.finfo(np.float32).max)

Delta = dict[str, np.ndarray[Any, Any]]
Attack = Callable[[Delta, float, np.random.Generator], Delta]


def _flip(delta: Delta, _honest_norm: float, _rng: np.random.Generator) -> Delta:
    return {n: -a for n, a in delta.items()}


def _noise(delta: Delta, honest_norm: float, rng: np.random.Generator) -> Delta:
    noise = {n: rng.standard_normal(a.shape).astype(np.float32) for n, a in delta.items()}
    scale = np.float32(10.0 * honest_norm / norm(noise))
    return {n: a * scale for n, a in noise.items()}


def _scale(delta: Delta, _honest_norm: float, _rng: np.random.Generator) -> Delta:
    return {n: a * np.float32(100.0) for n, a in delta.items()}


ATTACKS: dict[str, Attack] = {"sign-flip": _flip, "noise-10x": _noise, "scale-100x": _scale}


@attrs.frozen
class Setup:
    manifest: RunManifest
    train: Dataset
    holdout: np.ndarray[Any, Any]
    miners: int
    byzantine: int
    rounds: int
    seed: int

    @property
    def per_round(self) -> int:
        inner = self.manifest.inner
        return inner.H * inner.micro_batch * inner.grad_accum


def _mean_params(params: Params) -> Params:
    return attrs.evolve(params, preclip_norm=np.float32(F32_MAX), cclip_tau=np.float32(F32_MAX))


def run(setup: Setup, attack: Attack | None, params: Params) -> float:
    """The held-out loss of theta after ``setup.rounds`` rounds (module doc)."""
    from hypertrain.coordinator.flows.heldout import heldout_loss
    from hypertrain.trainer.loop import train_round
    from hypertrain.trainer.params import init_params

    manifest, train = setup.manifest, setup.train
    state = OuterState.genesis(init_params(manifest.model))
    rng = np.random.default_rng(setup.seed)
    order = rng.permutation(train.n_samples)
    names = [f"m{i:02d}" for i in range(setup.miners)]
    bad = set(names[: setup.byzantine]) if attack is not None else set()
    cursor = 0
    for w in range(setup.rounds):
        deltas: dict[str, Delta] = {}
        for name in names:
            ids = order[np.arange(cursor, cursor + setup.per_round) % train.n_samples]
            cursor += setup.per_round
            result = train_round(
                manifest, RUN_ID, w, state.theta, list(range(len(ids))), train.samples(ids)
            )
            deltas[name] = result.delta
        honest_norm = float(np.mean([norm(d) for n, d in deltas.items() if n not in bad]))
        for name in sorted(bad):
            assert attack is not None
            deltas[name] = attack(deltas[name], honest_norm, rng)
        state = aggregate_round(state, deltas, params, excluded=()).state_out
    return heldout_loss(manifest.model, state.theta, setup.holdout, 16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--miners", type=int, default=10)
    parser.add_argument("--byzantine", type=int, default=3, help="how many miners attack")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    manifest, _ = build_test_mode_manifest(coord_pubkey=example_manifest().coord_pubkey)
    torch = configure(manifest.reference_spec.env)
    from hypertrain.coordinator.flows.heldout import heldout_loss
    from hypertrain.trainer.params import init_params

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ht-byzantine-") as tmp:
        out = Path(tmp) / "dataset"
        options = BuildOptions(
            sources=tuple(stdlib_sources()),
            out=out,
            seq_len=manifest.model.seq_len,
            max_bytes=DATASET_BYTES,
            salt=b"\x00" * 32,
        )
        build(options)
        train = Dataset.open(out, split="train")
        holdout_set = Dataset.open(out, split="holdout")
        holdout = holdout_set.samples(range(min(HOLDOUT_ROWS, holdout_set.n_samples)))
        setup = Setup(manifest, train, holdout, args.miners, args.byzantine, args.rounds, args.seed)
        robust = Params.from_outer(manifest.outer)
        mean = _mean_params(robust)
        initial = heldout_loss(manifest.model, init_params(manifest.model), holdout, 16)
        inner = manifest.inner
        print(
            f"byzantine: {args.miners} miners, {args.byzantine} attacking"
            f" ({100 * args.byzantine / args.miners:.0f}%), {args.rounds} rounds of H={inner.H}"
            f" on the test-mode model ({manifest.model.param_count:,} params), seed {args.seed},"
            f" {train.n_samples:,} train samples, held-out loss over {len(holdout)} holdout rows"
        )
        print(
            f"outer: lr {f32_hex(float(robust.lr))} momentum {float(robust.momentum):g}"
            f" preclip {float(robust.preclip_norm):g} cclip tau {float(robust.cclip_tau):g}"
            f" x{robust.cclip_iters}; torch threads {torch.get_num_threads()}"
        )
        print(f"held-out loss at theta(0): {initial:.4f}")
        honest = run(setup, None, robust)
        honest_mean = run(setup, None, mean)
        print(f"{'mode':<12}{'robust merge':>14}{'plain mean':>14}{'robust vs honest':>18}")
        print(f"{'all honest':<12}{honest:>14.4f}{honest_mean:>14.4f}{0.0:>+17.2%}")
        worst = 0.0
        for label, attack in ATTACKS.items():
            got = run(setup, attack, robust)
            plain = run(setup, attack, mean)
            gap = got / honest - 1
            worst = max(worst, gap)
            print(f"{label:<12}{got:>14.4f}{plain:>14.4f}{gap:>+17.2%}")
        verdict = "met" if worst <= GOAL else "NOT met"
        print(
            f"goal (every attack within {GOAL:.0%} of the honest run with the robust merge):"
            f" {verdict}; worst {worst:+.2%}; {time.perf_counter() - started:.0f} s"
        )


if __name__ == "__main__":
    main()
