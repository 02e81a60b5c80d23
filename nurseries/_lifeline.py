"""A lifeline: children notice that the program that started them is gone, even after SIGKILL.

A program killed with SIGKILL cannot stop its children, and a child started in its own session
gets no SIGHUP from anyone. The kernel can still tell them: the parent opens a pipe
(`open_lifeline`) and keeps its write end, which it never writes to and which no child inherits
(descriptors are close-on-exec by default); each child inherits the read end (the spawn's
``pass_fds``) and learns its number from the environment (`LIFELINE_ENV`, the spawn's ``env``).
When the parent process ends, however it ends, the kernel closes its write end; the read end of
every child then reads end-of-file, which `wait_lifeline_cut` waits for. A program that takes the
lifeline (`lifeline_from_env`, passed to `open_supervisor`) shuts down as on SIGHUP. A synchronous
child without Trio (the sandboxed scorer worker) calls `exit_when_lifeline_cut` instead: it ends
at once, without cleanup.

Why not ``prctl(PR_SET_PDEATHSIG)`` in the child's pre-exec hook: the "parent" it watches is the
*thread* that forked the child, and ``trio.lowlevel.open_process`` forks in a worker thread of
Trio's thread cache, which exits after a few idle seconds: the children would be killed while the
program that started them still runs. The pipe is also portable (any POSIX system).

The child's end is made non-inheritable once taken, so nothing the child starts holds it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Final

import trio

__all__ = [
    "LIFELINE_ENV",
    "Lifeline",
    "exit_when_lifeline_cut",
    "lifeline_from_env",
    "open_lifeline",
    "wait_lifeline_cut",
]

log = logging.getLogger(__name__)

LIFELINE_ENV: Final = "NURSERIES_LIFELINE_FD"
"""The environment variable naming the child's end of the lifeline (a descriptor number)."""


class Lifeline:
    """The parent's side of a lifeline (module doc); made by `open_lifeline`."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()

    @property
    def env(self) -> dict[str, str]:
        """Add to each child's environment."""
        return {LIFELINE_ENV: str(self._read)}

    @property
    def pass_fds(self) -> tuple[int]:
        """Pass to each child's spawn (``pass_fds``)."""
        return (self._read,)

    def close(self) -> None:
        """Cut the lifeline: every child that took it starts shutting down. Idempotent."""
        for fd in (self._write, self._read):
            with contextlib.suppress(OSError):  # closed already
                os.close(fd)
        self._read = self._write = -1


@contextmanager
def open_lifeline() -> Iterator[Lifeline]:
    """A `Lifeline` for the children started in the block; cut when the block exits (and by the
    kernel when this process dies)."""
    lifeline = Lifeline()
    try:
        yield lifeline
    finally:
        lifeline.close()


def lifeline_from_env(environ: Mapping[str, str]) -> int | None:
    """The lifeline this process was given, or ``None`` when it was given none.

    A value that is not the number of an open pipe is ignored with a warning (a program
    started by hand with a stray variable must not stop at once). The descriptor is made
    non-inheritable.
    """
    value = environ.get(LIFELINE_ENV)
    if value is None:
        return None
    try:
        fd = int(value)
        if not (value.isdigit() and stat.S_ISFIFO(os.fstat(fd).st_mode)):
            raise ValueError(value)
    except (ValueError, OSError):
        log.warning("%s=%r is not an open pipe; ignored", LIFELINE_ENV, value[:40])
        return None
    os.set_inheritable(fd, False)
    return fd


async def wait_lifeline_cut(fd: int) -> None:
    """Return once the parent's end of the lifeline ``fd`` is closed (module doc).

    The parent never writes; a byte written by mistake also counts as a cut.
    """
    await trio.lowlevel.wait_readable(fd)


def exit_when_lifeline_cut(fd: int, status: int) -> None:
    """From now on, end this process with ``os._exit(status)`` once the lifeline ``fd`` is cut.

    For a synchronous program (no Trio), whose main thread may be busy in one long computation:
    a daemon thread blocks reading ``fd`` and exits the process on end-of-file (or on a byte
    written by mistake). No ``finally``, ``atexit`` or flush runs: the program that would have
    read the output is gone. The thread makes no audited call once started (``os.read`` and
    ``os._exit`` raise no audit event), so an audit hook armed later does not stop it.
    """

    def watch() -> None:
        with contextlib.suppress(OSError):  # an unusable descriptor is as good as cut
            os.read(fd, 1)
        os._exit(status)

    threading.Thread(target=watch, name="lifeline", daemon=True).start()
