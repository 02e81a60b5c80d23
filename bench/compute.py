"""Compute-network throughput of the daemon over loopback, next to a bare hypercorn "hello" app.

Issue 8 acceptance: lease -> result cycles per second, and the number of concurrently held
lease long polls the daemon sustains, next to the bare hypercorn figure from the same run.

The server side is one process (this one, pinned to CPU 0 where the machine has more than one),
as in ``bench/serving.py``: the real daemon (``serve_daemon``, local-chain beacon, fresh state dir
and secrets, with every background service, the compute reaper and fallback pool included) and
a raw ASGI app answering ``{"hello": "world"}``, both on ``serve_asgi`` (same hypercorn trio
worker, same backlog). The step window (``HYPERTRAIN_COMPUTE_WAIT_MS``) is one hour, so the
fallback never takes a step during the run. Load comes from a separate process (this script
with ``--load``, pinned to the other CPUs) speaking raw-socket HTTP/1.1 keep-alive.

Rows (``hello POST``, ``lease -> result`` and ``result+next`` are measured in ``--slices``
alternating slices, so that the machine's load, which other work changes, weighs on all alike):

Each of them also prints the server process's CPU time per request (its whole process time
over the row's slices, warm-up included, over the requests sent): on a machine busy with other
work the ratio of these is steadier than the ratio of the rates.

- ``hello POST``: the floor of the stack, ``--nodes`` connections each posting a lease-sized
  JSON body and waiting for the answer before the next one (requests/s).
- ``lease -> result``: ``--jobs`` delta-loss steps (stand-in input objects, one transaction,
  before the row starts; queued 1 ms apart, as a steady stream would be) are in the book, and
  the queue is topped back up to ``--jobs`` steps between slices;
  ``--nodes`` registered nodes, one keep-alive connection each, loop ``POST
  /v1/compute/jobs/lease`` (``wait_ms`` 1000) then ``POST /v1/compute/jobs/{id}/result`` with
  the same answer for both copies of a step, so every step settles by agreement and both
  copies are paid. One cycle = one lease answered with a copy + its result answered 200
  ``counted``; each cycle is two HTTP requests. A lease answered ``{"job": null}`` means the
  book ran dry within a slice (a note says so: raise ``--jobs``; an empty lease waits its
  1 s). The ``depth`` row below measures how the figure depends on the book's depth.
- ``result+next`` (issue 17 goal 3): the same, each result post carrying the node's next lease
  request (``next``: the lease body above), so that a cycle is one request: the node leases
  the plain way only when the last answer carried no copy. Printed beside the two-request row:
  cycles/s, requests/s (answered requests over the measured seconds), requests a cycle, and
  each rate's ratio to the ``hello POST`` rate of the same run (goal: requests/s at least 0.6x),
  with the write and read transactions a request.
- ``depth`` (issue 17 goal 1; not run by default: filling 100,000 steps takes minutes): for
  each ``--depths`` N (default 1,000 and 100,000), the book is brought to N queued steps over
  a history of N settled steps (leased, answered alike by two nodes and paid in process through
  the book's own functions, ``book.settle_history``: 2N answered copies; the rows before it add
  a few more), then checkpointed; then ``hello POST`` and ``lease -> result`` as above, in
  alternating slices, the queue topped back up to N steps between slices. Printed per depth:
  the book's size, the fill time, both rates and the server's CPU per request; at the end each
  depth's cycles/s over the first depth's, raw and per ``hello POST`` of the same depth (the
  machine's other work changes between depths; hello's rate measures it), and the ratio of
  the server's CPU per request (goal: at least 0.8 at 100,000).
- ``long polls``: nothing queued; N connections at once each post one lease with ``wait_ms``
  ``--hold-ms`` (default 5000 to keep the run short; 25000 is the route's maximum), the N
  polls sharing ``--poll-keys`` node keys round robin. N ramps through ``--polls`` and stops at
  the first level that fails. A level passes when every poll was answered 200 ``{"job": null}``
  (none before its hold, no connection error, none given up on: a poll gets 20 s to connect,
  then its hold plus ``--late-s``, ``wait_ms`` counted by the server from its intake) and all N
  were surely held by the server at one instant (a poll sent at ``s`` and answered at ``a``
  was held throughout ``[a - hold, s + hold]``). The last level that passed is the figure;
  ``>=`` when the top level passed too.
- ``burst`` (issue 17 goal 4): for each ``--burst`` level N, N connections poll (``wait_ms``
  25 s, the ``--poll-keys`` keys round robin; a poll answered ``{"job": null}`` polls again on
  its connection, as a node does, until it gets a copy) and are held (the row waits until the
  daemon holds 99% of N, at most a minute, and prints how many it held), then N copies (N/2
  steps) are queued in one
  transaction, which hands them to the held polls; printed: how many polls got a copy, and the
  time from that transaction to each answer (p50, p99, max). Goal: p99 under 1 s at 1,000 and
  under 2 s at 10,000. Then the server's CPU time per poll taken in (from the row's start to
  the enqueue, over the polls sent before it) and per copy answered (from the enqueue to the
  p99 answer, over 99% of the answers), the CPU time its cyclic collector took in each of these
  two spans, by generation, and the load generator's CPU time per poll sent (it has a CPU of its
  own where the machine has two, but shares it with whatever else runs there).

``--profile PREFIX`` profiles the server: in the ``result+next`` row (cProfile on the process's
CPU time, ``PREFIX-result+next.prof``) and in the burst row's two spans (taking polls in;
answering), with cProfile on the Trio thread's CPU clock or, with ``--py-spy BIN``, py-spy
sampling from the load's CPU; the figures of a profiled run are not the bench's.

The server process sets its garbage collector up as ``hypertrain-daemon`` does once it is up
(``nurseries.tune_collector_for_serving``).

A connection that fails (a reset, a close) is counted as an error and replaced; it never ends
the run.

    .venv/bin/python bench/compute.py [--seconds 4] [--slices 4] [--nodes 32] [--jobs 1000]
        [--hold-ms 5000] [--polls 500,1000,2000,4000] [--poll-keys 50] [--burst 1000]
        [--rows rates,depth,polls,burst] [--depths 1000,100000]

``--rows burst --burst 1000,10000`` runs only the burst row, at both of goal 4's levels.

``--rows rates`` runs the three rate rows alone (about 20 s).

``--rows depth`` runs goal 1's row alone (1,000 then 100,000 queued and settled steps; the
fill takes a few minutes).

The default run takes about 75 s.

Run it as a script: ``python bench/compute.py``.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import math
import os
import pstats
import secrets
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Final

import httpx
import trio
from _daemon import SETUP_TIMEOUT, open_servers
from _load import Cpus, address, load_main, pin_server, raise_fd_limit, run_load
from book import history_nodes, settle_history

from hypertrain.compute import Event, enqueue_step
from hypertrain.coordinator.computehub import WORK
from hypertrain.daemon.main import DaemonHandle
from hypertrain.scoring.registry import DELTA_LOSS
from hypertrain.store import Database
from nurseries import tune_collector_for_serving

WARMUP: Final = 0.5
LOAD_TIMEOUT_MARGIN: Final = 30.0  # seconds beyond warm-up + measurement a load process may take
STRAGGLER_TIMEOUT: Final = 5.0  # seconds an answer may take after the measurement ended
CONNECT_TIMEOUT: Final = 20.0
CYCLE_WAIT_MS: Final = 1000
STEP_WAIT_MS: Final = 3_600_000  # the step window: the fallback never takes a step in a run
LEASE_BODY: Final = {"capabilities": ["delta-loss"], "hardware": "cpu"}
ANSWER: Final = {"loss": "40a00000", "fingerprint": "ab" * 32, "wallMs": 12}


# -- the load generator (a separate process) ---------------------------------------------------

BURST_HOLD_MS: Final = 25_000
"""wait_ms of the burst's polls: they are all held when the copies come."""
BURST_HELD_TIMEOUT: Final = 60.0
"""Seconds the burst waits for all its polls to be held before it queues their copies."""
CPU_SAMPLE_S: Final = 0.02
"""Seconds between the burst's samples of the server's CPU time while answers go out."""
PY_SPY_ATTACH_S: Final = 0.5
"""Seconds ``--py-spy`` is given to attach before a phase goes on."""
RECONNECT_PAUSE: Final = 0.05
"""Seconds before a failed connection's replacement (no hot loop on a refusing server)."""
CONNECTION_FAILURES: Final = (
    OSError,
    ConnectionError,
    ValueError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
)
"""What a failing connection raises in the load generator: trio reports a reset (ECONNRESET)
as ``BrokenResourceError``, which is no ``OSError``; each is counted, never fatal."""


