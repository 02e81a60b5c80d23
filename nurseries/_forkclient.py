"""The Trio side of a fork server: run jobs in children forked from one warm process.

`open_fork_server` starts the server program (one that ends in `nurseries.serve_forks`) and
yields a `ForkServer` once the server said it is ready; `ForkServer.run` runs one job in a
fresh child and returns the same `ProcessResult` as `nurseries.run_process`, with the same
promises about the child: a scrubbed environment (exactly ``env``), ``limits``, its own
session and process group ``SIGKILL``-ed at ``timeout`` and whenever the caller is cancelled,
no descriptor but its standard streams and the lifeline, bounded output (``output_cap``), a
bounded reap (`REAP_TIMEOUT`). What differs: the child is forked from the warm server rather
than exec-ed (a spare forked ahead of time, which applies the job's sandbox once it has the
request), its stdin is ``/dev/null`` (the job's input is ``payload``), its working directory is
``cwd``, and it holds one more descriptor, its end pipe: a job that ends with
`nurseries.end_job` has its result returned as soon as it said so, with the status it gave
(its group is then killed), without waiting for the kernel to tear the process down and the
server to reap it; for any other end the status is the kernel's, as the server reports it.

The server process:

- is started with ``env`` (plus its control socket's and its lifeline's variables), in its own
  session, with ``limits`` of its own, stdin and stdout ``/dev/null`` and this program's
  stderr (a server that crashes says why where this program logs);
- holds a lifeline (`nurseries.open_lifeline`) that every child inherits, so neither the
  server nor a child outlives this program, even one killed with ``SIGKILL``;
- is killed (its group) and reaped, bounded, when the block exits.

When the server ends while jobs run (it crashed, or was killed), every job in flight has its
group killed and raises `ForkServerGone`, as does every later `ForkServer.run`; what to do
then (start another server, or run the job some other way) is the caller's choice.

The server never waits on us: it replies on its own, and one reader task here takes every
reply and hands it to the job it names.
"""

from __future__ import annotations

import array
import itertools
import json
import os
import socket
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from nurseries._forkserver import CONTROL_ENV, MESSAGE_MAX
from nurseries._lifeline import open_lifeline
from nurseries._process import (
    REAP_TIMEOUT,
    Limits,
    ProcessResult,
    _CappedSink,
    _drain,
    _kill_group,
    _make_preexec,
    _result,
)

__all__ = ["ForkServer", "ForkServerGone", "open_fork_server"]

_END_MAX = 8
_STATUS_MAX = 255


class ForkServerGone(Exception):
    """The fork server ended (or never became ready); the job it was running has no status."""


@attrs.define(eq=False)
class _Job:
    forked: trio.Event = attrs.field(factory=trio.Event)
    done: trio.Event = attrs.field(factory=trio.Event)
    pid: int | None = None
    status: int | None = None
    """The first of: the status the child announced (`nurseries.end_job`), the kernel's."""
    error: str | None = None


async def _read_end(stream: trio.lowlevel.FdStream, job: _Job) -> None:
    """The status a child announced on its end pipe (`nurseries.end_job`): the job is done
    (once its pid is known, so that its group can be killed). Anything else is ignored: the
    job is then done when the server reports its exit."""
    data = await stream.receive_some(_END_MAX)
    if data.endswith(b"\n") and data[:-1].isdigit() and int(data[:-1]) <= _STATUS_MAX:
        await job.forked.wait()
        if job.status is None:
            job.status = int(data[:-1])
        job.done.set()


