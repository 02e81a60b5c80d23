"""HTTP throughput of the daemon's app next to a bare hypercorn-trio "hello" app, in one run.

The server side is one process (this one, pinned to CPU 0 where the machine has more than one):
the real daemon (``serve_daemon``: the coordinator app on ``serve_asgi``, with its local-chain
beacon pusher) and a raw ASGI app answering ``{"hello": "world"}`` on ``serve_asgi`` too (same
hypercorn trio worker, same backlog 2048). Load comes from a separate process (this script with
``--load``, pinned to the other CPUs): a raw-socket HTTP/1.1 keep-alive client with
``--connections`` connections, each sending its next request when the last answer arrived.
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
import os
import secrets
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio
from _hello import hello_app

from hypertrain.beacon import ChainInfo
from hypertrain.coordinator.settings import CoordinatorSettings
from hypertrain.daemon.main import DaemonHandle, serve_daemon
from hypertrain.daemon.settings import DaemonSettings
from hypertrain.protocol.envelope import seal
from hypertrain.protocol.example import example_manifest
from hypertrain.protocol.keys import Keypair, write_seed_file
from hypertrain.protocol.manifest import Beacon
from nurseries import SystemClock, serve_asgi

WARMUP = 0.5
LOAD_TIMEOUT_MARGIN = 20.0  # seconds beyond warm-up + measurement a load process may take
SETUP_TIMEOUT = 20.0
STRAGGLER_TIMEOUT = 5.0  # seconds an answer may take after the measurement ended
OWNER = Keypair.from_seed(bytes([7]) * 32)
MINER = Keypair.from_seed(bytes([0x41]) * 32)


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
    body = spec["body"].encode()
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
            if time.perf_counter() >= stop[1]:
                counts["ok" if 200 <= status < 300 else "errors"] += 1


async def _load(spec: dict[str, Any]) -> dict[str, Any]:
    counts = {"ok": 0, "errors": 0, "stuck": 0}
    begin = time.perf_counter()
    stop = [begin + spec["warmup"] + spec["seconds"], begin + spec["warmup"]]
    async with trio.open_nursery() as nursery:
        for _ in range(spec["connections"]):
            nursery.start_soon(_connection, spec, counts, stop)
    elapsed = time.perf_counter() - stop[1]
    return {**counts, "seconds": elapsed, "rate": counts["ok"] / elapsed}


def load_main() -> None:
    """``--load``: read a spec (JSON) from stdin, print the result (JSON) on stdout."""
    cpus = os.sched_getaffinity(0)
    if len(cpus) > 1:
        os.sched_setaffinity(0, cpus - {min(cpus)})
    print(json.dumps(trio.run(_load, json.load(sys.stdin))))


# -- the server process -------------------------------------------------------------------------


def _daemon_settings(state: Path) -> tuple[DaemonSettings, str]:
    secret_dir = state / "secrets"
    secret_dir.mkdir(mode=0o700)
    token = secrets.token_hex(32)
    (secret_dir / "admin").write_text(token)
    (secret_dir / "internal").write_text(secrets.token_hex(32))
    for name in ("admin", "internal"):
        (secret_dir / name).chmod(0o600)
    write_seed_file(secret_dir / "coord.key", bytes(range(32)))
    coordinator = CoordinatorSettings(
        state_dir=state / "data",
        admin_token_file=secret_dir / "admin",
        internal_token_file=secret_dir / "internal",
        coord_key_file=secret_dir / "coord.key",
        owner_hotkey=OWNER.ss58,
    )
    settings = DaemonSettings(coordinator=coordinator, port=0, beacon="local", grace=2.0)
    return settings, token


async def _create_run(client: httpx.AsyncClient, token: str) -> str | None:
    """A created, configured, unpaused run with one miner; None (with a note) on failure."""
    auth = {"Authorization": f"Bearer {token}"}
    info = ChainInfo.from_json((await client.get("/v1/beacon/info")).json())
    beacon = Beacon(
        chain_hash=info.hash, period=info.period_ms // 1000, genesis_time=info.genesis_ms // 1000
    )
    coord = Keypair.from_seed(bytes(range(32))).ss58
    manifest = example_manifest(coord_pubkey=coord, beacon=beacon)
    run_id = manifest.run_id()
    steps: list[tuple[str, str, object]] = [
        ("POST", "/v1/admin/runs", seal(OWNER, "RunManifest", run_id, manifest, 2**40).to_json()),
        ("PUT", f"/v1/admin/runs/{run_id}/config", {"train_rounds": 10, "final_after_upload": 5}),
        ("PUT", f"/v1/admin/runs/{run_id}/roster/{MINER.ss58}", {}),
        ("PUT", f"/v1/admin/runs/{run_id}/paused", {"paused": False}),
    ]
    for method, path, body in steps:
        response = await client.request(method, path, json=body, headers=auth)
        if response.status_code >= 300:
            print(f"note: {method} {path} -> {response.status_code} {response.text[:120]}")
            return None
    return run_id


async def _measure(spec: dict[str, Any], seconds: float) -> dict[str, Any]:
    with trio.fail_after(WARMUP + seconds + LOAD_TIMEOUT_MARGIN):
        result = await trio.run_process(
            [sys.executable, __file__, "--load"],
            stdin=json.dumps(spec).encode(),
            capture_stdout=True,
        )
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer


async def serve_and_measure(seconds: float, connections: int) -> None:
    with tempfile.TemporaryDirectory(prefix="ht-bench-http-") as tmp:
        settings, token = _daemon_settings(Path(tmp))
        async with trio.open_nursery() as nursery:
            with trio.fail_after(SETUP_TIMEOUT):
                handle: DaemonHandle = await nursery.start(
                    partial(serve_daemon, settings, wall=SystemClock())
                )
                hello_url: str = await nursery.start(partial(serve_asgi, hello_app, "127.0.0.1", 0))
                async with httpx.AsyncClient(base_url=handle.url) as client:
                    latest = (await client.get("/v1/beacon/latest")).json()
                    run_id = await _create_run(client, token)
            urls = {"daemon": handle.url, "hello": hello_url}
            fill = {"{run}": run_id or "", "{round_json}": json.dumps(latest)}
            rates: dict[str, float] = {}
            print(f"{connections} connections, {seconds:g} s per row, server pinned to CPU 0")
            for scenario in SCENARIOS:
                if "{run}" in scenario.path and run_id is None:
                    print(f"{scenario.name:32s}  skipped (no run)")
                    continue
                host, port = urls[scenario.server].removeprefix("http://").rsplit(":", 1)
                path, body = scenario.path, scenario.body.decode()
                for key, value in fill.items():
                    path, body = path.replace(key, value), body.replace(key, value)
                spec = {
                    "host": host,
                    "port": int(port),
                    "method": scenario.method,
                    "path": path,
                    "body": body,
                    "headers": {"authorization": f"Bearer {token}"} if scenario.admin else {},
                    "connections": connections,
                    "seconds": seconds,
                    "warmup": WARMUP,
                }
                result = await _measure(spec, seconds)
                rates[scenario.name] = result["rate"]
                print(
                    f"{scenario.name:32s} {result['rate']:9.0f} req/s"
                    f"  ({result['ok']} ok, {result['errors']} errors, {result['stuck']} stuck)"
                )
            for top, bottom in RATIOS:
                if top in rates and bottom in rates:
                    print(f"ratio {top} / {bottom}: {rates[top] / rates[bottom]:.2f}x")
            handle.request_shutdown()
            nursery.cancel_scope.cancel()


def main() -> None:
    if "--load" in sys.argv[1:]:
        load_main()
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="measured time per row")
    parser.add_argument("--connections", type=int, default=64, help="concurrent connections")
    args = parser.parse_args()
    cpus = os.sched_getaffinity(0)
    if len(cpus) > 1:
        os.sched_setaffinity(0, {min(cpus)})
    trio.run(serve_and_measure, args.seconds, args.connections)


if __name__ == "__main__":
    main()