class Connection:
    """One raw HTTP/1.1 keep-alive connection: a request, then its answer (Content-Length)."""

    def __init__(self, stream: trio.SocketStream, host: str) -> None:
        self.stream = stream
        self.host = host
        self.buffer = b""

    async def _more(self) -> None:
        data = await self.stream.receive_some(65536)
        if not data:
            raise ConnectionError("the server closed the connection")
        self.buffer += data

    async def post(self, path: str, body: object, key: str | None = None) -> tuple[int, bytes]:
        data = json.dumps(body).encode()
        lines = [f"POST {path} HTTP/1.1", f"host: {self.host}", "content-type: application/json"]
        lines.append(f"content-length: {len(data)}")
        if key is not None:
            lines.append(f"authorization: Bearer {key}")
        await self.stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode() + data)
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            await self._more()
        head, self.buffer = self.buffer[:end], self.buffer[end + 4 :]
        status = int(head[9:12])
        length = None
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if length is None:
            raise ConnectionError("an answer without Content-Length")
        while len(self.buffer) < length:
            await self._more()
        answer, self.buffer = self.buffer[:length], self.buffer[length:]
        return status, answer


async def _connect(spec: dict[str, Any]) -> Connection:
    with trio.fail_after(CONNECT_TIMEOUT):
        stream = await trio.open_tcp_stream(spec["host"], spec["port"])
    return Connection(stream, spec["host"])


def _note(counts: dict[str, Any], what: str) -> None:
    notes = counts.setdefault("notes", {})
    notes[what] = notes.get(what, 0) + 1


async def _hello_loop(spec: dict[str, Any], counts: dict[str, Any], stop: list[float]) -> None:
    conn = await _connect(spec)
    async with conn.stream:
        while time.perf_counter() < stop[0]:
            status, _ = await conn.post("/", LEASE_BODY)
            _count(counts, stop, "ok" if status == 200 else "errors")


def _count(counts: dict[str, Any], stop: list[float], key: str) -> None:
    """Count one answered request, and ``key`` when the measurement is on (past the warm-up)."""
    counts["requests"] += 1
    if time.perf_counter() >= stop[1]:
        counts["timed_requests"] += 1
        counts[key] += 1


