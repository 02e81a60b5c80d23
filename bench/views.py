"""The run view and the round view at 10,000 rounds and 256 miners, next to the hello GET
rate, in one run (issue 17 goal 6: each paged view at least 0.75x hello GET).

The daemon, the hello app and the load process are those of ``bench/serving.py`` (one server
process pinned to CPU 0, a raw-socket keep-alive load process with ``--connections``
connections). The run is created as there; then its store is grown directly: round 0's row is
copied into rounds 1 .. ``--rounds`` - 1, and the newest round gets ``--miners`` miners, each
committed (a sealed Commit and a K_coord Receipt) and uploaded (a sealed DeltaManifest), the
per-miner envelopes the round view carries with ``full=1``.

Rows (each one request sent over and over):

- ``hello GET``: the floor of the stack;
- ``run view, default page``: ``GET /v1/runs/{id}`` (the newest 256 rounds);
- ``run view, limit=1024 full=1``: the largest page a client may ask for;
- ``round view, default page``: ``GET /v1/runs/{id}/rounds/{newest}`` (256 miners, no envelopes);
- ``round view, full=1``: the same page with the miners' envelopes.

"Before" is the same script on the tree before pages: the daemon there ignores the query, so
the rows answer the whole unpaged views (every round; every miner with its envelopes).

    .venv/bin/python bench/views.py [--seconds 4] [--connections 64] [--rounds 10000]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sqlite3
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import trio
from _hello import hello_app
from serving import SETUP_TIMEOUT, WARMUP, _create_run, _daemon_settings, _measure

from hypertrain.daemon.main import DaemonHandle, serve_daemon
from hypertrain.protocol.envelope import NEVER, seal
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.messages import Chunk, Commit, DeltaManifest, Receipt
from nurseries import SystemClock, serve_asgi

GROW_TIMEOUT = 300.0  # seconds the store may take to grow to --rounds rounds


def _hex(label: str, i: int) -> str:
    return hashlib.sha256(f"{label}{i}".encode()).hexdigest()


def _miner_rows(run_id: str, w: int, miners: int) -> list[tuple[Any, ...]]:
    """``miners`` committed and uploaded miner rows of round ``w`` (sealed envelopes)."""
    coord = Keypair.from_seed(bytes(range(32)))
    rows = []
    for i in range(miners):
        key = Keypair.from_seed(i.to_bytes(2, "big") * 16)
        delta = _hex("delta", i)
        commit = Commit(
            w, key.ss58, "ht-leaf-v1", 7, _hex("leaves", i), _hex("metrics", i),
            _hex("theta", i), _hex("ef_in", i), _hex("ef_out", i), delta, 4_000_000, 61_440,
        )  # fmt: skip
        commit_env = seal(key, "Commit", run_id, commit, NEVER)
        receipt = Receipt(w, _hex("commit", i), 5)
        manifest = DeltaManifest(
            w, key.ss58, delta, f"objects/{delta}", 4_000_000, "ht-sparse-v1",
            (Chunk(0, 4_000_000, delta),),
        )  # fmt: skip
        rows.append((
            run_id, w, key.ss58, i, "UPLOADED", commit_env.encode().decode(),
            seal(coord, "Receipt", run_id, receipt, NEVER).encode().decode(), 5,
            seal(key, "DeltaManifest", run_id, manifest, NEVER).encode().decode(), delta,
        ))  # fmt: skip
    return rows


def _grow(run_id: str, rounds: int, miners: int) -> Any:
    """A write transaction: rounds 1 .. rounds - 1 (copies of round 0), the newest one with
    ``miners`` uploaded miners."""
    newest = rounds - 1
    miner_rows = _miner_rows(run_id, newest, miners)

    def grow(conn: sqlite3.Connection) -> None:
        conn.executemany(
            "INSERT INTO rounds SELECT run_id, ?, round_open, d_open, d_assign, d_commit,"
            " d_audit, d_upload, d_final, base, reasons, opened_round, published_state"
            " FROM rounds WHERE run_id = ? AND w = 0",
            [(w, run_id) for w in range(1, rounds)],
        )
        conn.executemany(
            "INSERT INTO miners (run_id, w, hotkey, slot, status, commit_envelope, receipt,"
            " received_round, delta_manifest, delta_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            miner_rows,
        )

    return grow


async def serve_and_measure(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="ht-bench-views-") as tmp:
        settings, token = _daemon_settings(Path(tmp))
        async with trio.open_nursery() as nursery:
            with trio.fail_after(SETUP_TIMEOUT):
                handle: DaemonHandle = await nursery.start(
                    partial(serve_daemon, settings, wall=SystemClock())
                )
                hello_url: str = await nursery.start(partial(serve_asgi, hello_app, "127.0.0.1", 0))
                async with httpx.AsyncClient(base_url=handle.url) as client:
                    run_id = await _create_run(client, token)
            if run_id is None:
                raise SystemExit("could not create the run")
            started = time.perf_counter()
            with trio.fail_after(GROW_TIMEOUT):
                await handle.ctx.db.write(_grow(run_id, args.rounds, args.miners))
            grown = time.perf_counter() - started
            newest = args.rounds - 1
            rows = [
                ("hello GET", hello_url, "/"),
                ("run view, default page", handle.url, f"/v1/runs/{run_id}"),
                ("run view, limit=1024 full=1", handle.url, f"/v1/runs/{run_id}?limit=1024&full=1"),
                ("round view, default page", handle.url, f"/v1/runs/{run_id}/rounds/{newest}"),
                ("round view, full=1", handle.url, f"/v1/runs/{run_id}/rounds/{newest}?full=1"),
            ]
            print(
                f"{args.rounds:,} rounds, {args.miners} miners in round {newest} (store grown in"
                f" {grown:.1f} s); {args.connections} connections, {args.seconds:g} s per row,"
                " server pinned to CPU 0"
            )
            rates: dict[str, float] = {}
            async with httpx.AsyncClient() as client:
                for name, url, path in rows:
                    size = len((await client.get(url + path, timeout=60)).content)
                    host, port = url.removeprefix("http://").rsplit(":", 1)
                    spec = {
                        "host": host, "port": int(port), "method": "GET", "path": path,
                        "body": "", "headers": {}, "connections": args.connections,
                        "seconds": args.seconds, "warmup": WARMUP,
                    }  # fmt: skip
                    result = await _measure(spec, args.seconds)
                    rates[name] = result["rate"]
                    print(
                        f"{name:30s} {result['rate']:8.1f} req/s {size / 1000:9.1f} KB"
                        f"  ({result['ok']} ok, {result['errors']} errors, {result['stuck']} stuck)"
                    )
            for name, _, _ in rows[1:]:
                print(f"ratio {name} / hello GET: {rates[name] / rates['hello GET']:.2f}x")
            handle.request_shutdown()
            nursery.cancel_scope.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="measured time per row")
    parser.add_argument("--connections", type=int, default=64, help="concurrent connections")
    parser.add_argument("--rounds", type=int, default=10_000, help="rounds in the store")
    parser.add_argument("--miners", type=int, default=256, help="miners of the newest round")
    args = parser.parse_args()
    cpus = os.sched_getaffinity(0)
    if len(cpus) > 1:
        os.sched_setaffinity(0, {min(cpus)})
    trio.run(serve_and_measure, args)


if __name__ == "__main__":
    main()
