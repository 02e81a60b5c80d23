"""What this machine can score: its hardware class and the tools each challenge needs.

Hardware class (spec/compute-network.md 1.3): ``HYPERTRAIN_HARDWARE`` when set, else the first
GPU's name from ``nvidia-smi --query-gpu=name --format=csv,noheader``, else ``rocm-smi
--showproductname``'s ``Card series`` line (as ``amd <name>``), else ``cpu-generic``; normalised
by :func:`normalize_hardware` (lower case, every run of other characters one ``-``, trimmed, at
most 64 characters). A timing challenge's jobs only go to nodes of its class.

Tools are probed by running them (never by looking for files): ``torch`` is this Python
importing torch in a child process and printing its version. Every probe has a timeout
(:data:`PROBE_TIMEOUT`) and a bounded output; a missing program, a non-zero exit or a timeout
means the tool is absent. The capabilities are the registry's challenges (by capability id)
whose tools all answered and whose hardware class, if any, is this machine's; sorted.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Final

import attrs

from hypertrain.scoring.registry import REGISTRY, Challenge

__all__ = [
    "CPU_GENERIC",
    "HARDWARE_ENV",
    "PROBE_TIMEOUT",
    "TOOL_PROBES",
    "Probe",
    "ToolReport",
    "capabilities",
    "detect_hardware",
    "normalize_hardware",
    "probe_machine",
    "probe_tools",
]

CPU_GENERIC: Final = "cpu-generic"
HARDWARE_ENV: Final = "HYPERTRAIN_HARDWARE"
PROBE_TIMEOUT: Final = 60.0
"""Seconds a probe may run (importing torch on a busy machine takes several)."""
_OUTPUT_CAP: Final = 4096

Run = Callable[[Sequence[str]], "tuple[int, str] | None"]
"""Runs argv; ``(exit status, output)``, or None when it could not run or timed out."""


def _run(argv: Sequence[str]) -> tuple[int, str] | None:
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            timeout=PROBE_TIMEOUT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    output = (done.stdout + done.stderr)[:_OUTPUT_CAP].decode(errors="replace")
    return done.returncode, output


def normalize_hardware(value: str) -> str | None:
    """The normalised class of a hardware name (module doc); None when nothing is left."""
    name = re.sub(r"[^a-z0-9]+", "-", value.lower()).strip("-")[:64].strip("-")
    return name or None


def detect_hardware(environ: Mapping[str, str], run: Run = _run) -> str:
    """This machine's hardware class (module doc)."""
    override = normalize_hardware(environ.get(HARDWARE_ENV, ""))
    if override is not None:
        return override
    found = run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"])
    if found is not None and found[0] == 0:
        for line in found[1].splitlines():
            name = normalize_hardware(line)
            if name is not None:
                return name
    found = run(["rocm-smi", "--showproductname"])
    if found is not None and found[0] == 0:
        for line in found[1].splitlines():
            if "Card series" in line:
                name = normalize_hardware("amd " + line.split("Card series", 1)[1].lstrip(" :"))
                if name is not None:
                    return name
    return CPU_GENERIC


@attrs.frozen
class Probe:
    """How to probe one tool: the command, and the pattern its output must contain."""

    argv: tuple[str, ...]
    pattern: str


TOOL_PROBES: Final[Mapping[str, Probe]] = {
    "torch": Probe(
        (sys.executable, "-c", "import torch; print('torch', torch.__version__)"),
        r"^torch \d+\.\d+",
    ),
}


@attrs.frozen
class ToolReport:
    """One probe's outcome: present or not, and the first line of its output."""

    name: str
    present: bool
    detail: str


def probe_tools(names: Sequence[str], run: Run = _run) -> dict[str, ToolReport]:
    """Probe every tool in ``names`` once (module doc); unknown tools are absent."""
    reports = {}
    for name in sorted(set(names)):
        probe = TOOL_PROBES.get(name)
        if probe is None:
            reports[name] = ToolReport(name, False, "no probe for this tool")
            continue
        found = run(probe.argv)
        if found is None:
            reports[name] = ToolReport(name, False, "did not run (missing or timed out)")
            continue
        status, output = found
        lines = [line.strip() for line in output.splitlines() if line.strip()]
        detail = (lines[0] if lines else "")[:120]
        ok = status == 0 and re.search(probe.pattern, output, re.MULTILINE) is not None
        reports[name] = ToolReport(name, ok, detail or f"exit status {status}")
    return reports


def capabilities(
    tools: Mapping[str, ToolReport],
    hardware: str,
    registry: Mapping[str, Challenge] = REGISTRY,
) -> list[str]:
    """The capability ids this machine can score (module doc)."""
    found = set()
    for challenge in registry.values():
        if not all(tools.get(t, ToolReport(t, False, "")).present for t in challenge.tools):
            continue
        if challenge.hardware_class is not None and challenge.hardware_class != hardware:
            continue
        found.add(challenge.capability)
    return sorted(found)


def probe_machine(environ: Mapping[str, str] = os.environ) -> tuple[str, list[str], str]:
    """``(hardware, capabilities, one-line description)`` of this machine, probing every tool
    the registry names (blocking: call it in a worker thread)."""
    hardware = detect_hardware(environ)
    needed = sorted({t for c in REGISTRY.values() for t in c.tools})
    tools = probe_tools(needed)
    caps = capabilities(tools, hardware)
    described = ", ".join(f"{r.name}: {r.detail}" for r in tools.values())
    return hardware, caps, described