async def _cycle_loop(
    spec: dict[str, Any], key: str, counts: dict[str, Any], stop: list[float]
) -> None:
    """A node's loop: a lease, then its result; with ``spec["next"]`` the result carries the
    next lease request and its answer's job is the next one (a lease only when it has none)."""
    conn = await _connect(spec)
    lease_body = {**LEASE_BODY, "wait_ms": CYCLE_WAIT_MS}
    job = None
    async with conn.stream:
        while time.perf_counter() < stop[0]:
            if job is None:
                status, raw = await conn.post("/v1/compute/jobs/lease", lease_body, key)
                job = json.loads(raw).get("job") if status == 200 else None
                if job is None:
                    _count(counts, stop, "empty" if status == 200 else "errors")
                    if status != 200:
                        _note(counts, f"lease {status} {raw[:80]!r}")
                    continue
                _count(counts, stop, "leased")
            result = {"lease": job["lease"], "ok": True, "result": ANSWER}
            if spec.get("next"):
                result["next"] = lease_body
            status, raw = await conn.post(f"/v1/compute/jobs/{job['id']}/result", result, key)
            answer = json.loads(raw)
            good = status == 200 and answer.get("status") == "counted"
            _count(counts, stop, "ok" if good else "errors")
            if time.perf_counter() >= stop[1]:
                counts["settled"] += good and answer.get("job_state") == "settled"
            if not good:
                _note(counts, f"result {status} {raw[:80]!r}")
            job = answer.get("next", {}).get("job") if spec.get("next") and good else None
            if spec.get("next") and good and job is None:
                counts["empty"] += time.perf_counter() >= stop[1]
        if job is not None:  # carried past the row's end: answered, not counted, as a node
            # finishes its job (left leased, it kept this key's next lease empty until its
            # deadline: the next slice's first lease waited out its wait_ms)
            result = {"lease": job["lease"], "ok": True, "result": ANSWER}
            await conn.post(f"/v1/compute/jobs/{job['id']}/result", result, key)


async def _timed(spec: dict[str, Any], loops: list[Any]) -> dict[str, Any]:
    counts: dict[str, Any] = {
        "ok": 0,
        "errors": 0,
        "empty": 0,
        "leased": 0,
        "settled": 0,
        "stuck": 0,
        "requests": 0,
        "timed_requests": 0,
    }
    begin = time.perf_counter()
    stop = [begin + spec["warmup"] + spec["seconds"], begin + spec["warmup"]]

    async def guarded(loop: Any) -> None:
        # A connection that fails (reset, closed, garbled) is counted and replaced by a new one
        # until the row ends: one reset never ends a node's or a client's part of the row.
        with trio.move_on_after(stop[0] - time.perf_counter() + STRAGGLER_TIMEOUT) as scope:
            while time.perf_counter() < stop[0]:
                try:
                    await loop(counts, stop)
                except CONNECTION_FAILURES as e:
                    counts["errors"] += 1
                    _note(counts, f"{type(e).__name__}: {e}"[:120])
                    await trio.sleep(RECONNECT_PAUSE)
        if scope.cancelled_caught:
            counts["stuck"] += 1

    async with trio.open_nursery() as nursery:
        for loop in loops:
            nursery.start_soon(guarded, loop)
    elapsed = time.perf_counter() - stop[1]
    return {**counts, "seconds": elapsed, "rate": counts["ok"] / elapsed}


async def _one_poll(spec: dict[str, Any], key: str, polls: list[dict[str, Any]]) -> None:
    """One connection's poll; with ``repoll_s`` it polls again on the same connection after
    each ``{"job": null}`` for that long (a node waiting for work does so), until a copy."""
    hold = spec["wait_ms"] / 1000
    repoll_s = spec.get("repoll_s", 0.0)
    outcome: dict[str, Any] = {"status": 0, "job_null": False}
    sends: list[float] = []
    with trio.move_on_after(CONNECT_TIMEOUT + repoll_s + hold + spec["late_s"]) as scope:
        try:
            conn = await _connect(spec)
            until = time.perf_counter() + repoll_s
            async with conn.stream:
                while True:
                    sent = time.perf_counter()
                    sends.append(sent)
                    body = {**LEASE_BODY, "wait_ms": spec["wait_ms"]}
                    status, raw = await conn.post("/v1/compute/jobs/lease", body, key)
                    answered = time.perf_counter()
                    job = json.loads(raw).get("job") if status == 200 else None
                    outcome = {
                        "status": status,
                        "job_null": status == 200 and job is None,
                        "job": job is not None,
                        "sent": sent,
                        "answered": answered,
                    }
                    if job is not None or status != 200 or answered >= until:
                        break
        except (*CONNECTION_FAILURES, trio.TooSlowError) as e:
            outcome["error"] = f"{type(e).__name__}: {e}"[:120]
    if scope.cancelled_caught:
        outcome["error"] = "no answer in time"
    outcome["sends"] = sends
    polls.append(outcome)


