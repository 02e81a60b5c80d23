"""Byzantine miners measured: the held-out loss after N rounds with 30% of miners attacking.

Run: ``.venv/bin/python bench/byzantine.py [--miners 10] [--byzantine 3] [--rounds 8]
[--seed 0[,1,...]] [--holdout 64] [--preclip 1.5x] [--tau 0.75x] [--iters 5]
[--manifest-outer | --demo] [--attacks sign-flip,...] [--audit-rows new,bonded,q_base[,new-fresh]]
[--no-robust] [--no-mean] [--stats]``.

With several seeds (``--seed 0,1,2``) every row runs once per seed, and a last table gives each
row's gap to its own seed's baseline averaged over the seeds (with the smallest and largest):
one seed's verdict is inside the seed-to-seed noise of a few rounds of a small model.

The demo-sized network without its network: the CPU test-mode manifest's model and inner
training (``hypertrain.trainer.loop.train_round``, bit for bit what miners run), a dataset built
from the standard library's sources (as the demo's), and the protocol's merge
(``hypertrain.aggregator.merge.aggregate_round``: preclip, CenteredClip, Nesterov). Each round
every miner trains ``H`` inner steps from theta on its own disjoint samples (fixed by the seed,
the round and the miner, whoever else is still active, so that two runs differ only in what the
attackers upload and who is blacklisted: a global cursor shifted every later miner's data after
a blacklisting, which added noise of its own to the comparison); a Byzantine miner
trains too, then uploads a corrupted delta that is still a valid upload (finite, the model's
shapes):

- ``sign-flip``: the negative of its delta;
- ``noise-10x``: Gaussian noise scaled to 10x the round's mean honest delta norm;
- ``scale-100x``: its delta times 100.

**Outer params.** ``--preclip``, ``--tau`` and ``--iters`` set the merge's ``preclip_norm``,
``cclip_tau`` and ``cclip_iters`` (the run manifest's ``outer``); a value ending in ``x`` is
relative to the median honest delta norm of round 0 (every miner trained from theta(0), what an
operator measures in a trial round before sealing the manifest). ``--manifest-outer`` uses the
test-mode manifest's own values (1, 1, 1) instead; ``--demo`` the demo's ``H`` and outer
section (:mod:`hypertrain.demo.tuning`, measured by bench/parity.py).

**Rows.** Each attack runs from the same seed with: a plain mean merge (the same outer step with
preclip and CenteredClip turned off: both at the float32 maximum, one CenteredClip iteration from
the centre, which is the mean); the robust merge alone; the robust merge plus the protocol's
audits with the attackers new and unbonded (on probation, ``q = 1``); the same with the
attackers bonded (``q_base``, raised to 1 after a merge whose copy screen flags them, as the
coordinator does); and bonded with the copy screen's raise ignored (``q_base`` only). Asked for
with ``--audit-rows new-fresh``, an oracle row that is not the protocol: the attackers new, and
after each rollback of rounds ``w`` and ``w + 1`` round ``w + 1``'s honest miners train again
from the corrected theta (the protocol applies the deltas they uploaded, trained from the old
one, as the verdicts land after round ``w + 1`` opened); its gap to ``new`` is what that one
stale round costs, and it is a reference, not counted in the goal's verdict. The audit
model (bench/_byzantine_chain.py) uses the project's audit-rate rule, selection draw and
rollback-by-remerge; ``caught`` names each faulted miner, its round and why it was drawn. A selected
corrupted upload always fails its audit. The upload must hash to the committed ``delta_hash``,
so the attacker commits to the corrupted delta; the auditor replays the final window (always; in
full mode every step, from the public start state) on the assigned samples and rebuilds the
delta from the replayed final theta: training gives the honest delta, never its negative, a
multiple of it or noise, so either the final leaf or the rebuilt delta's hash differs from the
commitment (MISMATCH).

The baseline is the all-honest run with the robust merge; ``honest only`` is the network
without the attackers at all (what audits restore at best). The goal is every attack within 1%
of the baseline's held-out loss of the final theta on the first holdout samples. ``--stats``
prints, per round of every run, what the merge sees (the baseline's always).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import attrs
import numpy as np

# Run as a script (sys.path[0] is bench/): the repository root too.
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from _byzantine_chain import MergeChain, Roster, theta_digest
from _byzantine_stats import RoundStats, round_stats, stats_header

from hypertrain.aggregator.merge import Params, norm
from hypertrain.aggregator.outerstate import OuterState
from hypertrain.datasets.build import BuildOptions, build
from hypertrain.datasets.reader import Dataset
from hypertrain.datasets.sources import stdlib_sources
from hypertrain.demo.tuning import tuned
from hypertrain.protocol.example import example_manifest
from hypertrain.protocol.f32 import f32_from_hex, f32_hex
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.testmode import build_test_mode_manifest
from hypertrain.trainer.codec import F32Array
from hypertrain.trainer.determinism import configure

RUN_ID = "be" * 32
DATASET_BYTES = 2_000_000
HOLDOUT_ROWS = 64
GOAL = 0.01
F32_MAX = float(np.finfo(np.float32).max)
CACHE_DELTAS = 64

Delta = dict[str, F32Array]
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

    @property
    def names(self) -> list[str]:
        return [f"m{i:02d}" for i in range(self.miners)]


class Trainer:
    """``train_round`` with a small cache: runs that share a theta (round 0 always, round 1 until
    a rollback) train it once."""

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self._cache: dict[tuple[int, str, bytes, bytes], Delta] = {}

    def delta(self, w: int, name: str, ids: np.ndarray[Any, Any], theta: Delta) -> Delta:
        from hypertrain.trainer.loop import train_round

        key = (w, name, ids.tobytes(), theta_digest(theta))
        if key not in self._cache:
            train = self.setup.train
            result = train_round(
                self.setup.manifest, RUN_ID, w, theta, list(range(len(ids))), train.samples(ids)
            )
            if len(self._cache) >= CACHE_DELTAS:
                del self._cache[next(iter(self._cache))]
            self._cache[key] = result.delta
        return self._cache[key]


@attrs.frozen
class Outcome:
    loss: float
    caught: tuple[tuple[str, int, str], ...]
    """(miner, round of the fault, the audit reason that selected it)"""
    stats: tuple[RoundStats, ...]


def run(
    setup: Setup,
    trainer: Trainer,
    attack: Attack | None,
    params: Params,
    *,
    audits: Roster | None = None,
    absent: bool = False,
    fresh_next: bool = False,
) -> Outcome:
    """The held-out loss of theta after ``setup.rounds`` rounds (module doc); ``absent``: the
    Byzantine miners do not take part at all; ``fresh_next``: after a rollback of rounds
    ``w - 1`` and ``w``, round ``w``'s miners train again from the corrected theta (the oracle
    row: not what the protocol can do)."""
    from hypertrain.coordinator.flows.heldout import heldout_loss
    from hypertrain.trainer.params import init_params

    manifest, train = setup.manifest, setup.train
    chain = MergeChain(OuterState.genesis(init_params(manifest.model)), params)
    rng = np.random.default_rng(setup.seed)
    order = rng.permutation(train.n_samples)
    names = setup.names
    bad = set(names[: setup.byzantine]) if attack is not None or absent else set()
    if absent:
        chain.blacklist |= bad
    pending: dict[int, list[str]] = {}
    caught: list[tuple[str, int, str]] = []
    why: dict[tuple[str, int], str] = {}
    stats: list[RoundStats] = []
    for w in range(setup.rounds):
        active = [n for n in names if n not in chain.blacklist]
        if audits is not None:
            drawn = audits.selected(RUN_ID, w, active, chain.raised, setup.seed)
            pending[w] = [h for h in drawn if h in bad]
            why.update({(h, w): audits.reasons(w, h, chain.raised)[0] for h in pending[w]})
        deltas = _trained(setup, trainer, order, w, active, chain.state.theta)
        honest_norm = float(np.mean([norm(d) for n, d in deltas.items() if n not in bad]))
        for name in sorted(bad & set(deltas)):
            assert attack is not None
            deltas[name] = attack(deltas[name], honest_norm, rng)
        center = chain.state.center
        result = chain.apply(deltas)
        stats.append(round_stats(w, deltas, bad, center, params, result))
        # Round w - 1's verdicts are in before round w + 1 opens: roll back w - 1 and w.
        faulted = [h for h in pending.pop(w - 1, []) if h not in chain.blacklist]
        if faulted:
            chain.rollback(w - 1, faulted)
            caught += [(h, w - 1, why[h, w - 1]) for h in faulted]
            if fresh_next:
                honest = sorted(set(deltas) - bad)
                chain.redo_last(_trained(setup, trainer, order, w, honest, dict(chain.last_theta)))
    loss = heldout_loss(manifest.model, chain.state.theta, setup.holdout, 16)
    return Outcome(loss, tuple(caught), tuple(stats))


def _trained(
    setup: Setup,
    trainer: Trainer,
    order: np.ndarray[Any, Any],
    w: int,
    miners: Collection[str],
    theta: Delta,
) -> dict[str, Delta]:
    """Round ``w``'s deltas of ``miners``, each trained from ``theta`` on its own samples."""
    names = setup.names
    deltas: dict[str, Delta] = {}
    for name in miners:
        # each miner's samples depend on the round and the miner only, not on who else is still
        # active: runs that differ in the attack alone train on the same data
        start = (w * len(names) + names.index(name)) * setup.per_round
        ids = order[np.arange(start, start + setup.per_round) % setup.train.n_samples]
        deltas[name] = trainer.delta(w, name, ids, theta)
    return deltas


