"""Reading a child process's output with a deadline (real time), for tests of real processes."""

from __future__ import annotations

import select
import time
from typing import IO


def readline_within(stream: IO[str], seconds: float) -> str:
    """The next line of ``stream`` ('' at its end); AssertionError when none comes within
    ``seconds``. Reads the raw file descriptor's readiness, so a silent child cannot hang the
    test."""
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no line from the child within {seconds:g} s")
        ready, _, _ = select.select([stream], [], [], left)
        if ready:
            return stream.readline()