def _surely_held_at_once(polls: list[dict[str, Any]], hold: float) -> int:
    """The most polls the server certainly held at one instant.

    A poll sent at ``s`` and answered ``{"job": null}`` at ``a`` (after its hold ``h``) was
    taken by the server at some instant in ``[s, a - h]`` and held ``h`` from there, so it was
    held throughout ``[a - h, s + h]`` whatever that instant was; count the most such intervals
    that overlap.
    """
    edges = []
    for p in polls:
        begin, end = p["answered"] - hold, p["sent"] + hold
        if begin <= end:
            edges += [(begin, 0), (end, 1)]  # at a tie an interval opens before one closes
    best = current = 0
    for _, closing in sorted(edges):
        current += -1 if closing else 1
        best = max(best, current)
    return best


async def _polls(spec: dict[str, Any]) -> dict[str, Any]:
    polls: list[dict[str, Any]] = []
    keys = spec["keys"]
    begin = time.perf_counter()
    cpu = time.process_time()
    async with trio.open_nursery() as nursery:
        for i in range(spec["count"]):
            nursery.start_soon(_one_poll, spec, keys[i % len(keys)], polls)
    hold = spec["wait_ms"] / 1000
    errors: dict[str, int] = {}
    for p in polls:
        if "error" in p:
            errors[p["error"]] = errors.get(p["error"], 0) + 1
        elif not p["job_null"] and not p.get("job"):
            errors[f"status {p['status']}"] = errors.get(f"status {p['status']}", 0) + 1
    null = [p for p in polls if p.get("job_null")]
    waits = [p["answered"] - p["sent"] for p in null]
    return {
        "count": spec["count"],
        "null": len(null),
        "early": sum(w < hold - 0.01 for w in waits),
        "at_once": _surely_held_at_once(null, hold),
        "errors": errors,
        "wait_min": min(waits, default=0.0),
        "wait_max": max(waits, default=0.0),
        "sent_last": max((p["sent"] - begin for p in null), default=0.0),
        "job_answered": sorted(p["answered"] for p in polls if p.get("job")),
        "sends": [sent for p in polls for sent in p["sends"]],
        "cpu": time.process_time() - cpu,
    }


async def _load(spec: dict[str, Any]) -> dict[str, Any]:
    if spec["mode"] == "hello":
        return await _timed(spec, [partial(_hello_loop, spec) for _ in range(spec["connections"])])
    if spec["mode"] in ("cycles", "one-request cycles"):
        return await _timed(spec, [partial(_cycle_loop, spec, key) for key in spec["keys"]])
    return await _polls(spec)


# -- the server process -------------------------------------------------------------------------


async def _register(client: httpx.AsyncClient, count: int) -> list[str]:
    keys = []
    for _ in range(count):
        body = {"key": None, "handle": None, **LEASE_BODY}
        response = await client.post("/v1/compute/register", json=body)
        response.raise_for_status()
        keys.append(str(response.json()["key"]))
    return keys


async def _fill_book(handle: DaemonHandle, jobs: int) -> None:
    """``jobs`` delta-loss steps over four shared stand-in objects, queued 1 ms apart."""
    ctx = handle.ctx
    inputs = []
    for name in DELTA_LOSS.inputs:
        info = await ctx.objects.put_bytes(f"bench stand-in {name}".encode())
        inputs.append({"name": name, "sha256": info.sha256, "size": info.size})
    now_ms = int(ctx.wall.now() * 1000)
    tag = secrets.token_hex(4)

    def fill(conn: sqlite3.Connection) -> list[Event]:
        events: list[Event] = []
        for i in range(jobs):
            _, queued = enqueue_step(
                conn,
                challenge_id=DELTA_LOSS.id,
                subject={"bench": tag, "i": i},
                step="public",
                inputs=inputs,
                now_ms=now_ms - jobs + i,
                wait_ms=STEP_WAIT_MS,
                settings=ctx.compute.settings,
            )
            events += queued
        return events

    await ctx.compute.write(fill)  # hands the new copies to held polls in the same transaction


def _queued(conn: sqlite3.Connection) -> int:
    (count,) = conn.execute("SELECT count(*) FROM compute_copies WHERE state = 'queued'").fetchone()
    return int(count)


def _end_queued(conn: sqlite3.Connection) -> None:
    """Take what is left of the book out (jobs too: the lease query walks queued jobs)."""
    conn.execute("UPDATE compute_copies SET state = 'cancelled' WHERE state = 'queued'")
    conn.execute("UPDATE compute_jobs SET state = 'unscored' WHERE state = 'queued'")


def _notes(result: dict[str, Any]) -> None:
    for what, count in sorted(result.get("notes", {}).items()):
        print(f"    note: {count} x {what}")