def _median_norm(setup: Setup, trainer: Trainer) -> float:
    """The median norm of the round-0 deltas of every miner from theta(0)."""
    from hypertrain.trainer.params import init_params

    theta = init_params(setup.manifest.model)
    order = np.random.default_rng(setup.seed).permutation(setup.train.n_samples)
    norms = []
    for i, name in enumerate(setup.names):
        ids = order[np.arange(i * setup.per_round, (i + 1) * setup.per_round)]
        norms.append(norm(trainer.delta(0, name, ids % setup.train.n_samples, theta)))
    return statistics.median(norms)


def _value(spec: str, honest: float) -> float:
    return float(spec[:-1]) * honest if spec.endswith("x") else float(spec)


def _params(args: argparse.Namespace, manifest: RunManifest, honest: float) -> Params:
    params = Params.from_outer(manifest.outer)
    if args.manifest_outer:
        return params
    return attrs.evolve(
        params,
        preclip_norm=np.float32(_value(args.preclip, honest)),
        cclip_tau=np.float32(_value(args.tau, honest)),
        cclip_iters=args.iters,
    )


def _mean_params(params: Params) -> Params:
    big = np.float32(F32_MAX)
    return attrs.evolve(params, preclip_norm=big, cclip_tau=big, cclip_iters=1)


