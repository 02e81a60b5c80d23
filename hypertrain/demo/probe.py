"""One training round of the demo's model, timed here, as a miner runs it.

``python -m hypertrain.demo.probe MANIFEST DATASET`` (a child of the demo, so the demo stays
responsive and its own process never imports torch) reads the run manifest (``MANIFEST``, its
JSON) and the built dataset directory, sets up the process as a miner does
(:func:`hypertrain.trainer.determinism.configure` with the manifest's ``reference_spec.env``,
which imports torch), and then times what a miner's training phase computes for round 0:
:func:`hypertrain.trainer.loop.train_round` from theta(0) over the first samples of the
dataset (keeping the leaf states under ``carry``, as the miner does) and the delta's compression
(:func:`hypertrain.trainer.codec.compress`). It prints one JSON line, ``{"train_seconds": S,
"setup_seconds": P}``: ``S`` is that round (the first in the process, as round 0 is for a miner:
cold caches included), ``P`` the set-up before it (importing torch and configuring determinism,
which a miner pays once, not every round).

:func:`measure_training` is the demo's side: it starts the probe as a demo child
(:class:`~hypertrain.demo.children.Children`, so a signal stops it too) and returns ``S``;
:class:`ProbeFailed` when the probe exits with an error or prints nothing within the bound.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import trio

from hypertrain.demo.children import Children
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.manifest import RunManifest
from nurseries import exit_when_lifeline_cut, lifeline_from_env

__all__ = [
    "LIFELINE_CUT_STATUS",
    "PROBE_SECONDS",
    "ProbeFailed",
    "main",
    "measure_training",
    "probe",
]

LIFELINE_CUT_STATUS: Final = 3
"""The probe's exit status when its lifeline is cut (:func:`main`)."""

PROBE_SECONDS: Final = 90.0
"""Bound for the probe: importing torch and configuring determinism take a few seconds (more on
a busy machine), the round itself well under one."""


class ProbeFailed(Exception):
    """The training probe failed or timed out; the message says why."""


def probe(manifest: RunManifest, dataset: Path) -> dict[str, float]:
    """Configure this process and time one round (module doc); the printed JSON, as a dict."""
    started = time.perf_counter()
    from hypertrain.datasets.reader import Dataset  # numpy only: before torch is imported
    from hypertrain.trainer.determinism import configure

    data = Dataset.open(dataset)
    configure(manifest.reference_spec.env)
    from hypertrain.protocol.f32 import f32_from_hex
    from hypertrain.trainer.codec import compress
    from hypertrain.trainer.loop import train_round
    from hypertrain.trainer.params import init_params

    inner = manifest.inner
    ids = [i % data.n_samples for i in range(inner.H * inner.micro_batch * inner.grad_accum)]
    theta = init_params(manifest.model)
    run_id = manifest.run_id()
    ready = time.perf_counter()
    result = train_round(
        manifest,
        run_id,
        0,
        theta,
        ids,
        data.samples,
        keep_leaf_states=inner.state_policy == "carry",
    )
    compress(result.delta, None, float(f32_from_hex(manifest.outer.ef_beta)))
    done = time.perf_counter()
    return {"train_seconds": done - ready, "setup_seconds": ready - started}


def main(argv: Sequence[str]) -> int:
    """``MANIFEST DATASET`` (module doc); 0 when it printed its line, 2 on a usage error. A
    probe started with a lifeline (the demo's children hold one) exits at once with
    :data:`LIFELINE_CUT_STATUS` when it is cut: a SIGKILLed demo leaves no probe behind."""
    lifeline = lifeline_from_env(os.environ)
    if lifeline is not None:
        exit_when_lifeline_cut(lifeline, LIFELINE_CUT_STATUS)
    if len(argv) != 2:
        print("usage: python -m hypertrain.demo.probe MANIFEST DATASET", file=sys.stderr)
        return 2
    manifest = structure(RunManifest, json.loads(Path(argv[0]).read_text(encoding="utf-8")))
    print(json.dumps(probe(manifest, Path(argv[1]))), flush=True)
    return 0


async def measure_training(
    children: Children, manifest: RunManifest, dataset: Path, workdir: Path
) -> float:
    """Run the probe as a child in ``workdir`` (its manifest and output files are kept there)
    and return its ``train_seconds``; :class:`ProbeFailed` otherwise (module doc)."""
    await trio.Path(workdir).mkdir(parents=True, exist_ok=True)
    manifest_file = workdir / "manifest.json"
    await trio.Path(manifest_file).write_text(json.dumps(unstructure(manifest)), encoding="utf-8")
    argv = [sys.executable, "-m", "hypertrain.demo.probe", str(manifest_file), str(dataset)]
    child = await children.start(
        "training probe",
        argv,
        env={},
        stdout=workdir / "stdout.txt",
        stderr=workdir / "stderr.txt",
        cwd=workdir,
    )
    code = await child.wait(PROBE_SECONDS)
    if code is None:
        raise ProbeFailed(f"the training probe did not finish in {PROBE_SECONDS:g} s")
    if code != 0:
        raise ProbeFailed(f"the training probe exited with status {code}:\n{child.tail()}")
    try:
        answer = json.loads(await trio.Path(child.stdout).read_text(encoding="utf-8"))
        seconds = float(answer["train_seconds"])
    except (ValueError, KeyError, TypeError) as e:
        raise ProbeFailed(f"the training probe printed no measurement: {e}") from e
    return seconds


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