def _merge(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One row's counts over its slices; the rate over their measured seconds together."""
    merged: dict[str, Any] = {"notes": {}}
    for r in results:
        for name, value in r.items():
            if name == "notes":
                for what, n in value.items():
                    merged["notes"][what] = merged["notes"].get(what, 0) + n
            elif name != "rate":
                merged[name] = merged.get(name, 0) + value
    merged["rate"] = merged["ok"] / merged["seconds"] if merged.get("seconds") else 0.0
    return merged


async def _measure(cpus: Cpus, spec: dict[str, Any], limit: float) -> dict[str, Any]:
    """A load process (this script, ``--load``) on the load's CPUs running ``spec``."""
    return await run_load(cpus, __file__, spec, limit)


async def _alternate(
    args: argparse.Namespace,
    cpus: Cpus,
    specs: list[dict[str, Any]],
    db: Database,
    between: Callable[[], Awaitable[None]] | None = None,
) -> list[dict[str, Any]]:
    """The rows of ``specs`` measured in ``--slices`` alternating slices of ``--seconds`` in
    all each, so that a change in the machine's load hits every row alike; each slice also
    records the server's CPU time and the database's write and read transactions. ``between``
    (if any) runs after each slice, outside the measured time."""
    seconds = args.seconds / args.slices
    timed = {"warmup": WARMUP, "seconds": seconds}
    limit = WARMUP + seconds + LOAD_TIMEOUT_MARGIN
    slices: list[list[dict[str, Any]]] = [[] for _ in specs]
    profiles: list[cProfile.Profile] = []
    for _ in range(args.slices):
        for spec, done in zip(specs, slices, strict=True):
            cpu, before = time.process_time(), db.statistics()
            profiler = cProfile.Profile(time.process_time) if spec.get("profile") else None
            if profiler is not None:
                profiles.append(profiler)
                profiler.enable()
            result = await _measure(cpus, {**spec, **timed}, limit)
            if profiler is not None:
                profiler.disable()
            after = db.statistics()
            done.append(
                {
                    **result,
                    "cpu": time.process_time() - cpu,
                    "writes": after.writes - before.writes,
                    "reads": after.reads - before.reads,
                }
            )
        if between is not None:
            await between()
    if profiles:
        pstats.Stats(*profiles).dump_stats(f"{args.profile}-result+next.prof")
    return [_merge(done) for done in slices]


def _req_rate(row: dict[str, Any]) -> float:
    """A row's answered requests per second over its measured time (cycles' rate: ``rate``)."""
    return float(row["timed_requests"] / row["seconds"]) if row.get("seconds") else 0.0


def _cpu_us(row: dict[str, Any]) -> float:
    """The server's CPU time per request of a row, in microseconds (warm-up included)."""
    return float(1e6 * row["cpu"] / max(row["requests"], 1))


async def _ramp(args: argparse.Namespace, cpus: Cpus, url: str, keys: list[str]) -> int:
    """The long-poll ramp; returns the largest level that passed (0: none)."""
    best = 0
    for count in args.polls:
        spec = {
            **address(url),
            "mode": "polls",
            "count": count,
            "wait_ms": args.hold_ms,
            "late_s": args.late_s,
            "keys": keys,
        }
        limit = CONNECT_TIMEOUT + args.hold_ms / 1000 + args.late_s + LOAD_TIMEOUT_MARGIN
        begin = time.perf_counter()
        r = await _measure(cpus, spec, limit)
        passed = r["null"] == count and r["early"] == 0 and r["at_once"] == count
        errors = ", ".join(f"{n} x {what}" for what, n in sorted(r["errors"].items())) or "none"
        print(
            f"{'long polls':18s} {count:6d} sent  {r['at_once']:6d} held at once"
            f"  {r['null']} null answers after {r['wait_min']:.2f}-{r['wait_max']:.2f} s"
            f"  (last sent at {r['sent_last']:.2f} s)  early {r['early']}  errors: {errors}"
            f"  [{time.perf_counter() - begin:.1f} s]"
        )
        if not passed:
            break
        best = count
    return best


def _p(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of sorted ``values``."""
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


class _CollectorTime:
    """The CPU time this process's threads spent in the cyclic garbage collector, by generation
    (a ``gc.callbacks`` entry while in use; each thread's own CPU clock, as the machine's other
    work would swell a wall clock)."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.count = [0, 0, 0]
        self._began = 0.0

    def __enter__(self) -> _CollectorTime:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *_: object) -> None:
        gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.thread_time()
        else:
            self.seconds[info["generation"]] += time.thread_time() - self._began
            self.count[info["generation"]] += 1

    def since(self, earlier: tuple[list[int], list[float]]) -> str:
        return self.between(earlier, self.mark())

    @staticmethod
    def between(
        earlier: tuple[list[int], list[float]], later: tuple[list[int], list[float]]
    ) -> str:
        (counts, seconds), (now_counts, now_seconds) = earlier, later
        return ", ".join(
            f"gen{g} {now_counts[g] - counts[g]} x {1e3 * (now_seconds[g] - seconds[g]):.0f} ms"
            for g in range(3)
        )

    def mark(self) -> tuple[list[int], list[float]]:
        return list(self.count), list(self.seconds)


class _Profile:
    """``--profile PREFIX``: the server's profile, one file a phase: with ``--py-spy BIN``
    py-spy samples (``PREFIX-<phase>.txt``, collapsed stacks, idle excluded), else cProfile of
    the Trio thread on its CPU clock (``PREFIX-<phase>.prof``); without a prefix, nothing."""

    def __init__(self, prefix: str | None, py_spy: str | None, cpus: Cpus) -> None:
        self.prefix = prefix
        self.py_spy = py_spy
        self.cpus = cpus
        self.current: cProfile.Profile | subprocess.Popen[bytes] | None = None
        self.name = ""

    def phase(self, name: str | None) -> None:
        """End the current phase (its file written) and start ``name`` (None: none)."""
        if isinstance(self.current, cProfile.Profile):
            self.current.disable()
            self.current.dump_stats(f"{self.prefix}-{self.name}.prof")
        elif self.current is not None:
            self.current.send_signal(signal.SIGINT)
            self.current.wait(SETUP_TIMEOUT)
        self.current = None
        if name is None or self.prefix is None:
            return
        self.name = name
        if self.py_spy is None:
            self.current = cProfile.Profile(time.thread_time)
            self.current.enable()
            return
        out = f"{self.prefix}-{name}.txt"
        command = [self.py_spy, "record", "--pid", str(os.getpid()), "--rate", "100"]
        self.current = subprocess.Popen(
            [*command, "--format", "raw", "--output", out],
            stdout=subprocess.DEVNULL,
            preexec_fn=self.cpus.off_server,  # not on the server's CPU
        )
        time.sleep(PY_SPY_ATTACH_S)


async def _burst(
    args: argparse.Namespace, cpus: Cpus, handle: DaemonHandle, keys: list[str]
) -> None:
    """Issue 17 goal 4: N polls held (``wait_ms`` :data:`BURST_HOLD_MS`), then N copies (N/2
    steps) queued in one transaction; from that instant to each poll's answer with a copy.
    perf_counter is CLOCK_MONOTONIC here: one clock for both processes."""
    profile = _Profile(args.profile, args.py_spy, cpus)
    for count in args.burst:
        spec = {
            **address(handle.url),
            "mode": "polls",
            "count": count,
            "wait_ms": BURST_HOLD_MS,
            "late_s": args.late_s,
            "keys": keys,
            "repoll_s": BURST_HELD_TIMEOUT + BURST_HOLD_MS / 1000,
        }
        limit = (
            CONNECT_TIMEOUT
            + spec["repoll_s"]
            + BURST_HOLD_MS / 1000
            + args.late_s
            + LOAD_TIMEOUT_MARGIN
        )
        enqueued: list[float] = []
        held: list[int] = []
        cpu: list[tuple[float, float]] = []  # (perf_counter, this process's CPU time) samples
        collected: list[tuple[list[int], list[float]]] = []

        async def enqueue_later(
            count: int = count,
            enqueued: list[float] = enqueued,
            held: list[int] = held,
            cpu: list[tuple[float, float]] = cpu,
            collected: list[tuple[list[int], list[float]]] = collected,
        ) -> None:
            collected.append(collector.mark())
            cpu.append((time.perf_counter(), time.process_time()))
            profile.phase(f"{count}-intake")
            with trio.move_on_after(BURST_HELD_TIMEOUT):  # (nearly) every poll held
                while handle.ctx.compute.waiter.waiting(WORK) < count - count // 100:  # noqa: ASYNC110
                    await trio.sleep(0.05)  # a bench's look at a count, not an event to wait on
            held.append(handle.ctx.compute.waiter.waiting(WORK))
            collected.append(collector.mark())
            enqueued.append(time.perf_counter())
            cpu.append((enqueued[0], time.process_time()))
            profile.phase(f"{count}-answer")
            await _fill_book(handle, count // 2)
            while True:  # the server's CPU time as the answers go out, until the row ends
                cpu.append((time.perf_counter(), time.process_time()))
                await trio.sleep(CPU_SAMPLE_S)

        with _CollectorTime() as collector:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(enqueue_later)
                r = await _measure(cpus, spec, limit)
                profile.phase(None)
                nursery.cancel_scope.cancel()
        waits = [t - enqueued[0] for t in r["job_answered"]]
        errors = ", ".join(f"{n} x {what}" for what, n in sorted(r["errors"].items())) or "none"
        line = (
            f"{'burst':18s} {count:6d} polls ({held[0]} held"
            f" {enqueued[0] - cpu[0][0]:.1f} s after the first was sent), {count} copies:"
            f" {len(waits)} answered a copy"
        )
        if waits:
            line += (
                f", enqueue -> answer p50 {_p(waits, 0.5):.3f} s p99 {_p(waits, 0.99):.3f} s"
                f" max {waits[-1]:.3f} s"
            )
        print(f"{line}; errors: {errors}")
        intake = max(sum(sent < enqueued[0] for sent in r["sends"]), 1)
        print(
            f"{'':18s} server CPU {1e6 * (cpu[1][1] - cpu[0][1]) / intake:.0f} us per poll"
            f" taken in ({intake} polls sent before the enqueue, repolls included; collector"
            f" {collector.between(collected[0], collected[1])})"
        )
        if waits:
            last = r["job_answered"][math.ceil(0.99 * len(waits)) - 1]
            answered = max((c for t, c in cpu if t <= last), default=cpu[1][1])
            print(
                f"{'':18s} server CPU {1e6 * (answered - cpu[1][1]) / (0.99 * len(waits)):.0f} us"
                f" per copy answered (from the enqueue to the p99 answer: queuing, hand-out and"
                f" answers; collector since the enqueue {collector.since(collected[1])});"
                f" load generator CPU {1e6 * r['cpu'] / max(len(r['sends']), 1):.0f} us per poll"
                f" sent ({len(r['sends'])} sent)"
            )
        await handle.ctx.db.write(_end_queued)


async def _rates(
    args: argparse.Namespace, cpus: Cpus, handle: DaemonHandle, hello_url: str, keys: list[str]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The ``hello POST``, ``lease -> result`` and ``result+next`` rows, printed; returns them."""
    hello_spec = {**address(hello_url), "mode": "hello", "connections": args.nodes}
    cycles_spec = {**address(handle.url), "mode": "cycles", "keys": keys}
    one_spec = {**cycles_spec, "mode": "one-request cycles", "next": True}
    one_spec["profile"] = args.profile is not None
    specs = [hello_spec, cycles_spec, one_spec]
    top_up = partial(_top_up, handle, args.jobs)
    hello, two, one = await _alternate(args, cpus, specs, handle.ctx.db, top_up)
    print(
        f"{'hello POST':22s} {hello['rate']:9.0f} req/s"
        f"  ({hello['ok']} ok, {hello['errors']} errors, {hello['stuck']} stuck;"
        f" server CPU {_cpu_us(hello):.0f} us/request)"
    )
    _notes(hello)
    for name, row in (("lease -> result", two), ("result+next", one)):
        per = max(row["requests"], 1)
        print(
            f"{name:22s} {row['rate']:9.0f} cycles/s = {_req_rate(row):.0f} req/s"
            f" ({row['timed_requests'] / max(row['ok'], 1):.2f} requests a cycle;"
            f" {row['ok']} ok, {row['settled']} steps settled, {row['errors']} errors,"
            f" {row['stuck']} stuck, {row['leased']} plain leases with a copy,"
            f" {row['empty']} empty; server CPU {_cpu_us(row):.0f} us/request;"
            f" {row['writes'] / per:.2f} write and {row['reads'] / per:.2f} read"
            f" transactions a request)"
        )
        _notes(row)
    left = await handle.ctx.db.read(_queued)
    print(f"    {left} copies still queued")
    if two["empty"] or one["empty"] or left == 0:
        print("    note: the book ran dry during a slice; raise --jobs")
    return hello, two, one


async def _top_up(handle: DaemonHandle, steps: int) -> None:
    """Queue steps until ``steps`` are queued (between slices: the book keeps its depth)."""
    queued, _, _ = await handle.ctx.db.read(_book_size)
    if queued < steps:
        await _fill_book(handle, steps - queued)


def _book_size(conn: sqlite3.Connection) -> tuple[int, int, int]:
    """Queued steps, settled steps and answered copies in the book."""
    (queued,) = conn.execute("SELECT count(*) FROM compute_jobs WHERE state = 'queued'").fetchone()
    (settled,) = conn.execute(
        "SELECT count(*) FROM compute_jobs WHERE state = 'settled'"
    ).fetchone()
    (answered,) = conn.execute(
        "SELECT count(*) FROM compute_copies WHERE state = 'answered'"
    ).fetchone()
    return int(queued), int(settled), int(answered)


async def _depths(
    args: argparse.Namespace, cpus: Cpus, handle: DaemonHandle, hello_url: str, keys: list[str]
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Issue 17 goal 1 over HTTP: the ``hello POST`` and ``lease -> result`` rows at each
    ``--depths`` N, printed; returns them. Before N's rows the book is brought to N queued steps
    and a history of at least N settled steps (``book.settle_history``: 2N answered copies),
    then checkpointed; between slices the queue is topped back up to N steps."""
    db = handle.ctx.db
    now = int(handle.ctx.wall.now() * 1000)
    a, b = await db.write(history_nodes, now)
    specs = [
        {**address(hello_url), "mode": "hello", "connections": args.nodes},
        {**address(handle.url), "mode": "cycles", "keys": keys},
    ]
    settled, rows = 0, []
    for depth in args.depths:
        started = time.perf_counter()
        await db.write(_end_queued)  # history first: each of its steps the head of the queue
        await settle_history(db, a, b, f"history-{depth}", max(depth - settled, 0), now)
        settled = max(settled, depth)
        await _fill_book(handle, depth)
        await db.checkpoint()  # as the daemon's checkpointer does, every few seconds
        filled = time.perf_counter() - started
        queued, steps, copies = await db.read(_book_size)

        hello, two = await _alternate(args, cpus, specs, db, partial(_top_up, handle, depth))
        print(
            f"{'depth':6s} {queued:7,d} queued steps, {steps:7,d} settled ({copies:7,d} answered"
            f" copies; filled in {filled:.0f} s): hello POST {hello['rate']:5.0f} req/s"
            f" ({_cpu_us(hello):.0f} us CPU/request), lease -> result {two['rate']:4.0f}"
            f" cycles/s ({_cpu_us(two):.0f} us CPU/request; {two['ok']} ok, {two['errors']}"
            f" errors, {two['stuck']} stuck, {two['empty']} empty)"
        )
        _notes(two)
        if two["empty"]:
            print("    note: the queue ran dry in a slice (an empty lease waits 1 s): more slices")
        rows.append((hello, two))
    await db.write(_end_queued)
    return rows


def _depth_summary(depths: list[int], rows: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """Each depth's lease -> result figures next to the first depth's (goal 1: at least 0.8)."""
    (hello0, two0) = rows[0]
    for depth, (hello, two) in zip(depths, rows, strict=True):
        print(
            f"lease -> result at {depth:7,d} queued steps: {two['rate']:5.0f} cycles/s;"
            f" vs {depths[0]:,}: cycles {two['rate'] / max(two0['rate'], 1e-9):.2f}, cycles per"
            f" hello POST {two['rate'] / hello['rate'] / (two0['rate'] / hello0['rate']):.2f},"
            f" server CPU per request {_cpu_us(two0) / _cpu_us(two):.2f} (goal: at least 0.80)"
        )


def _summary(hello: dict[str, Any], two: dict[str, Any], one: dict[str, Any]) -> None:
    print(f"hello POST (bare hypercorn)     {hello['rate']:9.0f} req/s")
    print(f"lease -> result (two requests)  {two['rate']:9.0f} cycles/s")
    print(f"result+next (one request)       {one['rate']:9.0f} cycles/s")
    if hello["rate"] > 0:
        for name, row in (("lease -> result", two), ("result+next", one)):
            print(
                f"ratio {name} / hello POST: cycles {row['rate'] / hello['rate']:.3f},"
                f" requests {_req_rate(row) / hello['rate']:.3f};"
                f" server CPU per request, hello / {name}:"
                f" {_cpu_us(hello) / _cpu_us(row):.3f} (the same ratio where the server,"
                f" not the machine's other work, is the limit)"
            )


async def serve_and_measure(cpus: Cpus, args: argparse.Namespace) -> None:
    async with open_servers("ht-bench-compute-", compute_wait_ms=STEP_WAIT_MS) as servers:
        handle, hello_url = servers.daemon, servers.hello_url
        with trio.fail_after(SETUP_TIMEOUT):
            async with httpx.AsyncClient(base_url=handle.url, timeout=10) as client:
                keys = await _register(client, args.nodes)
                poll_keys = await _register(client, args.poll_keys)
            await _fill_book(handle, args.jobs)
        tune_collector_for_serving()  # as hypertrain-daemon does once it is up
        print(
            f"{cpus.describe()}; {args.nodes} nodes, {args.seconds:g} s per row,"
            f" {args.jobs} steps in the book; rows: {','.join(args.rows)}"
        )
        rates = None
        if "rates" in args.rows:
            rates = await _rates(args, cpus, handle, hello_url, keys)
        # Long polls only wait when nothing is queued: take the rest of the book out.
        await handle.ctx.db.write(_end_queued)
        depths = None
        if "depth" in args.rows:
            depths = await _depths(args, cpus, handle, hello_url, keys)
        best = None
        if "polls" in args.rows:
            print(
                f"long polls: wait_ms {args.hold_ms}, nothing queued, {args.poll_keys} node"
                f" keys shared round robin; a level passes when every poll is answered"
                f" {{'job': null}}, none before its hold, and all were surely held at one"
                f" instant"
            )
            best = await _ramp(args, cpus, handle.url, poll_keys)
        if "burst" in args.rows and args.burst:
            await _burst(args, cpus, handle, poll_keys)
        print()
        if rates is not None:
            _summary(*rates)
        if depths is not None:
            _depth_summary(args.depths, depths)
        if best is not None:
            top = ">=" if best == max(args.polls) else "  "
            print(
                f"concurrent long polls held    {top}{best:9d} (wait_ms {args.hold_ms};"
                f" levels {','.join(map(str, args.polls))})"
            )


ROWS: Final = ("rates", "depth", "polls", "burst")
"""The bench's rows, in the order they run (``--rows``)."""
DEFAULT_ROWS: Final = ("rates", "polls", "burst")
"""The rows of a run without ``--rows`` (``depth`` fills a book of 100,000 steps: minutes)."""


def _rows(text: str) -> list[str]:
    rows = [part.strip() for part in text.split(",") if part.strip()]
    if not rows or not set(rows) <= set(ROWS):
        raise argparse.ArgumentTypeError(f"a comma-separated subset of {','.join(ROWS)}")
    return rows


def _levels(text: str) -> list[int]:
    """A comma-separated list of positive counts; empty (``""``): the rows are skipped."""
    levels = [int(part) for part in text.split(",") if part.strip()]
    if levels and min(levels) < 1:
        raise argparse.ArgumentTypeError("a comma-separated list of positive counts")
    return levels


def main() -> None:
    if "--load" in sys.argv[1:]:
        load_main(_load)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="measured time per row")
    parser.add_argument(
        "--slices", type=int, default=4, help="alternating slices the rows' time is cut in"
    )
    parser.add_argument("--nodes", type=int, default=32, help="concurrent nodes (connections)")
    parser.add_argument("--jobs", type=int, default=1000, help="steps in the book (2 copies each)")
    parser.add_argument("--hold-ms", type=int, default=5000, help="wait_ms of each long poll")
    parser.add_argument(
        "--polls", type=_levels, default=[500, 1000, 2000, 4000], help="long-poll levels"
    )
    parser.add_argument("--poll-keys", type=int, default=50, help="node keys the polls share")
    parser.add_argument(
        "--burst",
        type=_levels,
        default=[1000],
        help="burst levels: N polls held, then N copies",
    )
    parser.add_argument(
        "--rows",
        type=_rows,
        default=list(DEFAULT_ROWS),
        help="rows to run: rates (hello POST and lease -> result), depth (lease -> result at"
        " each --depths), polls (the ramp), burst; default rates,polls,burst",
    )
    parser.add_argument(
        "--profile",
        metavar="PREFIX",
        help="profile the server: the result+next row (cProfile, PREFIX-result+next.prof) and"
        " the burst row, one file a phase (PREFIX-<polls>-intake, PREFIX-<polls>-answer);"
        " a profiler slows the server down: not for the figures",
    )
    parser.add_argument(
        "--py-spy",
        metavar="BIN",
        help="with --profile: sample with this py-spy binary instead of cProfile",
    )
    parser.add_argument(
        "--depths",
        type=_levels,
        default=[1000, 100_000],
        help="depth row: queued steps (and settled steps) of the book at each level",
    )
    parser.add_argument(
        "--late-s", type=float, default=10.0, help="seconds a poll may take beyond connect + hold"
    )
    args = parser.parse_args()
    cpus = pin_server()
    raise_fd_limit()
    trio.run(serve_and_measure, cpus, args)


if __name__ == "__main__":
    main()
