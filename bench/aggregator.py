"""Time the outer merge: 16 miners x ~1M float32 parameters (spec 7, aggregator.merge).

Run: ``.venv/bin/python bench/aggregator.py [--miners 16] [--params 1048576] [--iters 1]``.
Prints ms for norm over 4.3M params, one CenteredClip iteration, the copy screen and a round, then
CenteredClip + Nesterov next to one numpy pass over the stacked deltas (16 x 1M and 16 x the
example model's 4,329,216), in the same run, with the ratio (goal of issue 17: at most 10x), and
``aggregate_round`` at 16, 64 and 256 miners x 1M params (best of 3, wall and CPU time) with the
growth per 4x miners (goal: at most 5x), over independent deltas and over correlated ones with
near-copies.
``--scale-miners ''`` skips the scaling part.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from hypertrain.aggregator.copyscreen import copy_screen
from hypertrain.aggregator.merge import (
    Params,
    aggregate_round,
    centered_clip,
    norm,
    outer_step,
    preclip,
)
from hypertrain.aggregator.outerstate import OuterState

F32 = np.float32


def _model(rng: np.random.Generator, params: int, scale: float) -> dict[str, np.ndarray]:
    sizes = [params // 2, params // 4, params - params // 2 - params // 4]
    return {f"t{i}": (rng.standard_normal(n) * scale).astype(F32) for i, n in enumerate(sizes)}


def _ms(fn: object, repeat: int = 3) -> float:
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--miners", type=int, default=16)
    ap.add_argument("--params", type=int, default=1 << 20)
    ap.add_argument("--iters", type=int, default=1)
    ap.add_argument("--scale-miners", default="16,64,256")
    ap.add_argument("--scale-params", type=int, default=1 << 20)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    big = _model(rng, 4_300_000, 1.0)
    print(f"norm over 4.3M params: {_ms(lambda: norm(big)):.1f} ms")
    state = OuterState.genesis(_model(rng, args.params, 1.0))
    deltas = {f"miner{i:02d}": _model(rng, args.params, 1e-3) for i in range(args.miners)}
    params = Params(
        opt="nesterov",
        lr=F32(0.4),
        momentum=F32(0.9),
        preclip_norm=F32(1.0),
        cclip_tau=F32(1.0),
        cclip_iters=args.iters,
    )
    pre = {hk: preclip(d, 1.0)[0] for hk, d in deltas.items()}
    one = _ms(lambda: centered_clip(pre, state.center, 1.0, 1))
    two = _ms(lambda: centered_clip(pre, state.center, 1.0, 2))
    screen = _ms(lambda: copy_screen(pre), repeat=1)
    total = _ms(lambda: aggregate_round(state, deltas, params), repeat=1)
    print(f"{args.miners} miners x {args.params} params, cclip_iters={args.iters}")
    print(f"  CenteredClip: {one:.1f} ms (1 iter), {two - one:.1f} ms per further iteration")
    print(f"  copy screen:  {screen:.1f} ms ({args.miners * (args.miners - 1) // 2} pairs)")
    print(f"  aggregate_round: {total:.1f} ms")
    for size in (args.params, EXAMPLE_PARAMS):
        _versus_numpy(rng, args.miners, size, params)
    counts = [int(m) for m in args.scale_miners.split(",") if m]
    if counts:
        _scaling(rng, counts, args.scale_params, params)


EXAMPLE_PARAMS = 4_329_216
"""The example manifest's model size (spec section 3)."""


def _versus_numpy(rng: np.random.Generator, miners: int, size: int, params: Params) -> None:
    """CenteredClip + Nesterov next to one numpy pass (a plain mean) over the stacked deltas."""
    state = OuterState.genesis(_model(rng, size, 1.0))
    pre = {f"miner{i:02d}": _model(rng, size, 1e-3) for i in range(miners)}
    stacked = {name: np.stack([d[name] for d in pre.values()]) for name in state.theta}

    def ours() -> None:
        g = centered_clip(pre, state.center, 1.0, 1).g
        outer_step(state, g, params)

    def plain() -> None:
        for block in stacked.values():
            block.mean(axis=0)

    a, b = _ms(ours), _ms(plain)
    print(
        f"{miners} x {size:,}: CenteredClip + Nesterov {a:.1f} ms, numpy mean over the stack "
        f"{b:.1f} ms, ratio {a / b:.1f}x"
    )


def _scaling(rng: np.random.Generator, counts: list[int], size: int, params: Params) -> None:
    """``aggregate_round`` at each miner count (best of :data:`REPEAT`, same state) and the
    growth, over two pools of deltas: independent noise (no pair near a threshold: the screen's
    exact work is nil, its Gram product and overlap count are all there is), then the same pool
    made realistic: every delta shares a common direction (cosine ~0.5 between miners, so top-k
    sets overlap), and one miner in 16 submits a near-copy of its neighbour (flagged pairs, with
    their exact values, grow with the miners)."""
    state = OuterState.genesis(_model(rng, size, 1.0))
    pool = {f"miner{i:03d}": _model(rng, size, 1e-3) for i in range(max(counts))}
    _growth("independent", state, pool, counts, params)
    shared = _model(rng, size, 1e-3)
    ids = list(pool)
    for i, hk in enumerate(ids):  # in place: a second pool of 256 x 1M would double the memory
        for name, x in pool[hk].items():
            x *= F32(0.7)
            x += F32(0.7) * shared[name]
            if i % 16 == 15:  # the copier: its neighbour's delta plus a little noise
                x *= F32(0.05)
                x += pool[ids[i - 1]][name]
    _growth("correlated, 1 in 16 a near-copy", state, pool, counts, params)


REPEAT = 3
"""Runs per miner count; the best is printed (the machine is shared, the noise is one-sided)."""


def _growth(
    label: str,
    state: OuterState,
    pool: dict[str, dict[str, np.ndarray]],
    counts: list[int],
    params: Params,
) -> None:
    size = sum(x.size for x in state.theta.values())
    walls: list[float] = []
    cpus: list[float] = []
    for m in counts:
        deltas = {hk: pool[hk] for hk in list(pool)[:m]}
        flags = len(aggregate_round(state, deltas, params).copy_flags)
        wall, cpu = _wall_cpu_ms(lambda d=deltas: aggregate_round(state, d, params))
        walls.append(wall)
        cpus.append(cpu)
        print(
            f"aggregate_round {m} miners x {size:,} ({label}): {wall:.1f} ms wall, "
            f"{cpu:.1f} ms CPU, {flags} flags"
        )
    for i in range(1, len(counts)):
        m0, m1 = counts[i - 1], counts[i]
        print(
            f"  growth {m0} -> {m1} miners ({m1 / m0:.0f}x): {walls[i] / walls[i - 1]:.2f}x wall, "
            f"{cpus[i] / cpus[i - 1]:.2f}x CPU"
        )


def _wall_cpu_ms(fn: object) -> tuple[float, float]:
    """Best of :data:`REPEAT` runs, in wall and in this process's CPU time (single-threaded work:
    CPU time leaves out the waits for the shared machine's other work)."""
    wall = cpu = math.inf
    for _ in range(REPEAT):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()  # type: ignore[operator]
        wall = min(wall, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    return wall * 1e3, cpu * 1e3


if __name__ == "__main__":
    main()
