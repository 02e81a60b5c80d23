"""The HTTP benches' load processes, on CPUs of their own: the server pinned to one CPU, each
load process started on the others, its answer read back.

A bench's server side is its own process (the daemon and the hello app), pinned to its lowest
CPU where the machine has more than one. Its load comes from a separate process, the bench
script again with ``--load``, which must run on the *other* CPUs: a child inherits its
parent's affinity, so a load process that worked out "every CPU but the lowest" from inside
itself got the server's one pinned CPU back and shared it with the server (every ratio of
``bench/compute.py``, ``serving.py`` and ``views.py`` was skewed so). Here the server records
the CPUs it had before it pins itself (:func:`pin_server`), every child is moved onto the
others before it executes (:meth:`Cpus.off_server`, a ``preexec_fn``), and each load process
reports the CPUs it ran on: :func:`run_load` refuses the answer of one that shared the
server's CPU.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio


@attrs.frozen
class Cpus:
    """The CPUs of the server process and of its load processes (none of its own on a machine
    with one CPU: there the load shares it, and the benches say so)."""

    server: frozenset[int]
    load: frozenset[int]

    def off_server(self) -> None:
        """Move this (child) process onto the load's CPUs: a ``preexec_fn``."""
        if self.load:
            os.sched_setaffinity(0, self.load)

    def describe(self) -> str:
        """Which CPUs each side runs on, for the bench's first line."""
        load = _cpu_list(self.load) if self.load else "the same CPU (one CPU)"
        return f"server (pid {os.getpid()}) on {_cpu_list(self.server)}, load on {load}"


def _cpu_list(cpus: frozenset[int]) -> str:
    return ("CPU " if len(cpus) == 1 else "CPUs ") + ",".join(map(str, sorted(cpus)))


def pin_server() -> Cpus:
    """Pin this process (the server) to its lowest CPU; the others are the load's."""
    cpus = frozenset(os.sched_getaffinity(0))
    if len(cpus) == 1:
        return Cpus(server=cpus, load=frozenset())
    server = frozenset({min(cpus)})
    os.sched_setaffinity(0, server)
    return Cpus(server=server, load=cpus - server)


def raise_fd_limit() -> None:
    """Raise this process's open-file limit to its hard limit: a connection is a file
    descriptor, and the long-poll rows hold thousands at once on both sides."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def address(url: str) -> dict[str, Any]:
    """A load spec's ``host`` and ``port`` for a server's ``http://host:port`` URL."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return {"host": host, "port": int(port)}


async def run_load(cpus: Cpus, script: str, spec: dict[str, Any], limit: float) -> dict[str, Any]:
    """Run ``script --load`` on the load's CPUs with ``spec`` (JSON on its stdin), at most
    ``limit`` seconds; its answer (JSON on its stdout). Raises ``RuntimeError`` if the load
    process ran on the server's CPU (where it has one of its own)."""
    with trio.fail_after(limit):
        result = await trio.run_process(
            [sys.executable, script, "--load"],
            stdin=json.dumps(spec).encode(),
            capture_stdout=True,
            preexec_fn=cpus.off_server,
        )
    answer: dict[str, Any] = json.loads(result.stdout)
    ran_on = frozenset(answer.pop("cpus"))
    if cpus.load and ran_on != cpus.load:
        raise RuntimeError(f"the load process ran on {_cpu_list(ran_on)}: {cpus.describe()}")
    return answer


def load_main(load: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]) -> None:
    """A load process (``--load``): read a spec (JSON) from stdin, run ``load`` on it, print
    its answer (JSON) on stdout with the CPUs this process ran on."""
    raise_fd_limit()
    answer = trio.run(load, json.load(sys.stdin))
    print(json.dumps({**answer, "cpus": sorted(os.sched_getaffinity(0))}))
