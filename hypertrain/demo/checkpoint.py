"""The demo's last step: its final checkpoint, fetched, verified by replay and sampled.

Once the rounds are done (and, with auditors, paid), :func:`check_checkpoint` waits until the
run's newest checkpoint (the last round's: :mod:`hypertrain.rounds.checkpoints`) is final
(the caller bounds the wait), then runs what a user would, each as its own program:

1. ``hypertrain checkpoint fetch --api URL --run-id ID --out ROOT/checkpoint`` (hash-checked);
2. ``hypertrain verify-checkpoint ROOT/checkpoint --signer K_coord --replay --api URL``: every
   structure check, then every merge of the lineage re-run from the deltas and states the
   daemon serves, bit for bit;
3. ``hypertrain sample ROOT/checkpoint --seed 0 --tokens N`` for a line of what it writes.

:class:`CheckpointResult` carries what to print: the VERIFIED answer, the sample, and (with
``--keep``) the command that verifies the kept checkpoint again later from the kept object
store, without the daemon. A step that fails makes the result a failure naming it and its
stderr; no step is retried.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import httpx
import trio

from hypertrain.demo.children import child_env

__all__ = ["CHECKPOINT_SECONDS", "SAMPLE_TOKENS", "CheckpointResult", "check_checkpoint"]

CHECKPOINT_SECONDS: Final = 120.0
"""Bound, after the rounds, for the last checkpoint to be final, fetched and verified."""
SAMPLE_TOKENS: Final = 80
"""How many tokens the demo's sample writes."""
STEP_SECONDS: Final = 60.0
"""Bound on each program the step runs."""
_POLL_SECONDS: Final = 0.5

Say = Callable[[str], None]


@attrs.frozen
class CheckpointResult:
    """What the step found: ``failure`` None when the checkpoint verified."""

    directory: Path
    verified: dict[str, Any] | None = None
    sample: str | None = None
    failure: str | None = None

    def lines(self, root: Path, kept: bool, signer: str) -> list[str]:
        """The summary lines (module doc)."""
        if self.verified is None:
            return [f"checkpoint: FAILED: {self.failure}"]
        v = self.verified
        out = [
            f"checkpoint: rounds {v['rounds'][0]}..{v['rounds'][1]} {v['status']}, theta "
            f"{v['theta_hash'][:16]}, {len(v['included'])} miner(s) included; "
            f"verify-checkpoint --replay: {v['result']} ({v.get('replayed_rounds', 0)} merges "
            "re-run bit for bit)"
        ]
        if self.sample is not None:
            out.append(f"checkpoint: sample (seed 0): {self.sample!r}")
        if kept:
            out.append(
                f"checkpoint: kept in {self.directory}; verify it again with: bin/hypertrain "
                f"verify-checkpoint {self.directory} --signer {signer} --replay --objects "
                f"{root / 'state' / 'objects'}"
            )
        return out


async def _newest_final(client: httpx.AsyncClient, run_id: str, w: int) -> None:
    while True:
        r = await client.get(f"/v1/runs/{run_id}/checkpoints")
        if r.status_code == 200:
            done = [c for c in r.json()["checkpoints"] if c["w"] == w and c["status"] == "final"]
            if done:
                return
        await trio.sleep(_POLL_SECONDS)


async def _hypertrain(args: Sequence[str]) -> subprocess.CompletedProcess[bytes]:
    argv = [sys.executable, "-m", "hypertrain", *args]
    with trio.fail_after(STEP_SECONDS):
        return await trio.run_process(
            argv, capture_stdout=True, capture_stderr=True, check=False, env=child_env({})
        )


def _why(step: str, done: subprocess.CompletedProcess[bytes]) -> str:
    lines = (done.stderr or b"").decode(errors="replace").strip().splitlines()
    return f"{step} exited {done.returncode}: {' | '.join(lines[-4:])}"


async def check_checkpoint(
    client: httpx.AsyncClient, url: str, run_id: str, last_w: int, root: Path, signer: str
) -> CheckpointResult:
    """The step (module doc); ``last_w`` is the run's last round."""
    directory = root / "checkpoint"
    await _newest_final(client, run_id, last_w)
    fetch = ["checkpoint", "fetch", "--api", url, "--run-id", run_id, "--out", str(directory)]
    done = await _hypertrain([*fetch, "--w", str(last_w)])
    if done.returncode != 0:
        return CheckpointResult(directory, failure=_why("checkpoint fetch", done))
    verify = ["verify-checkpoint", str(directory), "--signer", signer, "--replay", "--api", url]
    done = await _hypertrain(verify)
    if done.returncode != 0:
        return CheckpointResult(directory, failure=_why("verify-checkpoint --replay", done))
    verified = json.loads(done.stdout)
    sample = ["sample", str(directory), "--seed", "0", "--tokens", str(SAMPLE_TOKENS)]
    done = await _hypertrain(sample)
    if done.returncode != 0:
        return CheckpointResult(directory, verified, failure=_why("sample", done))
    return CheckpointResult(directory, verified, done.stdout.decode(errors="replace"))
