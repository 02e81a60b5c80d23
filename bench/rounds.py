"""Assignment cost: the first round of a data pass (epoch PRP built) and a further round.

8 slots x 240 samples over the example manifest's 781,250 samples, as the coordinator derives
them at d_assign and every miner and auditor derives them again.

    .venv/bin/python bench/rounds.py
"""

from __future__ import annotations

import time

from hypertrain.protocol.example import example_manifest
from hypertrain.protocol.keys import Keypair
from hypertrain.rounds import AssignParams, assign


def main() -> None:
    manifest = example_manifest()
    params = AssignParams.from_manifest(manifest)
    hotkeys = sorted(Keypair.from_seed(bytes([i + 1]) * 32).ss58 for i in range(8))
    roster = [(hotkey, slot) for slot, hotkey in enumerate(hotkeys)]
    block = len(roster) * params.batch
    run_id = manifest.run_id()
    rows: list[tuple[str, float]] = []
    for label, w in (("first round of a data pass", 0), ("a further round", 1)):
        start = time.perf_counter()
        assign(params, run_id, w, bytes([w + 1]) * 48, roster, base=w * block)
        rows.append((label, time.perf_counter() - start))
    warm = []
    for w in range(2, 12):
        start = time.perf_counter()
        assign(params, run_id, w, bytes([w + 1]) * 48, roster, base=w * block)
        warm.append(time.perf_counter() - start)
    rows.append(("further rounds, median of 10", sorted(warm)[len(warm) // 2]))
    print(f"{len(roster)} slots x {params.batch} samples of {params.n_samples:,}")
    for label, seconds in rows:
        print(f"{label:<32} {seconds * 1000:8.2f} ms")


if __name__ == "__main__":
    main()
