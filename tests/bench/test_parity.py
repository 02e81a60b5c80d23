"""bench/parity.py --quick keeps working: two arms train, the table, the JSON and the plot.

A real run of the script (its own process: it pins the CPU kernel path before torch is
imported), one seed of data-parallel and DiLoCo H 6 over 60 global steps; then the same command
again, which takes both runs from the JSON instead of training them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hypertrain.demo.children import child_env

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 300
"""Seconds: --quick takes about 20 s on an idle core, under 2 minutes on a busy machine."""


def _quick(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    args = ["--quick", "--json", str(tmp_path / "runs.json"), "--plot", str(tmp_path / "p.png")]
    return subprocess.run(
        [sys.executable, str(REPO / "bench" / "parity.py"), *args],
        env=child_env({}),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


@pytest.mark.slow
def test_quick_trains_both_arms_and_writes_the_table_json_and_plot(tmp_path: Path) -> None:
    done = _quick(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    run_line = r"{} +seed 0: loss (\d+\.\d+) at 30,720 tokens in \d+\.\d s"
    dp = re.search(run_line.format("data-parallel"), out)
    diloco = re.search(run_line.format(r"DiLoCo H=6 lr=0\.7 clip=off int8"), out)
    assert dp is not None, out
    assert diloco is not None, out
    assert "preclipped 0/40, cclip 0/40" in out  # 10 rounds of 4 miners, clipping off
    assert "| data-parallel | 1 | " in out
    gap = float(diloco[1]) / float(dp[1]) - 1
    assert f"| {gap:+.2%} | 30,720 |" in out
    assert re.search(r"test-mode: best DiLoCo arm DiLoCo H=6 .*: gap [+-]\d+\.\d+%", out)
    runs = json.loads((tmp_path / "runs.json").read_text())
    assert [(r["arm"]["kind"], r["seed"]) for r in runs] == [("dp", 0), ("diloco", 0)]
    assert [t for t, _ in runs[0]["points"]] == [0, 15_360, 30_720]  # steps 0, 30, 60
    assert runs[0]["points"][-1][1] == pytest.approx(float(dp[1]), abs=1e-4)
    png = (tmp_path / "p.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    assert len(png) < 200_000
    again = _quick(tmp_path)  # both runs come from the JSON: nothing trains
    assert again.returncode == 0, again.stdout + again.stderr
    assert "seed 0: loss" not in again.stdout
    assert f"| {gap:+.2%} | 30,720 |" in again.stdout