AUDIT_ROWS: dict[str, str] = {
    "new": "robust + audits, new",
    "bonded": "robust + audits, bonded",
    "q_base": "robust + audits, q_base",
    "new-fresh": "audits, new, fresh w+1",
}
"""``--audit-rows`` names -> the row each adds per attack (module doc, "Rows")."""


@attrs.frozen
class Row:
    """One row of one seed's table: the held-out loss of one run."""

    mode: str
    merge: str
    loss: float
    caught: str = ""

    @property
    def label(self) -> str:
        return f"{self.mode} / {self.merge}"


def _print_row(row: Row, base: float | None) -> float:
    gap = row.loss / base - 1 if base else 0.0
    rel = f"{gap:>+10.2%}" if base else f"{'':>10}"
    verdict = ("within 1%" if gap <= GOAL else "NOT within 1%") if base else ""
    print(f"{row.mode:<12}{row.merge:<24}{row.loss:>10.4f}{rel}  {verdict:<14}{row.caught}")
    return gap


def _caught(got: Outcome) -> str:
    return " ".join(f"{h}@{w}({why})" for h, w, why in got.caught) or "-"


def _print_stats(label: str, outcome: Outcome) -> None:
    print(f"stats: {label}")
    print(stats_header())
    for s in outcome.stats:
        print(s.line())


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--miners", type=int, default=10)
    parser.add_argument("--byzantine", type=int, default=3, help="how many miners attack")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument(
        "--seed", default="0", help="a seed, or several comma-separated: each runs every row"
    )
    parser.add_argument("--holdout", type=int, default=HOLDOUT_ROWS, help="held-out rows")
    parser.add_argument("--preclip", default="1.5x", help="preclip_norm (Nx: N x honest norm)")
    parser.add_argument("--tau", default="0.75x", help="cclip_tau (Nx: N x honest norm)")
    parser.add_argument("--iters", type=int, default=5, help="cclip_iters")
    parser.add_argument("--manifest-outer", action="store_true", help="the manifest's outer")
    parser.add_argument(
        "--demo", action="store_true", help="the demo's H and outer (implies --manifest-outer)"
    )
    parser.add_argument("--attacks", default=",".join(ATTACKS), help="comma-separated")
    parser.add_argument(
        "--audit-rows",
        default="new,bonded,q_base",
        help=f"which audit rows each attack runs, comma-separated of {', '.join(AUDIT_ROWS)}"
        " (new-fresh: the oracle row, module doc)",
    )
    parser.add_argument("--no-audits", action="store_true", help="skip the audit rows")
    parser.add_argument("--no-robust", action="store_true", help="skip the attacks' robust rows")
    parser.add_argument("--no-mean", action="store_true", help="skip the plain mean rows")
    parser.add_argument("--stats", action="store_true", help="per-round stats of every run")
    return parser


