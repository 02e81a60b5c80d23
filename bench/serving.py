"""HTTP throughput of the daemon's app next to a bare hypercorn-trio "hello" app, in one run.

The server side is one process (this one, pinned to its lowest CPU where the machine has more
than one; ``_load.pin_server``): the real daemon (``serve_daemon``: the coordinator app on
``serve_asgi``, with its local-chain beacon pusher) and a raw ASGI app answering
``{"hello": "world"}`` on ``serve_asgi`` too (same hypercorn trio worker, same backlog; both
``_daemon.open_servers``). Load comes from a separate process (this script with ``--load``, on
the other CPUs; ``_load.run_load``, which checks where it ran): a raw-socket HTTP/1.1
keep-alive client with ``--connections`` connections, each sending its next request when the
last answer arrived. The first line says which CPUs each side got.
Every scenario runs a short warm-up, then ``--seconds`` seconds; non-2xx answers are counted as
errors. The whole run stays well under 60 s with the defaults.

Scenarios (add one with one line in :data:`SCENARIOS`):

- ``hello GET`` / ``hello POST``: the floor of the stack;
- ``GET /v1/beacon/latest``: one read transaction and a JSON answer;
- ``GET /v1/runs/{id}/rounds/0``: the miners' hot poll, on a created, unpaused run;
- ``POST /v1/admin/beacon``: admin auth (token file stat), 1 KiB-bounded body read, strict
  JSON parse, BLS verification and an idempotent write transaction (re-posting a stored round).

    .venv/bin/python bench/serving.py [--seconds 4] [--connections 64]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Final

import attrs
import httpx
import trio
from _daemon import Servers, create_run, open_servers
from _load import Cpus, address, load_main, pin_server, run_load

WARMUP: Final = 0.5
LOAD_TIMEOUT_MARGIN: Final = 20.0  # seconds beyond warm-up + measurement a load may take
STRAGGLER_TIMEOUT: Final = 5.0  # seconds an answer may take after the measurement ended


@attrs.frozen
class Scenario:
    """One measured row: a request sent over and over; ``server`` is "daemon" or "hello"."""

    name: str
    server: str
    method: str
    path: str
    body: bytes = b""
    admin: bool = False


# {run}, {round_json} are filled in once the daemon is set up.
SCENARIOS: tuple[Scenario, ...] = (
    Scenario("hello GET", "hello", "GET", "/"),
    Scenario("GET /v1/beacon/latest", "daemon", "GET", "/v1/beacon/latest"),
    Scenario("GET /v1/runs/{id}/rounds/0", "daemon", "GET", "/v1/runs/{run}/rounds/0"),
    Scenario("hello POST", "hello", "POST", "/", b"{round_json}"),
    Scenario("POST /v1/admin/beacon", "daemon", "POST", "/v1/admin/beacon", b"{round_json}", True),
)
RATIOS = (
    ("GET /v1/beacon/latest", "hello GET"),
    ("GET /v1/runs/{id}/rounds/0", "hello GET"),
    ("POST /v1/admin/beacon", "hello POST"),
)


# -- the load generator (a separate process) ---------------------------------------------------


def _request_bytes(spec: dict[str, Any]) -> bytes:
    body: bytes = spec["body"].encode()
    lines = [f"{spec['method']} {spec['path']} HTTP/1.1", f"host: {spec['host']}"]
    lines += [f"{k}: {v}" for k, v in spec["headers"].items()]
    if spec["method"] != "GET":
        lines += ["content-type: application/json", f"content-length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def _connection(spec: dict[str, Any], counts: dict[str, int], stop: list[float]) -> None:
    request = _request_bytes(spec)
    stream = await trio.open_tcp_stream(spec["host"], spec["port"])
    with trio.move_on_after(stop[0] - time.perf_counter() + STRAGGLER_TIMEOUT) as scope:
        await _exchange(stream, request, counts, stop)
    if scope.cancelled_caught:
        counts["stuck"] += 1


async def _receive(stream: trio.SocketStream) -> bytes:
    data = await stream.receive_some(65536)
    if not data:
        raise ConnectionError("the server closed the connection")
    return data


async def _exchange(
    stream: trio.SocketStream, request: bytes, counts: dict[str, int], stop: list[float]
) -> None:
    buffer = b""
    async with stream:
        while time.perf_counter() < stop[0]:
            await stream.send_all(request)
            while (end := buffer.find(b"\r\n\r\n")) < 0:
                buffer += await _receive(stream)
            head, buffer = buffer[:end], buffer[end + 4 :]
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(buffer) < length:
                buffer += await _receive(stream)
            buffer = buffer[length:]
            counts["requests"] += 1
            if time.perf_counter() >= stop[1]:
                counts["ok" if 200 <= status < 300 else "errors"] += 1


async def _load(spec: dict[str, Any]) -> dict[str, Any]:
    counts = {"ok": 0, "errors": 0, "stuck": 0, "requests": 0}
    begin, cpu = time.perf_counter(), time.process_time()
    stop = [begin + spec["warmup"] + spec["seconds"], begin + spec["warmup"]]
    async with trio.open_nursery() as nursery:
        for _ in range(spec["connections"]):
            nursery.start_soon(_connection, spec, counts, stop)
    elapsed = time.perf_counter() - stop[1]
    cpu = time.process_time() - cpu
    return {**counts, "seconds": elapsed, "rate": counts["ok"] / elapsed, "cpu": cpu}


# -- the server process -------------------------------------------------------------------------


def get_spec(url: str, path: str, connections: int, seconds: float) -> dict[str, Any]:
    """The load spec of a row sending ``GET path`` to the server at ``url``."""
    return {
        **address(url),
        "method": "GET",
        "path": path,
        "body": "",
        "headers": {},
        "connections": connections,
        "seconds": seconds,
        "warmup": WARMUP,
    }


async def measure(cpus: Cpus, spec: dict[str, Any]) -> dict[str, Any]:
    """One row: a load process (this script, ``--load``) sending ``spec``'s request. Its
    answer: ``ok``, ``errors`` and ``stuck`` counted after the warm-up, ``rate`` (ok/s),
    ``requests`` (answered, warm-up included), and ``cpu`` and ``server_cpu``, the load's and
    this (server) process's CPU seconds over the whole row."""
    limit = WARMUP + spec["seconds"] + LOAD_TIMEOUT_MARGIN
    server_cpu = time.process_time()
    answer = await run_load(cpus, __file__, spec, limit)
    return {**answer, "server_cpu": time.process_time() - server_cpu}


