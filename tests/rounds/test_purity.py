"""Rule of the house (DESIGN.md section 2): the round logic imports no Trio, HTTP or SQLite."""

from __future__ import annotations

import subprocess
import sys

import hypertrain.rounds as rounds

FORBIDDEN = ("trio", "httpx", "quart", "quart_trio", "hypercorn", "sqlite3", "hypertrain.beacon")


def test_importing_rounds_pulls_in_no_io_stack() -> None:
    code = (
        "import sys, hypertrain.rounds; "
        f"print(','.join(m for m in {FORBIDDEN!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""


def test_public_surface_resolves() -> None:
    assert len(set(rounds.__all__)) == len(rounds.__all__)
    assert [name for name in rounds.__all__ if not hasattr(rounds, name)] == []
