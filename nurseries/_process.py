"""Run an untrusted child process with rlimits, a scrubbed environment and a kill timer.

`run_process` promises:

* **Scrubbed environment.** The child's environment is exactly ``env``; nothing of ours is
  inherited, no descriptor but its standard streams and ``pass_fds`` (a lifeline's end,
  `nurseries.open_lifeline`) either.
* **Resource limits** (`Limits`), applied in the child after ``fork`` and before ``exec``:
  ``RLIMIT_AS`` (address space), ``RLIMIT_CPU`` (seconds of CPU), ``RLIMIT_NOFILE`` and
  ``RLIMIT_FSIZE``. Each is optional.
* **Its own session.** The child leads a new session and process group
  (``start_new_session=True``), so one ``os.killpg`` reaches everything it spawned (unless a
  descendant deliberately leaves the group with ``setsid``).
* **Bounded output.** stdout and stderr are read concurrently; at most ``output_cap`` bytes of
  each are kept, the rest is read and discarded so the child never blocks on a full pipe, and
  the result says whether a stream was truncated.
* **A hard deadline.** At ``timeout`` seconds (trio clock) the whole process group gets
  ``SIGKILL``. The same happens when the caller is cancelled and when the child exits on its
  own (nothing it left running in its group outlives the call). The cleanup after the kill is
  shielded and bounded by `REAP_TIMEOUT`, so a cancelled caller is released promptly.

How the limits are applied: ``preexec_fn`` runs Python code in the forked child before
``exec``. That is unsafe in general when the parent has other threads (a lock another thread
held at ``fork`` stays held forever in the child). Ours only calls ``resource.setrlimit`` — a
thin wrapper over the ``setrlimit`` system call — with integers prepared in the parent, and
takes no locks, allocates nothing of note and imports nothing. A re-exec wrapper
(``python -c ... exec``) was rejected because the interpreter's C-locale coercion writes
``LC_CTYPE`` into the environment it hands on, which would break the scrubbed environment.

Limits are process-wide in the child and inherited by its descendants, but they are counted per
process: five grandchildren may each use the full ``RLIMIT_AS`` and ``RLIMIT_CPU``.

Spawning goes through `trio.lowlevel.open_process`, which calls ``subprocess.Popen`` in a worker
thread; do not run real subprocesses in tests under the autojump clock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence

import attrs
import trio

__all__ = ["REAP_TIMEOUT", "Limits", "ProcessResult", "run_process"]

log = logging.getLogger(__name__)

REAP_TIMEOUT: float = 5.0
"""Seconds allowed, after the group was killed, to reap the child and collect its output."""

_READ_CHUNK = 65536

# Markers a failed allocation leaves in the last bytes of stderr: CPython (MemoryError),
# C++ (std::bad_alloc), torch's CPU allocator, and glibc/strerror(ENOMEM).
_MEMORY_MARKERS = (
    b"MemoryError",
    b"std::bad_alloc",
    b"can't allocate memory",
    b"Cannot allocate memory",
    b"out of memory",
)
# Signals a program typically dies of when an allocation fails and it does not check
# (SIGSEGV on a NULL dereference, SIGBUS) or aborts on it (SIGABRT: std::terminate, glibc).
_MEMORY_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT})
_TAIL_BYTES = 4096


@attrs.frozen
class Limits:
    """Per-process resource limits for the child; ``None`` leaves a limit as inherited.

    ``cpu_seconds`` becomes the soft ``RLIMIT_CPU`` (the kernel sends ``SIGXCPU``); the hard
    limit is one second later (``SIGKILL``) for children that ignore ``SIGXCPU``.
    """

    address_space_bytes: int | None = None
    cpu_seconds: int | None = None
    open_files: int | None = None
    file_size_bytes: int | None = None

    def rlimits(self) -> tuple[tuple[int, tuple[int, int]], ...]:
        """The ``(resource, (soft, hard))`` pairs to apply, in a fixed order."""
        pairs: list[tuple[int, tuple[int, int]]] = []
        if self.address_space_bytes is not None:
            n = self.address_space_bytes
            pairs.append((resource.RLIMIT_AS, (n, n)))
        if self.cpu_seconds is not None:
            pairs.append((resource.RLIMIT_CPU, (self.cpu_seconds, self.cpu_seconds + 1)))
        if self.open_files is not None:
            pairs.append((resource.RLIMIT_NOFILE, (self.open_files, self.open_files)))
        if self.file_size_bytes is not None:
            n = self.file_size_bytes
            pairs.append((resource.RLIMIT_FSIZE, (n, n)))
        return tuple(pairs)


@attrs.frozen
class ProcessResult:
    """What became of one child.

    ``returncode`` is negative for death by signal (``-9`` for ``SIGKILL``).
    ``killed_for_time`` is true when our deadline killed the group, or when the kernel ended the
    child for ``RLIMIT_CPU`` (then ``cpu_limit_hit`` is true as well).
    ``killed_for_memory`` is a heuristic, only ever true when an address-space limit was set
    and the child failed: the last 4 KiB of its stderr name a failed allocation (CPython's
    ``MemoryError`` — a Python child exits 1 with it — ``std::bad_alloc``, torch's "can't
    allocate memory", ``ENOMEM``'s "Cannot allocate memory"), or it died of ``SIGSEGV``,
    ``SIGBUS`` or ``SIGABRT``, which is how programs that do not check allocations end. A crash
    of those kinds for another reason under a memory limit is misreported as memory.
    ``wall_seconds`` is measured on the trio clock from spawn to reap.
    """

    returncode: int
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    killed_for_time: bool
    killed_for_memory: bool
    cpu_limit_hit: bool
    wall_seconds: float


class _CappedSink:
    """Keeps the first ``cap`` bytes of a stream, plus its last bytes for diagnosis."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._head = bytearray()
        self._tail = b""
        self.truncated = False

    def feed(self, data: bytes | bytearray) -> None:
        room = self._cap - len(self._head)
        if len(data) > room:
            self.truncated = True
        if room > 0:
            self._head += data[:room]
        self._tail = (self._tail + data)[-_TAIL_BYTES:]

    @property
    def head(self) -> bytes:
        return bytes(self._head)

    @property
    def tail(self) -> bytes:
        return self._tail


def _make_preexec(limits: Limits) -> Callable[[], None] | None:
    pairs = limits.rlimits()
    if not pairs:
        return None
    setrlimit = resource.setrlimit

    def apply_limits() -> None:  # runs in the forked child: see the module docstring
        for which, soft_hard in pairs:
            setrlimit(which, soft_hard)

    return apply_limits


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # every member is gone already
        os.killpg(pgid, signal.SIGKILL)


async def _drain(stream: trio.abc.ReceiveStream | None, sink: _CappedSink) -> None:
    if stream is None:
        return
    while chunk := await stream.receive_some(_READ_CHUNK):
        sink.feed(chunk)


async def _feed(stream: trio.abc.SendStream | None, data: bytes) -> None:
    if stream is None:
        return
    try:
        await stream.send_all(data)
        await stream.aclose()
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the child stopped reading; its exit status tells the story


async def run_process(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    limits: Limits,
    timeout: float,  # noqa: ASYNC109 - the child's deadline, enforced by killing it
    output_cap: int,
    cwd: str | os.PathLike[str] | None = None,
    stdin: bytes | None = None,
    pass_fds: Sequence[int] = (),
) -> ProcessResult:
    """Run ``argv`` to completion under ``limits`` and a ``timeout`` (seconds); see the module.

    ``stdin`` is written to the child and then closed; without it the child's stdin is
    ``/dev/null``. Raises `OSError` (e.g. `FileNotFoundError`) when the program cannot be
    started; everything that happens after the start is reported in the `ProcessResult`.
    Cancelling the caller kills the process group and re-raises `trio.Cancelled`.
    """
    if timeout <= 0 or output_cap < 0:
        raise ValueError("timeout must be positive and output_cap non-negative")
    proc = await trio.lowlevel.open_process(
        list(argv),
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env),
        cwd=cwd,
        start_new_session=True,
        preexec_fn=_make_preexec(limits),
        pass_fds=tuple(pass_fds),
    )
    started_at = trio.current_time()
    out, err = _CappedSink(output_cap), _CappedSink(output_cap)
    deadline_hit = False
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_drain, proc.stdout, out)
            nursery.start_soon(_drain, proc.stderr, err)
            nursery.start_soon(_feed, proc.stdin, stdin or b"")
            with trio.move_on_at(started_at + timeout):
                await proc.wait()
            deadline_hit = proc.returncode is None
            _kill_group(proc.pid)
            # Pipes reach EOF once every holder is dead; one that escaped the group could keep
            # them open, so reaping and reading get REAP_TIMEOUT and are then abandoned.
            nursery.cancel_scope.deadline = trio.current_time() + REAP_TIMEOUT
            await proc.wait()
    finally:
        if proc.returncode is None:
            _kill_group(proc.pid)
        with trio.move_on_after(REAP_TIMEOUT, shield=True):
            await proc.wait()
            await _close_pipes(proc)
    if proc.returncode is None:
        raise RuntimeError(f"process {proc.pid} survived SIGKILL for {REAP_TIMEOUT} s")
    return _result(
        proc.returncode, out, err, limits, deadline_hit, trio.current_time() - started_at
    )


async def _close_pipes(proc: trio.Process) -> None:
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            await stream.aclose()


def _result(
    returncode: int,
    out: _CappedSink,
    err: _CappedSink,
    limits: Limits,
    deadline_hit: bool,
    wall_seconds: float,
) -> ProcessResult:
    cpu_hit = limits.cpu_seconds is not None and (
        returncode == -signal.SIGXCPU or (returncode == -signal.SIGKILL and not deadline_hit)
    )
    memory = (
        limits.address_space_bytes is not None
        and returncode != 0
        and not deadline_hit
        and not cpu_hit
        and (
            any(marker in err.tail for marker in _MEMORY_MARKERS) or -returncode in _MEMORY_SIGNALS
        )
    )
    return ProcessResult(
        returncode=returncode,
        stdout=out.head,
        stderr=err.head,
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
        killed_for_time=deadline_hit or cpu_hit,
        killed_for_memory=memory,
        cpu_limit_hit=cpu_hit,
        wall_seconds=wall_seconds,
    )
