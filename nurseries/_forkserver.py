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
  "cwd": "<dir>", "payload": "<latin-1 text>"}``, with exactly two descriptors attached
  (``SCM_RIGHTS``): the child's stdout and stderr;
- server -> client: ``{"id": n, "pid": p}`` once the child is forked, or ``{"id": n,
  "error": "..."}`` when it could not be (the request is then finished); then
  ``{"id": n, "status": s}`` once the child is reaped (``s`` as `subprocess` reports it:
  negative for death by a signal).

Promises of the child, in this order, before the job's code runs (`job(payload)`):

1. it leads a new session and process group (``os.setsid``): the client's kill timer
   ``SIGKILL``-s the group, and the server kills the group once the child is reaped, so
   nothing the job started outlives it (unless it left the group with ``setsid``);
2. stdin is ``/dev/null``, stdout and stderr are the descriptors of its request, and every
   other descriptor is closed but the lifeline: the control socket in particular, so a job
   can never talk to the server;
3. the request's rlimits are applied (`resource.setrlimit`); counters such as CPU time start
   at zero in a forked child;
4. the environment is exactly the request's ``env`` (nothing of the server's is left);
5. its working directory is the request's ``cwd`` (the client's per-job scratch directory);
6. when the server was given a lifeline (`nurseries.lifeline_from_env`), the child watches it
   (`nurseries.exit_when_lifeline_cut` with ``lifeline_exit``): a job does not outlive the
   program that asked for it, even when the server died first.

The job function must end the process (``os._exit``); if it returns or raises, the child
leaves with :data:`EXIT_JOB_RETURNED`. Whatever the child does, the server's own state is
untouched (it is another process); only the child's exit status reaches the server.

The server exits when the client closes its end (end-of-file) or the lifeline is cut.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
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
    "serve_forks",
]

CONTROL_ENV: Final = "NURSERIES_FORK_SERVER_FD"
"""The environment variable naming the server's end of the control socket."""
MESSAGE_MAX: Final = 256 * 1024
EXIT_JOB_RETURNED: Final = 70
_LIFELINE: Final = "lifeline"
_CONTROL: Final = "control"

Job = Callable[[bytes], object]


def _send(control: socket.socket, body: Mapping[str, Any]) -> None:
    control.sendall(json.dumps(body, separators=(",", ":")).encode())


def _close_all_but(*keep: int) -> None:
    """Close every descriptor from 3 up, except ``keep``."""
    low = 3
    for fd in sorted(k for k in keep if k >= 3):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))


def _become_job(request: Mapping[str, Any], out_fd: int, err_fd: int, lifeline: int | None) -> None:
    """Apply the child's sandbox (module doc, steps 1-6), in the forked child."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    _close_all_but(*(() if lifeline is None else (lifeline,)))
    for which, soft, hard in request["limits"]:
        resource.setrlimit(which, (soft, hard))
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)


def _child(
    request: Mapping[str, Any], fds: list[int], lifeline: int | None, lifeline_exit: int, job: Job
) -> NoReturn:
    """The forked child: never returns into the server's loop, whatever happens."""
    try:
        _become_job(request, fds[0], fds[1], lifeline)
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


class _Server:
    def __init__(self, control: socket.socket, lifeline: int | None, lifeline_exit: int, job: Job):
        self.control, self.lifeline, self.lifeline_exit, self.job = (
            control,
            lifeline,
            lifeline_exit,
            job,
        )
        self.selector = selectors.DefaultSelector()
        self.selector.register(control, selectors.EVENT_READ, _CONTROL)
        if lifeline is not None:
            self.selector.register(lifeline, selectors.EVENT_READ, _LIFELINE)

    def serve(self) -> NoReturn:
        _send(self.control, {"ready": os.getpid()})
        while True:
            for key, _ in self.selector.select():
                if key.data == _LIFELINE:
                    os._exit(self.lifeline_exit)
                elif key.data == _CONTROL:
                    self._take_request()
                else:
                    self._reap(key.fd, *key.data)

    def _take_request(self) -> None:
        data, fds, flags, _ = socket.recv_fds(self.control, MESSAGE_MAX, 2)
        if not data:
            os._exit(0)  # the client closed its end
        job_id: object = None
        try:
            if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(fds) != 2:
                raise ValueError("a request needs two descriptors and fits one message")
            request = _checked(data)
            job_id = request["id"]
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(request, fds, self.lifeline, self.lifeline_exit, self.job)
            pidfd = os.pidfd_open(pid)
            self.selector.register(pidfd, selectors.EVENT_READ, (job_id, pid))
            _send(self.control, {"id": job_id, "pid": pid})
        except (OSError, ValueError) as e:
            _send(self.control, {"id": job_id, "error": f"{type(e).__name__}: {e}"[:1000]})
        finally:
            for fd in fds:
                os.close(fd)

    def _reap(self, pidfd: int, job_id: int, pid: int) -> None:
        self.selector.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is empty
            os.killpg(pid, signal.SIGKILL)
        _send(self.control, {"id": job_id, "status": os.waitstatus_to_exitcode(status)})


def serve_forks(job: Job, *, lifeline_exit: int = 1) -> NoReturn:
    """Serve fork requests on the control socket of :data:`CONTROL_ENV` forever (module doc).

    ``job`` runs in each child once its sandbox is applied, with the request's payload.
    """
    control = socket.socket(fileno=int(os.environ[CONTROL_ENV]))
    control.set_inheritable(False)
    lifeline = lifeline_from_env(os.environ)
    _Server(control, lifeline, lifeline_exit, job).serve()
