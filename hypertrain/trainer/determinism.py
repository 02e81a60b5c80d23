"""Process setup for bitwise CPU training (spec 5.1, DESIGN.md section 8).

Bitwise torch on CPU holds only for the same torch version, the same thread count and the same
CPU kernel path. ``reference_spec.env`` pins them; this module applies and checks them.

:func:`configure` must run at process start, *before* torch is imported (ATen reads
``ATEN_CPU_CAPABILITY`` once, when it loads; OpenMP and MKL read their thread variables when
they start). It sets::

    OMP_NUM_THREADS = MKL_NUM_THREADS = str(cpu_threads)
    ATEN_CPU_CAPABILITY, MKL_CBWR      = the manifest's values, when it pins them
    CUBLAS_WORKSPACE_CONFIG            = the manifest's value (inert on CPU)

then imports torch and sets deterministic algorithms on (no warn_only),
``set_num_threads(cpu_threads)``, ``set_num_interop_threads(1)`` (ignored when torch already ran
parallel work), ``set_float32_matmul_precision("highest")``. It returns the torch module.

:func:`check_live` is what every training entry point calls first. It raises
:class:`~hypertrain.trainer.errors.DeterminismError` naming each difference between the
manifest and the live process: ``torch.get_num_threads()``, the environment variables as this
process sees them, deterministic algorithms off, a matmul precision other than "highest", and
the live ATen kernel path (``torch.backends.cpu.get_cpu_capability()``, case-insensitive)
differing from a pinned ``ATEN_CPU_CAPABILITY``. The last check is what catches torch imported
before :func:`configure`: the variable then says "default" but the kernels already chose AVX2 or
AVX512, which no later setting can change; when the live path already matches, it is accepted.

Deterministic algorithms are switched on with ``torch._C._set_deterministic_algorithms(True,
warn_only=False)``: that is what ``torch.use_deterministic_algorithms(True)`` does, apart from
also setting the deterministic flag of torch.compile's inductor, which imports inductor and
dynamo (about 1.1 s of every process start: miners, auditors, scorers). Nothing here compiles,
so that flag is never read; :func:`check_live` still checks the switch itself
(``torch.are_deterministic_algorithms_enabled()``).
"""

from __future__ import annotations

import contextlib
import os
import sys
from types import ModuleType

from hypertrain.protocol.manifest import ReferenceEnv
from hypertrain.trainer.errors import DeterminismError

__all__ = ["check_live", "configure", "env_vars", "live_problems"]


def env_vars(env: ReferenceEnv) -> dict[str, str]:
    """The environment variables :func:`configure` sets for ``env`` (pinned ones only)."""
    threads = str(env.cpu_threads)
    out = {
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        "CUBLAS_WORKSPACE_CONFIG": env.CUBLAS_WORKSPACE_CONFIG,
    }
    if env.ATEN_CPU_CAPABILITY is not None:
        out["ATEN_CPU_CAPABILITY"] = env.ATEN_CPU_CAPABILITY
    if env.MKL_CBWR is not None:
        out["MKL_CBWR"] = env.MKL_CBWR
    return out


def configure(env: ReferenceEnv) -> ModuleType:
    """Apply ``env`` to this process (module docstring), import torch, and :func:`check_live`.

    Raises DeterminismError when torch was imported earlier on another kernel path.
    """
    already = "torch" in sys.modules
    os.environ.update(env_vars(env))
    import torch

    torch._C._set_deterministic_algorithms(True, warn_only=False)  # module doc: no inductor
    torch.set_num_threads(env.cpu_threads)
    if not already and torch.get_num_interop_threads() != 1:
        # RuntimeError: parallel work already started, the pool size is fixed
        with contextlib.suppress(RuntimeError):
            torch.set_num_interop_threads(1)
    torch.set_float32_matmul_precision("highest")
    check_live(env)
    return torch


def live_problems(env: ReferenceEnv) -> list[str]:
    """Each difference between ``env`` and the live process, as a sentence (empty when none)."""
    problems = [
        f"environment variable {name}={os.environ.get(name)!r}, the manifest pins {value!r}"
        for name, value in env_vars(env).items()
        if os.environ.get(name) != value
    ]
    torch = sys.modules.get("torch")
    if torch is None:
        return [*problems, "torch is not imported: call determinism.configure(env) first"]
    if torch.get_num_threads() != env.cpu_threads:
        problems.append(
            f"torch uses {torch.get_num_threads()} threads, the manifest pins {env.cpu_threads}"
        )
    if not torch.are_deterministic_algorithms_enabled():
        problems.append("torch.use_deterministic_algorithms(True) is not in effect")
    elif torch.is_deterministic_algorithms_warn_only_enabled():
        problems.append("deterministic algorithms are in warn-only mode")
    if torch.get_float32_matmul_precision() != "highest":
        problems.append(
            f"float32 matmul precision is {torch.get_float32_matmul_precision()!r}, not 'highest'"
        )
    pinned = env.ATEN_CPU_CAPABILITY
    live = str(torch.backends.cpu.get_cpu_capability())
    if pinned is not None and live.lower() != pinned.lower():
        problems.append(
            f"ATen runs the {live!r} CPU kernels, the manifest pins {pinned!r} "
            "(torch was imported before determinism.configure; start a fresh process)"
        )
    return problems


def check_live(env: ReferenceEnv) -> None:
    """Raise DeterminismError listing every :func:`live_problems` entry; return when none."""
    problems = live_problems(env)
    if problems:
        raise DeterminismError("not bitwise reproducible: " + "; ".join(problems))
