"""The server side of a fork server: a warm process that forks one sandboxed child per job.

A program that is slow to start (``import torch`` and its settings take seconds) starts once,
prepares everything its jobs share, and then calls `serve_forks`, which never returns. The
other side (`nurseries.open_fork_server`, in Trio) sends it one request per job over a
``SOCK_SEQPACKET`` socket pair (one datagram a message, so the framing is the socket's) and
gets back the child's pid and later its exit status. The loop is plain Python: no Trio, no
threads of its own, nothing that runs a job's code.

Messages are JSON objects, at most :data:`MESSAGE_MAX` bytes:

- server -> client, once, when it can serve: ``{"ready": <server pid>}``;
- client -> server: ``{"id": n, "env": {...}, "limits": [[resource, soft, hard], ...],
  "cwd": "<dir>", "payload": "<latin-1 text>"}``, with exactly three descriptors attached
  (``SCM_RIGHTS``): the child's stdout, its stderr and its end pipe (`end_job`);
- server -> client: ``{"id": n, "pid": p}`` once the child has the request, or ``{"id": n,
  "error": "..."}`` when no child could take it (the request is then finished); then
  ``{"id": n, "status": s}`` once the child is reaped (``s`` as `subprocess` reports it:
  negative for death by a signal).

**A spare child waits for each job.** Forking a process that holds torch costs milliseconds
of CPU (its page tables are copied), so the server forks the next child ahead of time and hands
a request to it (over a socket pair of its own, which the server closes once the request is
sent). It forks that spare when it starts and after each job is reaped (when none waits), not
while it hands a job over: the fork, and the spare's ``prepare_spare`` below, would then take
CPU beside the job that just started, which on a machine whose cores are busy slows that job
down. A spare does only the part of the sandbox that is the same for every job (promises 1 and
2 below) and then blocks until its request comes, using no CPU: its CPU limit, which counts
the CPU a process has used since it was forked, is set once the request is there (promise 3).
A program may give `serve_forks` a ``prepare_spare`` function, which each spare forked ahead
runs once before it waits (after promises 1 and 2): trusted work with no job's data, typically
a warm-up pass that makes the pages a job will write the spare's own (each would otherwise be
copied, a page fault, at the job's first write); its CPU counts towards the job's limit, a
request that comes meanwhile waits for it to end, and any descriptor it leaves open is closed
before the wait (promise 1 holds whatever it does). When no spare is ready (a request while
another job runs, a failed fork) the server forks one on the spot, which skips
``prepare_spare`` (its job is already waiting); a spare that died is replaced by a fresh fork,
once. A spare leaves when its socket reaches end-of-file (the server ended) or when the
lifeline is cut.

Promises of the child, in this order, before the job's code runs (`job(payload)`):

1. it leads a new session and process group (``os.setsid``): the client's kill timer
   ``SIGKILL``-s the group, and the server kills the group once the child is reaped, so
   nothing the job started outlives it (unless it left the group with ``setsid``);
2. stdin is ``/dev/null`` and every other descriptor is closed but the lifeline and its own
   socket to the server (the control socket in particular); then it waits for its request;
   once the request is read, the socket is closed too (a job can never talk to the server),
   stdout and stderr are the descriptors of its request and the end pipe is kept (so a
   job holds its streams, the end pipe and the lifeline);
3. the request's rlimits are applied (`resource.setrlimit`); counters such as CPU time count
   from the fork, which was followed by no work but 1-2, ``prepare_spare`` and the wait;
4. the environment is exactly the request's ``env`` (nothing of the server's is left);
5. its working directory is the request's ``cwd`` (the client's per-job scratch directory);
6. when the server was given a lifeline (`nurseries.lifeline_from_env`), the child watches it
   (`nurseries.exit_when_lifeline_cut` with ``lifeline_exit``): a job does not outlive the
   program that asked for it, even when the server died first.

The job function must end the process, best with `end_job` (or ``os._exit``); if it returns
or raises, the child leaves with :data:`EXIT_JOB_RETURNED`. Whatever the child does, the
server's own state is untouched (it is another process); only the child's exit status reaches
the server.

The server exits when the client closes its end (end-of-file) or the lifeline is cut. It
refuses to start in a process with more than one thread: a fork copies only the thread that
forks, so a child could wait forever on a lock another thread held.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import selectors
import signal
import socket
import sys
from collections.abc import Callable, Mapping
from typing import Any, Final, NoReturn

from nurseries._lifeline import exit_when_lifeline_cut, lifeline_from_env

__all__ = [
    "CONTROL_ENV",
    "EXIT_JOB_RETURNED",
    "MESSAGE_MAX",
    "end_job",
    "serve_forks",
]

CONTROL_ENV: Final = "NURSERIES_FORK_SERVER_FD"
"""The environment variable naming the server's end of the control socket."""
MESSAGE_MAX: Final = 256 * 1024
EXIT_JOB_RETURNED: Final = 70
REQUEST_FDS: Final = 3
"""Descriptors a request carries: the child's stdout, stderr and end pipe."""
_LIFELINE: Final = "lifeline"
_CONTROL: Final = "control"