@attrs.define(eq=False)
class ForkServer:
    """A running fork server (module doc); made by `open_fork_server`."""

    _sock: trio.socket.SocketType
    _proc: trio.Process
    _jobs: dict[int, _Job] = attrs.field(factory=dict, init=False)
    _ids: itertools.count[int] = attrs.field(factory=itertools.count, init=False)
    _send_lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)
    _gone: trio.Event = attrs.field(factory=trio.Event, init=False)
    server_pid: int = attrs.field(default=0, init=False)

    @property
    def gone(self) -> bool:
        """Whether the server has ended (no job can run on it any more)."""
        return self._gone.is_set()

    async def wait_gone(self) -> None:
        """Return once the server has ended."""
        await self._gone.wait()

    async def _receive(self) -> dict[str, Any] | None:
        data = await self._sock.recv(MESSAGE_MAX)
        if not data:
            return None
        body = json.loads(data)
        if not isinstance(body, dict):
            raise ValueError("a fork server reply is not an object")
        return body

    async def _wait_ready(self) -> None:
        body = await self._receive()
        if body is None or type(body.get("ready")) is not int:
            raise ForkServerGone(f"the fork server ended before it was ready ({body!r:.200})")
        self.server_pid = body["ready"]

    async def _read_replies(self) -> None:
        try:
            while (body := await self._receive()) is not None:
                job = self._jobs.get(body.get("id", -1))
                if job is None:
                    continue
                if "pid" in body:
                    job.pid = int(body["pid"])
                elif "status" in body:
                    if job.status is None:
                        job.status = int(body["status"])
                    job.done.set()
                else:
                    job.error = str(body.get("error"))
                    job.done.set()
                job.forked.set()
        except (OSError, ValueError, trio.ClosedResourceError):
            pass  # a broken control socket is a server gone
        finally:
            self._gone.set()
            for job in self._jobs.values():
                job.forked.set()
                job.done.set()

    async def _request(self, job_id: int, body: dict[str, Any], fds: Sequence[int]) -> None:
        data = json.dumps({"id": job_id, **body}, separators=(",", ":")).encode()
        if len(data) > MESSAGE_MAX:
            raise ValueError(f"a fork request of {len(data)} bytes (at most {MESSAGE_MAX})")
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
        async with self._send_lock:
            await self._sock.sendmsg([data], rights)

    async def run(
        self,
        payload: bytes,
        *,
        env: Mapping[str, str],
        limits: Limits,
        timeout: float,  # noqa: ASYNC109 - the child's deadline, enforced by killing it
        output_cap: int,
        cwd: str,
    ) -> ProcessResult:
        """Run one job in a fresh child of the server (module doc).

        Raises `ForkServerGone` when the server is gone, before or during the job (the job's
        group is killed first), and `OSError` when the server could not fork.
        """
        if timeout <= 0 or output_cap < 0:
            raise ValueError("timeout must be positive and output_cap non-negative")
        if self.gone:
            raise ForkServerGone("the fork server has ended")
        job_id, job = next(self._ids), _Job()
        out_sink, err_sink = _CappedSink(output_cap), _CappedSink(output_cap)
        pipes = [os.pipe() for _ in range(3)]  # stdout, stderr, end
        out, err, end = (trio.lowlevel.FdStream(r) for r, _ in pipes)
        self._jobs[job_id] = job
        deadline_hit = sent = False
        started_at = trio.current_time()
        try:
            body = {
                "env": dict(env),
                "limits": [[w, s, h] for w, (s, h) in limits.rlimits()],
                "cwd": cwd,
                "payload": payload.decode("latin-1"),
            }
            try:
                await self._request(job_id, body, [w for _, w in pipes])
                sent = True
            finally:
                for _, w in pipes:
                    os.close(w)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_drain, out, out_sink)
                nursery.start_soon(_drain, err, err_sink)
                nursery.start_soon(_read_end, end, job)
                with trio.move_on_at(started_at + timeout):
                    await job.done.wait()
                deadline_hit = not job.done.is_set()
                if job.pid is not None:
                    _kill_group(job.pid)
                # As in run_process: pipes reach EOF once every holder is dead; one that left
                # the group could hold them, so reaping and reading get REAP_TIMEOUT.
                nursery.cancel_scope.deadline = trio.current_time() + REAP_TIMEOUT
                await job.done.wait()
        finally:
            with trio.move_on_after(REAP_TIMEOUT, shield=True):
                if sent and not job.done.is_set():
                    await job.forked.wait()  # a job being forked gets its pid first
                    if job.pid is not None:
                        _kill_group(job.pid)
                    await job.done.wait()
                for stream in (out, err, end):
                    await stream.aclose()
            del self._jobs[job_id]
        if job.error is not None:
            raise OSError(f"the fork server could not start the job: {job.error}")
        if job.status is None:
            if job.pid is not None:
                _kill_group(job.pid)
            raise ForkServerGone("the fork server ended while the job ran")
        wall = trio.current_time() - started_at
        return _result(job.status, out_sink, err_sink, limits, deadline_hit, wall)


@asynccontextmanager
async def open_fork_server(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    start_timeout: float,
    limits: Limits | None = None,
    cwd: str = "/",
) -> AsyncIterator[ForkServer]:
    """Start the server ``argv`` and yield it once ready (module doc).

    Raises `ForkServerGone` when the server ends before it is ready, `trio.TooSlowError` when
    it is not ready within ``start_timeout`` seconds, `OSError` when it cannot be started.
    """
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with open_lifeline() as lifeline, ours:
        try:
            proc = await trio.lowlevel.open_process(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env=dict(env) | lifeline.env | {CONTROL_ENV: str(theirs.fileno())},
                cwd=cwd,
                start_new_session=True,
                preexec_fn=_make_preexec(limits or Limits()),
                pass_fds=(*lifeline.pass_fds, theirs.fileno()),
            )
        finally:
            theirs.close()
        server = ForkServer(trio.socket.from_stdlib_socket(ours), proc)
        try:
            with trio.fail_after(start_timeout):
                await server._wait_ready()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(server._read_replies)
                yield server
                nursery.cancel_scope.cancel()
        finally:
            _kill_group(proc.pid)
            with trio.move_on_after(REAP_TIMEOUT, shield=True):
                await proc.wait()