def _one_seed(
    args: argparse.Namespace, manifest: RunManifest, train: Dataset, holdout: Any, seed: int
) -> list[Row]:
    """Every row of the table for ``seed``, printed as it comes; the rows, baseline first."""
    from hypertrain.coordinator.flows.heldout import heldout_loss
    from hypertrain.trainer.params import init_params

    attacks = {a: ATTACKS[a] for a in args.attacks.split(",") if a}
    audit_rows = [AUDIT_ROWS[r] for r in args.audit_rows.split(",") if r]
    setup = Setup(manifest, train, holdout, args.miners, args.byzantine, args.rounds, seed)
    trainer = Trainer(setup)
    honest_norm = _median_norm(setup, trainer)
    robust = _params(args, manifest, honest_norm)
    mean = _mean_params(robust)
    initial = heldout_loss(manifest.model, init_params(manifest.model), holdout, 16)
    inner = manifest.inner
    print(
        f"byzantine: {args.miners} miners, {args.byzantine} attacking"
        f" ({100 * args.byzantine / args.miners:.0f}%), {args.rounds} rounds of H={inner.H}"
        f" on the test-mode model ({manifest.model.param_count:,} params), seed {seed},"
        f" {train.n_samples:,} train samples, held-out loss over {len(holdout)} holdout rows"
    )
    print(
        f"outer: lr {f32_hex(float(robust.lr))} momentum {float(robust.momentum):g}"
        f" preclip {float(robust.preclip_norm):.4g} cclip tau {float(robust.cclip_tau):.4g}"
        f" x{robust.cclip_iters} (median honest delta norm of round 0: {honest_norm:.4g})"
    )
    verify = manifest.verify
    print(
        f"audits: q_base {f32_from_hex(verify.q_base):g},"
        f" probation_rounds {verify.probation_rounds}; held-out loss at theta(0): {initial:.4f}"
    )
    got = run(setup, trainer, None, robust)
    _print_stats("all honest, robust merge (the baseline)", got)
    print(f"{'mode':<12}{'merge':<24}{'held-out':>10}{'vs base':>10}  {'goal':<14}caught")
    base = Row("all honest", "robust (baseline)", got.loss)
    rows = [base]
    _print_row(base, None)

    def add(row: Row, outcome: Outcome | None = None) -> None:
        rows.append(row)
        _print_row(row, base.loss)
        if args.stats and outcome is not None:
            _print_stats(row.label, outcome)

    if not args.no_mean:
        add(Row("all honest", "plain mean", run(setup, trainer, None, mean).loss))
    if not args.no_audits:
        add(
            Row(
                "honest only",
                "robust (no attackers)",
                run(setup, trainer, None, robust, absent=True).loss,
            )
        )
    rosters = {
        AUDIT_ROWS["new"]: Roster(verify),
        AUDIT_ROWS["bonded"]: Roster(verify, frozenset(setup.names[: args.byzantine])),
        AUDIT_ROWS["q_base"]: Roster(
            verify, frozenset(setup.names[: args.byzantine]), copy_screen=False
        ),
        AUDIT_ROWS["new-fresh"]: Roster(verify),
    }
    for label, attack in attacks.items():
        plan: list[tuple[str, Params, Roster | None]] = []
        if not args.no_robust:
            plan.append(("robust", robust, None))
        if not args.no_audits:
            plan += [(merge, robust, rosters[merge]) for merge in audit_rows]
        if not args.no_mean:
            plan.append(("plain mean", mean, None))
        for merge, params, audits in plan:
            fresh = merge == AUDIT_ROWS["new-fresh"]
            outcome = run(setup, trainer, attack, params, audits=audits, fresh_next=fresh)
            add(Row(label, merge, outcome.loss, _caught(outcome) if audits else ""), outcome)
    return rows