Job = Callable[[bytes], object]

_end_fd: int | None = None
"""In a fork server's child running a job: the write end of its end pipe (`end_job`)."""


def end_job(status: int) -> NoReturn:
    """End this process with ``status`` (0-255), after flushing ``sys.stdout`` and ``sys.stderr``.

    In a fork server's child, it first closes stdout and stderr and writes ``status`` on the
    end pipe, so the client has the whole output and the status at once, without waiting for
    the kernel to tear the process down (for a process holding torch that takes tens of
    milliseconds); the client then kills the job's group. What a job says this way is worth no
    more than its output: it could as well have exited with that status. Anywhere else it is
    ``os._exit(status)`` after the flushes.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    if _end_fd is not None:
        with contextlib.suppress(OSError):
            os.close(1)
            os.close(2)
            os.write(_end_fd, b"%d\n" % status)
    os._exit(status)


def _send(control: socket.socket, body: Mapping[str, Any]) -> None:
    control.sendall(json.dumps(body, separators=(",", ":")).encode())


def _close_all_but(*keep: int) -> None:
    """Close every descriptor from 3 up, except ``keep``."""
    low = 3
    for fd in sorted(k for k in keep if k >= 3):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))


def _await_request(
    channel: socket.socket, lifeline: int | None, lifeline_exit: int
) -> tuple[dict[str, Any], list[int]]:
    """A spare's wait (module doc): the request and its descriptors, or the spare's end."""
    poll = select.poll()
    for fd in (channel.fileno(), lifeline):
        if fd is not None:
            poll.register(fd, select.POLLIN)
    ready = poll.poll()  # a spare waits as long as its server and the lifeline last
    if lifeline is not None and any(fd == lifeline for fd, _ in ready):
        os._exit(lifeline_exit)
    data, fds, _, _ = socket.recv_fds(channel, MESSAGE_MAX, REQUEST_FDS)
    if not data:
        os._exit(0)  # the server ended
    channel.close()
    request: dict[str, Any] = json.loads(data)  # checked by the server
    return request, fds


def _become_job(request: Mapping[str, Any], fds: list[int]) -> None:
    """Apply the job-specific part of the sandbox (module doc, steps 2-5), in the child."""
    global _end_fd
    out_fd, err_fd, _end_fd = fds
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    os.close(out_fd)
    os.close(err_fd)
    for which, soft, hard in request["limits"]:
        resource.setrlimit(which, (soft, hard))
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])


def _prepare(prepare_spare: Callable[[], object] | None) -> None:
    """Run ``prepare_spare`` in a spare; a failure is reported on stderr and the spare serves
    on, unprepared (it was an optimisation; the job runs the same without it)."""
    if prepare_spare is None:
        return
    try:
        prepare_spare()
    except Exception as e:
        with contextlib.suppress(BaseException):
            os.write(
                2, f"fork server spare: preparing failed: {type(e).__name__}: {e}\n"[:1000].encode()
            )


def _spare(
    channel: socket.socket,
    lifeline: int | None,
    lifeline_exit: int,
    job: Job,
    prepare_spare: Callable[[], object] | None,
) -> NoReturn:
    """The forked child: waits for its job, then runs it; never returns into the server."""
    try:
        os.setsid()
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        kept = (channel.fileno(), *(() if lifeline is None else (lifeline,)))
        _close_all_but(*kept)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        _prepare(prepare_spare)
        _close_all_but(*kept)  # whatever the preparing left open never reaches the job
        request, fds = _await_request(channel, lifeline, lifeline_exit)
        _become_job(request, fds)
        if lifeline is not None:
            exit_when_lifeline_cut(lifeline, lifeline_exit)
        job(request["payload"].encode("latin-1"))
    except BaseException as e:  # the child's last word, then it ends
        with contextlib.suppress(BaseException):
            os.write(2, f"fork server child: {type(e).__name__}: {e}\n"[:1000].encode())
    os._exit(EXIT_JOB_RETURNED)


def _checked(data: bytes) -> dict[str, Any]:
    body = json.loads(data)
    if not (
        isinstance(body, dict)
        and set(body) == {"id", "env", "limits", "cwd", "payload"}
        and type(body["id"]) is int
        and isinstance(body["env"], dict)
        and isinstance(body["limits"], list)
        and isinstance(body["cwd"], str)
        and isinstance(body["payload"], str)
    ):
        raise ValueError("not a fork request")
    return body


class _Child:
    """A forked child: a spare (``job_id`` None, ``channel`` open) until it has its job."""

    def __init__(self, pid: int, pidfd: int, channel: socket.socket) -> None:
        self.pid, self.pidfd, self.channel = pid, pidfd, channel
        self.job_id: int | None = None


class _Server:
    def __init__(
        self,
        control: socket.socket,
        lifeline: int | None,
        lifeline_exit: int,
        job: Job,
        prepare_spare: Callable[[], object] | None,
    ):
        self.control, self.lifeline, self.lifeline_exit = control, lifeline, lifeline_exit
        self.job, self.prepare_spare = job, prepare_spare
        self.spare: _Child | None = None
        self.selector = selectors.DefaultSelector()
        self.selector.register(control, selectors.EVENT_READ, _CONTROL)
        if lifeline is not None:
            self.selector.register(lifeline, selectors.EVENT_READ, _LIFELINE)

    def serve(self) -> NoReturn:
        self._refill()
        _send(self.control, {"ready": os.getpid()})
        while True:
            for key, _ in self.selector.select():
                if key.data == _LIFELINE:
                    os._exit(self.lifeline_exit)
                elif key.data == _CONTROL:
                    self._take_request()  # no refill here (module doc)
                elif self._reap(key.data):
                    self._refill()

    def _fork(self, *, ahead: bool) -> _Child:
        """A new child; ``ahead``: a spare that runs ``prepare_spare`` before it waits."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                prepare = self.prepare_spare if ahead else None
                _spare(theirs, self.lifeline, self.lifeline_exit, self.job, prepare)
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            ours.close()
            _kill(pid)
            os.waitpid(pid, 0)
            raise
        child = _Child(pid, pidfd, ours)
        self.selector.register(pidfd, selectors.EVENT_READ, child)
        return child

    def _refill(self) -> None:
        """Fork the next spare when none waits; a failed fork is retried after the next job."""
        if self.spare is None:
            with contextlib.suppress(OSError):
                self.spare = self._fork(ahead=True)

    def _hand_off(self, data: bytes, fds: list[int]) -> _Child:
        """Send the request to the spare (or a fresh fork); a dead spare is replaced once."""
        for attempt in (1, 2):
            child, self.spare = self.spare or self._fork(ahead=False), None
            with child.channel:
                try:
                    socket.send_fds(child.channel, [data], fds)
                    return child
                except OSError:
                    _kill(child.pid)  # reaped, as a spare, when its pidfd says so
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _take_request(self) -> None:
        data, fds, flags, _ = socket.recv_fds(self.control, MESSAGE_MAX, REQUEST_FDS)
        if not data:
            os._exit(0)  # the client closed its end
        job_id: int | None = None
        try:
            if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(fds) != REQUEST_FDS:
                raise ValueError("a request needs three descriptors and fits one message")
            job_id = _checked(data)["id"]
            child = self._hand_off(data, fds)
            child.job_id = job_id
            _send(self.control, {"id": job_id, "pid": child.pid})
        except (OSError, ValueError) as e:
            _send(self.control, {"id": job_id, "error": f"{type(e).__name__}: {e}"[:1000]})
        finally:
            for fd in fds:
                os.close(fd)

    def _reap(self, child: _Child) -> bool:
        """Reap ``child`` and report it; whether it had a job (a spare that died is not
        replaced here, lest spares that die at once keep the server forking)."""
        self.selector.unregister(child.pidfd)
        os.close(child.pidfd)
        _, status = os.waitpid(child.pid, 0)
        _kill(child.pid)  # the rest of its group
        if child is self.spare:  # a spare died waiting: the next request forks one
            self.spare = None
            child.channel.close()
        if child.job_id is None:
            return False
        _send(self.control, {"id": child.job_id, "status": os.waitstatus_to_exitcode(status)})
        return True


def _kill(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is empty
        os.killpg(pgid, signal.SIGKILL)


def serve_forks(
    job: Job,
    *,
    lifeline_exit: int = 1,
    prepare_spare: Callable[[], object] | None = None,
) -> NoReturn:
    """Serve fork requests on the control socket of :data:`CONTROL_ENV` forever (module doc).

    ``job`` runs in each child once its sandbox is applied, with the request's payload;
    ``prepare_spare`` (when given) in each spare before it waits for its request. Raises
    `RuntimeError`, before serving, in a process with more than one thread.
    """
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        raise RuntimeError(f"a fork server must have one thread, this process has {threads}")
    control = socket.socket(fileno=int(os.environ[CONTROL_ENV]))
    control.set_inheritable(False)
    lifeline = lifeline_from_env(os.environ)
    _Server(control, lifeline, lifeline_exit, job, prepare_spare).serve()
