"""``python tests/e2e/killer.py PATH PGID TIMEOUT N``: SIGKILL a process group the instant a
file is written to the ``N``-th time (the crash test's kill inside a ledger write).

It watches ``PATH`` with inotify (``IN_MODIFY``, raised by each ``write``), prints ``armed``
once the watch is set, then counts the writes until the ``N``-th or until ``TIMEOUT`` seconds
have passed; it SIGKILLs process group ``PGID`` at once at the ``N``-th and prints ``struck``,
else prints ``timeout``. Exit status 0 either way. (Writes that come faster than it reads are
merged into one event by the kernel, so it may strike a write or two late.)

A process of its own, standard library only: woken by the kernel it kills within microseconds.
A thread of the test's process was too slow (woken, it waits for that interpreter's lock and a
core), and a ledger journal record is one ``write`` of a whole line then an ``fsync``, a final
round's records (a ``commit`` and a ``verdict`` per miner, the ``finalize``) all written within
about a millisecond: this kill lands after the first of them, a random moment practically never
lands inside them.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import struct
import sys
import time

IN_MODIFY = 0x2
EVENT_SIZE = struct.calcsize("iIII")
"""``struct inotify_event`` without a name."""


def main(path: str, pgid: int, timeout: float, writes: int) -> str:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "inotify_init1")
    try:
        if libc.inotify_add_watch(fd, os.fsencode(path), IN_MODIFY) < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {path}")
        print("armed", flush=True)
        deadline = time.monotonic() + timeout
        while writes > 0:
            ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                return "timeout"
            writes -= len(os.read(fd, 4096)) // EVENT_SIZE  # no name: the watch is the file
        os.killpg(pgid, signal.SIGKILL)
        return "struck"
    finally:
        os.close(fd)


if __name__ == "__main__":
    path, pgid, timeout, writes = sys.argv[1:]
    print(main(path, int(pgid), float(timeout), int(writes)), flush=True)