def _verdict(tables: dict[int, list[Row]]) -> None:
    """The goal line; with several seeds, first each row's gap to its own seed's baseline,
    averaged over the seeds, with the smallest and largest."""
    seeds = sorted(tables)
    gaps: dict[str, list[float]] = {}
    for seed in seeds:
        base = tables[seed][0].loss
        for row in tables[seed][1:]:
            gaps.setdefault(row.label, []).append(row.loss / base - 1)
    if len(seeds) > 1:
        print(f"over seeds {', '.join(map(str, seeds))}: the gap to each seed's baseline")
        print(f"{'row':<48}{'mean':>9}{'min':>9}{'max':>9}  goal")
        for label, values in gaps.items():
            mean = statistics.fmean(values)
            verdict = "within 1%" if mean <= GOAL else "NOT within 1%"
            print(f"{label:<48}{mean:>+9.2%}{min(values):>+9.2%}{max(values):>+9.2%}  {verdict}")
    references = ("all honest", "honest only")
    attack_rows = {
        k: v
        for k, v in gaps.items()
        if not k.startswith(references) and not k.endswith(AUDIT_ROWS["new-fresh"])
    }
    met = [k for k, v in attack_rows.items() if statistics.fmean(v) <= GOAL]
    print(
        f"goal (within {GOAL:.0%} of the all-honest robust run"
        f"{', mean over the seeds' if len(seeds) > 1 else ''}): met by {len(met)} of"
        f" {len(attack_rows)} attack rows: {'; '.join(met) or 'none'}"
    )


def main() -> None:
    args = _parser().parse_args()
    seeds = [int(s) for s in args.seed.split(",") if s]
    manifest, _ = build_test_mode_manifest(coord_pubkey=example_manifest().coord_pubkey)
    if args.demo:
        manifest, args.manifest_outer = tuned(manifest), True
    torch = configure(manifest.reference_spec.env)
    print(f"torch threads {torch.get_num_threads()}")
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
        holdout = holdout_set.samples(range(min(args.holdout, holdout_set.n_samples)))
        tables = {seed: _one_seed(args, manifest, train, holdout, seed) for seed in seeds}
        _verdict(tables)
        print(f"done in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