def cpu_us(result: dict[str, Any], side: str = "server_cpu") -> float:
    """A row's CPU microseconds per answered request, the server's (or the load's: ``cpu``)."""
    return float(1e6 * result[side] / max(result["requests"], 1))


async def _row(
    cpus: Cpus, servers: Servers, scenario: Scenario, fill: dict[str, str], args: argparse.Namespace
) -> float:
    """One scenario measured and printed; its rate."""
    url = servers.daemon.url if scenario.server == "daemon" else servers.hello_url
    path, body = scenario.path, scenario.body.decode()
    for key, value in fill.items():
        path, body = path.replace(key, value), body.replace(key, value)
    spec = {**get_spec(url, path, args.connections, args.seconds), "body": body}
    spec["method"] = scenario.method
    if scenario.admin:
        spec["headers"] = {"authorization": f"Bearer {servers.admin_token}"}
    result = await measure(cpus, spec)
    print(
        f"{scenario.name:32s} {result['rate']:9.0f} req/s  server CPU {cpu_us(result):5.0f} us,"
        f" load CPU {cpu_us(result, 'cpu'):4.0f} us a request"
        f"  ({result['ok']} ok, {result['errors']} errors, {result['stuck']} stuck)"
    )
    return float(result["rate"])


async def serve_and_measure(cpus: Cpus, args: argparse.Namespace) -> None:
    async with open_servers("ht-bench-http-") as servers:
        async with httpx.AsyncClient(base_url=servers.daemon.url) as client:
            latest = (await client.get("/v1/beacon/latest")).json()
        run_id = await create_run(servers)
        fill = {"{run}": run_id or "", "{round_json}": json.dumps(latest)}
        rates: dict[str, float] = {}
        print(f"{args.connections} connections, {args.seconds:g} s per row; {cpus.describe()}")
        for scenario in SCENARIOS:
            if "{run}" in scenario.path and run_id is None:
                print(f"{scenario.name:32s}  skipped (no run)")
                continue
            rates[scenario.name] = await _row(cpus, servers, scenario, fill, args)
        for top, bottom in RATIOS:
            if top in rates and bottom in rates:
                print(f"ratio {top} / {bottom}: {rates[top] / rates[bottom]:.2f}x")


def main() -> None:
    if "--load" in sys.argv[1:]:
        load_main(_load)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="measured time per row")
    parser.add_argument("--connections", type=int, default=64, help="concurrent connections")
    args = parser.parse_args()
    trio.run(serve_and_measure, pin_server(), args)


if __name__ == "__main__":
    main()
