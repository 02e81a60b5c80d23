"""The run dashboard and ``/compute`` in a real browser, during a real-process network.

The cheapest real-process network there is: ``hypertrain-daemon --demo`` with one miner (and
its default honeypot), no auditor, no compute node (the daemon's fallback scores) and windows
sized for a one-second training round; the daemon, its local beacon and every miner are
separate processes on 127.0.0.1. Debian's ``chromium`` (headless), driven by Playwright
(``executable_path``: Playwright downloads nothing), opens ``/compute`` and the run's page
``/runs/{id}`` as soon as the run exists, before any round; then waits, bounded, until the
rounds table and the loss chart grew over the page's ``/v1/events`` stream (the page is never
reloaded: ``#live``'s ``data-updates`` counts the script's swaps) and ``/compute``'s Events
section filled; a second context with JavaScript off gets the same page complete. Screenshots
of both go under the test's ``tmp_path``.

Without chromium or Playwright the test skips, saying which is missing; with
``HYPERTRAIN_REQUIRE_BROWSER=1`` (``.ci/run`` sets it) a missing browser fails it instead.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Final

import httpx
import pytest

from hypertrain.demo.children import child_env
from hypertrain.demo.main import SETUP_SECONDS, STARTUP_SECONDS, STOP_GRACE

CHROMIUM: Final = Path("/usr/bin/chromium")
REQUIRE_ENV: Final = "HYPERTRAIN_REQUIRE_BROWSER"
CHROMIUM_ARGS: Final = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ROUNDS_SECONDS: Final = 120.0
"""Bound for round 1 to open and the held-out loss of the merge to arrive: two rounds of the
demo's windows for a one-second training round (about 10 s each) and the merge, with room for
a busy 2-core machine."""
STOP_SECONDS: Final = STOP_GRACE + 15.0


@pytest.fixture
def playwright() -> Any:
    """Playwright's sync API module, or skip (fail under ``HYPERTRAIN_REQUIRE_BROWSER=1``)
    naming what is missing; before the demo starts."""
    missing = None
    try:
        import playwright.sync_api as api
    except ImportError:
        missing = "the playwright package is not installed (pip install -e '.[dev]')"
    if missing is None and not CHROMIUM.is_file():
        missing = f"no browser at {CHROMIUM} (apt-get install chromium; .ci/run installs it)"
    if missing is not None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {missing}")
        pytest.skip(missing)
    return api


class _Lines:
    """The demo's stdout, line by line, read by a thread into a queue (so waits are bounded
    by ``queue.get(timeout=...)``, never a sleep); every line read is kept."""

    def __init__(self, stream: IO[str]) -> None:
        self.seen: list[str] = []
        self._stream = stream
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def close(self, limit: float) -> None:
        """After the demo exited: let the reader see the end of the stream, then close it."""
        self._thread.join(limit)
        self._stream.close()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, pattern: str, limit: float) -> re.Match[str]:
        deadline = time.monotonic() + limit
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
            if found := re.fullmatch(pattern, line):
                return found
        raise AssertionError(
            f"no line {pattern!r} within {limit} s; the demo said:\n" + "\n".join(self.seen)
        )


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], _Lines]]:
    """The demo network (module doc), stopped (SIGTERM, then its process group killed) at the
    end."""
    argv = [sys.executable, "-m", "hypertrain.daemon", "--demo", "--rounds", "2", "--miners", "1"]
    argv += ["--auditors", "0", "--nodes", "0", "--train-seconds", "1"]
    argv += ["--keep", str(tmp_path / "demo")]
    process = subprocess.Popen(
        argv,
        cwd=tmp_path,
        env=child_env({}),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    lines = _Lines(process.stdout)
    try:
        yield process, lines
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(STOP_SECONDS)
        lines.close(STOP_SECONDS)


_COUNTS: Final = """() => ({
  rows: document.querySelectorAll("#rounds tr:not(.empty)").length,
  points: document.querySelectorAll("#loss-chart circle.pt").length,
  updates: Number(document.getElementById("live").dataset.updates),
})"""


@pytest.mark.slow
def test_the_dashboard_and_compute_pages_fill_live_in_chromium(
    playwright: Any, demo: tuple[subprocess.Popen[str], _Lines], tmp_path: Path
) -> None:
    _, lines = demo
    url = lines.wait_for(r"dashboard: (http://127\.0\.0\.1:\d+)/", STARTUP_SECONDS)[1]
    prefix = lines.wait_for(r"demo: run ([0-9a-f]{16}) .*", SETUP_SECONDS)[1]
    (run_id,) = [r["run_id"] for r in httpx.get(f"{url}/v1/runs", timeout=10).json()["runs"]]
    assert run_id.startswith(prefix)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            compute = browser.new_page()
            compute.goto(f"{url}/compute")
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.goto(f"{url}/runs/{run_id}")
            before = page.evaluate(_COUNTS)
            try:
                page.wait_for_function(
                    f"""() => {{
                      const now = ({_COUNTS})();
                      return now.updates > 0 && now.rows >= 2 && now.rows > {before["rows"]}
                        && now.points >= 2 && now.points > {before["points"]};
                    }}""",
                    timeout=ROUNDS_SECONDS * 1000,
                )
            except playwright.TimeoutError as e:
                page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
                raise AssertionError(
                    f"the page did not grow over /v1/events in {ROUNDS_SECONDS} s: loaded with"
                    f" {before}, now {page.evaluate(_COUNTS)}; screenshot in {tmp_path};"
                    " the demo said:\n" + "\n".join(lines.seen)
                ) from e
            after = page.evaluate(_COUNTS)
            rounds = page.inner_text("#rounds")
            status = page.inner_text("#live-status")
            page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
            static = browser.new_context(java_script_enabled=False).new_page()
            static.goto(f"{url}/runs/{run_id}")
            static_rows = static.locator("#rounds tr:not(.empty)").count()
            static_points = static.locator("#loss-chart circle.pt").count()
            static_status = static.inner_text("#live-status")
            compute.wait_for_function(
                '() => document.getElementById("events").childElementCount > 0',
                timeout=ROUNDS_SECONDS * 1000,
            )
            compute.screenshot(path=str(tmp_path / "compute.png"), full_page=True)
        finally:
            browser.close()

    assert before["updates"] == 0, before
    assert after["rows"] > before["rows"], (before, after)
    assert after["points"] > before["points"], (before, after)
    assert re.search(r"^1\s", rounds, re.M), rounds  # round 1 arrived
    assert status.startswith("live: "), status
    # With JavaScript off the same page is complete, as the server rendered it.
    assert static_rows >= after["rows"], (static_rows, after)
    assert static_points >= after["points"], (static_points, after)
    assert static_status.startswith("static page"), static_status
    assert (tmp_path / "dashboard.png").stat().st_size > 0
    assert (tmp_path / "compute.png").stat().st_size > 0
    if keep := os.environ.get("HYPERTRAIN_KEEP_SCREENSHOTS"):
        for name in ("dashboard.png", "compute.png"):
            shutil.copy(tmp_path / name, Path(keep) / name)
