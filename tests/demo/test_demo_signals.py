"""``kill`` of a running demo stops every child it started (issue 18, item 4).

Real processes: ``hypertrain-daemon --demo`` with one round, one miner, one node and no auditor,
signalled once its first line (the daemon's URL) is out, or once its table header is (every
child started: the daemon, the miners, the node). SIGTERM and SIGHUP stop it as Ctrl-C does:
it exits 128 + the signal within its stop bound, and none of its processes is left. SIGKILL
cannot be caught: the children notice their lifeline cut and stop by themselves, within their
own shutdown grace.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hypertrain.daemon.settings import DEFAULT_GRACE
from hypertrain.demo.children import KILL_WAIT, child_env
from hypertrain.demo.main import STOP_GRACE
from tests.process_support import readline_within

REPO = Path(__file__).resolve().parents[2]
STOP_BOUND = STOP_GRACE + KILL_WAIT + 10
"""Seconds from the signal to the demo's exit: its own stop bound, plus 10 s for the
interpreter."""
ORPHAN_BOUND = STOP_GRACE + DEFAULT_GRACE + 30
"""Seconds, after a SIGKILL of the demo, for its children to notice and finish shutting down."""
HEADER = "round  state"
POLL = 0.2


def _parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def _descendants(root: int) -> dict[int, str]:
    """Live descendants of ``root``: pid -> command line."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (ppid := _parent_of(int(entry.name))) is not None:
            parents[int(entry.name)] = ppid
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = _cmdline(pid) or "?"
                frontier.append(pid)
    return found


def _cmdline(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return None


def _survivors(processes: dict[int, str]) -> list[str]:
    """Those of ``processes`` still running (same pid, same command line, not a zombie)."""
    alive = []
    for pid, cmdline in processes.items():
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and _cmdline(pid) == cmdline:
            alive.append(f"{pid}: {cmdline}")
    return alive


@contextmanager
def _demo(
    tmp_path: Path, known: dict[int, str], *, measure: bool
) -> Iterator[subprocess.Popen[str]]:
    """The demo, running; at the end it and every process in ``known`` (its children, once the
    test has seen them) are killed, whatever the test found. Without ``measure`` it skips
    timing a training round (``--train-seconds``): its children all start seconds sooner."""
    argv = [sys.executable, "-m", "hypertrain.daemon", "--demo", "--rounds", "1"]
    argv += ["--miners", "1", "--nodes", "1", "--auditors", "0", "--keep", str(tmp_path / "demo")]
    argv += [] if measure else ["--train-seconds", "1"]
    env = child_env({"PYTHONPATH": str(REPO)})
    with (
        (tmp_path / "demo.err").open("w") as err,  # a file: an unread pipe could fill and block
        subprocess.Popen(
            argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=err, text=True
        ) as demo,
    ):
        try:
            yield demo
        finally:
            if demo.poll() is None:
                known |= _descendants(demo.pid)
                demo.kill()
            for line in _survivors(known):
                os.kill(int(line.split(":")[0]), signal.SIGKILL)


LINE_BOUND = 300.0
"""Real seconds for the demo's next line (its own start-up bounds are shorter)."""


def _wait_for_line(demo: subprocess.Popen[str], prefix: str) -> None:
    """Read the demo's stdout up to a line starting with ``prefix`` (bounded by the demo's own
    start-up bounds: it gives up and exits by itself before)."""
    assert demo.stdout is not None
    while line := readline_within(demo.stdout, LINE_BOUND):
        if line.startswith(prefix):
            return
    raise AssertionError(f"the demo ended before {prefix!r}: {demo.wait()}")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "after"),
    [(signal.SIGTERM, HEADER), (signal.SIGHUP, "daemon: http://")],
    ids=["SIGTERM-all-started", "SIGHUP-first-line"],
)
def test_a_signal_stops_the_demo_and_every_child(
    signum: signal.Signals, after: str, tmp_path: Path
) -> None:
    children: dict[int, str] = {}
    # Signalled at its first line, the demo may be timing a training round in a child.
    with _demo(tmp_path, children, measure=after != HEADER) as demo:
        _wait_for_line(demo, after)
        children |= _descendants(demo.pid)
        assert any("hypertrain.daemon" in c for c in children.values()), children
        if after == HEADER:
            assert any("hypertrain.miner" in c for c in children.values()), children
            assert any("hypertrain.node" in c for c in children.values()), children
        demo.send_signal(signum)
        demo.communicate(timeout=STOP_BOUND)
        err = (tmp_path / "demo.err").read_text()
        assert demo.returncode == 128 + signum, err
        assert f"demo: stopped by {signum.name}" in err
        assert _survivors(children) == []


@pytest.mark.slow
def test_after_a_sigkill_of_the_demo_its_children_stop_by_themselves(tmp_path: Path) -> None:
    children: dict[int, str] = {}
    with _demo(tmp_path, children, measure=False) as demo:
        _wait_for_line(demo, HEADER)
        children |= _descendants(demo.pid)
        assert len(children) >= 3, children  # the daemon, two miners (one a honeypot), a node
        demo.kill()
        demo.wait(timeout=STOP_BOUND)
        deadline = time.monotonic() + ORPHAN_BOUND
        while _survivors(children) and time.monotonic() < deadline:
            time.sleep(POLL)
        assert _survivors(children) == []
