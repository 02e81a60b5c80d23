"""What a scoring job is on disk, and the process settings its scorer runs under (no torch).

- :data:`SCORING_ENV`: the pinned reference settings every scorer process applies before it
  imports torch (:func:`hypertrain.trainer.determinism.configure`): one CPU thread and the
  generic ATen kernels with MKL's compatible mode, the CPU test mode's settings
  (:data:`~hypertrain.protocol.testmode.CPU_KERNEL_ENV`), so two honest machines compute the
  same bits. Changing them changes scorer output: bump the challenges' ``version``.
- :func:`check_job_inputs`: a job's input files must be exactly the challenge's input names
  (each valid by :func:`~hypertrain.scoring.inputs.check_input_name`), given as absolute paths
  to regular files; anything else is :class:`~hypertrain.scoring.inputs.BadInput`. The node
  checks this before spawning the worker, and the worker checks it again.
- :func:`read_input`: reads one input file, at most its
  :func:`~hypertrain.scoring.inputs.size_cap` bytes (a longer file is refused unread).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from hypertrain.protocol.manifest import ModelSpec, ReferenceEnv
from hypertrain.protocol.testmode import CPU_KERNEL_ENV
from hypertrain.scoring.inputs import BadInput, check_input_name, size_cap
from hypertrain.scoring.registry import Challenge

__all__ = ["SCORING_ENV", "check_job_inputs", "read_input"]

SCORING_ENV: Final = ReferenceEnv(
    CUBLAS_WORKSPACE_CONFIG=":4096:8",
    CUDA_DISABLE_PTX_JIT="1",
    cpu_threads=1,
    ATEN_CPU_CAPABILITY=CPU_KERNEL_ENV["ATEN_CPU_CAPABILITY"],
    MKL_CBWR=CPU_KERNEL_ENV["MKL_CBWR"],
)


def check_job_inputs(
    challenge: Challenge, inputs: Mapping[str, str | os.PathLike[str]]
) -> dict[str, Path]:
    """``{name: path}`` in the challenge's input order, once every rule holds (module doc)."""
    for name in inputs:
        check_input_name(name)
    missing = [n for n in challenge.inputs if n not in inputs]
    extra = sorted(n for n in inputs if n not in challenge.inputs)
    if missing or extra:
        raise BadInput(
            f"{challenge.id}: inputs {sorted(inputs)} are not {list(challenge.inputs)} "
            f"(missing {missing}, unexpected {extra})"
        )
    out: dict[str, Path] = {}
    for name in challenge.inputs:
        path = Path(inputs[name])
        if not path.is_absolute():
            raise BadInput(f"{name}: path {str(path)[:200]!r} is not absolute")
        try:
            mode = path.stat().st_mode
        except OSError as e:
            raise BadInput(f"{name}: cannot stat {str(path)[:200]!r} ({e.strerror})") from None
        if not stat.S_ISREG(mode):
            raise BadInput(f"{name}: {str(path)[:200]!r} is not a regular file")
        out[name] = path
    return out


def read_input(path: Path, name: str, model: ModelSpec | None) -> bytes:
    """The bytes of input ``name`` at ``path``, refused when longer than its cap."""
    cap = size_cap(name, model)
    try:
        with open(path, "rb") as f:
            data = f.read(cap + 1)
    except OSError as e:
        raise BadInput(f"{name}: cannot read ({e.strerror})") from None
    if len(data) > cap:
        raise BadInput(f"{name}: larger than {cap} bytes")
    return data
