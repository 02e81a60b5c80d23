"""The README's first command, run as a user runs it: ``bin/hypertrain-daemon --demo``.

Real processes on real sockets: the launcher, the daemon, two miners and two ``hypertrain-node``
processes. Checked: the first line is the daemon's URL, the table and summary are printed,
every scoring step of both rounds was settled by the two nodes' agreement (issue 8's
real-socket test), the exit status is 0 because both rounds were applied and the held-out loss
fell, the kept files are where it said, and no child outlives the demo.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from hypertrain.demo.children import child_env
from hypertrain.demo.main import (
    ROUND_SECONDS,
    SCORING_SECONDS,
    SETUP_SECONDS,
    STARTUP_SECONDS,
    STOP_GRACE,
)

REPO = Path(__file__).resolve().parents[2]
DEMO_TIMEOUT = (
    STARTUP_SECONDS + SETUP_SECONDS + 2 * ROUND_SECONDS + SCORING_SECONDS + 4 * STOP_GRACE + 30
)
"""Seconds: the demo's own bounds for two rounds of two miners (daemon start-up, setup, the
rounds, the last scoring, stopping two miners, the daemon and the rest) plus 30 s for the
launcher and the interpreter. The two rounds take about 40 s on 2 cores; the demo gives up by
itself, with a reason, long before this cuts it off."""


def _demo(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REPO / "bin" / "hypertrain-daemon"), "--demo", *args],
        cwd=cwd,
        env=child_env({}),
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT,
        check=False,
    )


def _alive_under(path: Path) -> list[str]:
    """Command lines of live processes that mention ``path``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(path) in cmdline:
            found.append(cmdline)
    return found


@pytest.mark.slow
def test_the_demo_applies_two_rounds_and_the_held_out_loss_falls(tmp_path: Path) -> None:
    keep = tmp_path / "demo"
    done = _demo("--rounds", "2", "--miners", "2", "--keep", str(keep), cwd=tmp_path)
    out = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.fullmatch(r"daemon: http://127\.0\.0\.1:\d+", out[0]), out[:3]
    header = "round  state          uploaded  update norm  clipped  held-out loss"
    assert f"{header}  scored agree/3rd/fb" in out
    merged = [
        line
        for line in out
        if re.fullmatch(r"\s+[01]  \w+\s+2/2\s+\d+\.\d{4}\s+\d\s+\d+\.\d{4}\s+4/0/0 of 4", line)
    ]
    assert {int(line.split()[0]) for line in merged} == {0, 1}, out
    summary = [line for line in out if line.startswith("summary: ")]
    assert summary[0].startswith("summary: 2/2 rounds applied in "), summary
    assert summary[0].endswith("; 4/4 deltas uploaded, " + summary[0].split()[-2] + " preclipped")
    # Two hypertrain-node processes scored every delta (public and hidden trace) and agreed.
    assert summary[1] == (
        "summary: 8 scoring steps; settled by agreement 8, by a third copy 0, by the fallback 0"
    )
    loss = re.fullmatch(
        r"summary: held-out loss (\d+\.\d+) at theta\(0\) -> (\d+\.\d+) at theta\(2\) .*",
        summary[2],
    )
    assert loss is not None, summary
    assert float(loss[2]) < float(loss[1]), summary
    assert out[-1] == "demo: ok: 2 rounds applied and the held-out loss fell"
    # The files were kept where it said, and nothing it started is still running.
    assert (keep / "state" / "challenge.db").is_file()
    assert sorted(p.name for p in (keep / "miners").iterdir()) == ["miner-0", "miner-1"]
    assert sorted(p.name for p in (keep / "nodes").iterdir()) == ["node-0", "node-1"]
    assert oct((keep / "nodes" / "node-0" / "node.json").stat().st_mode & 0o777) == "0o600"
    assert _alive_under(keep) == []


def test_a_bad_option_is_a_usage_error(tmp_path: Path) -> None:
    done = _demo("--rounds", "0", cwd=tmp_path)
    assert done.returncode == 2
    assert "--rounds: '0' is not an int in [1, 2^53-1]" in done.stderr


def test_a_kept_directory_that_is_not_empty_is_refused(tmp_path: Path) -> None:
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file").write_text("mine")
    done = _demo("--keep", str(tmp_path / "busy"), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [f"demo: FAILED: {tmp_path / 'busy'} is not empty"]
    assert (tmp_path / "busy" / "file").read_text() == "mine"
