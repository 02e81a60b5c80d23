"""The run view and the round view at 10,000 rounds and 256 miners, next to the hello GET
rate, in one run (issue 17 goal 6: each paged view at least 0.75x hello GET).

The daemon, the hello app and the load process are those of ``bench/serving.py`` (one server
process pinned to its lowest CPU, a raw-socket keep-alive load process with ``--connections``
connections on the other CPUs; a line says which CPUs each side got). The run is created as
there; then its store is grown directly, as a run of ``--miners`` miners looks after
``--rounds`` rounds: ``--miners`` more miners on the run's roster; every round's RoundOpen
carries a roster of ``--miners`` entries (the newest one sealed for its own ``w``, the others
copies of it); every round but the two newest was drawn for audits (none selected) and is
final and RELEASED (a ``finalizations`` row with one ledger entry per miner, synced to the
ledger; ``published_state`` RELEASED); and the newest round has ``--miners`` miners, each
committed (a sealed Commit and a K_coord Receipt) and uploaded (a sealed DeltaManifest), the
per-miner envelopes the round view carries with ``full=1``. The rows start once the newest
round's view carries its assignment (drawn when the local chain reaches the round's
``d_assign``, a minute or so after the run is created): the state miners poll it in while they
commit and upload, and at 256 miners the assignment is most of the default page (about 530 of
its 554 KB). Before this wait the rows measured the page without it (89 KB), and a run with
longer rows measured one or the other by chance.

Each row also prints the server's and the load's CPU time per request, and the writes and
reads the database committed during the row: each write changes the database's stamp, so the
next request of every cached view renders it again.

Rows (each one request sent over and over):

- ``hello GET``: the floor of the stack, measured first and again last (``hello GET, again``):
  the ratios are against the mean of the two, so a machine busier at one end skews them less;
- ``run view, default page``: ``GET /v1/runs/{id}`` (the newest 256 rounds, the roster's
  counts);
- ``run view, limit=1024 full=1``: the largest page a client may ask for;
- ``roster view, default page``: ``GET /v1/runs/{id}/roster`` (256 roster rows);
- ``round view, default page``: ``GET /v1/runs/{id}/rounds/{newest}`` (256 miners, no envelopes);
  ``..., gzip`` the same with ``accept-encoding: gzip, deflate``, as the miners' httpx clients
  send it (a kept answer of 16 KiB or more goes compressed; every other row asks for
  ``identity``); the size printed is the answer's on the wire;
- ``round view, full=1``: the same page with the miners' envelopes;
- ``..., uncached``: the default pages again from a second app over the same daemon (its
  context, database and routes) whose answer cache keeps nothing, so every request is routed,
  read and rendered: what each poll costs while writes commit faster than polls arrive.

Repeated requests at unchanged data are answered from the daemon's answer cache
(``hypertrain.coordinator.web.answers``); the first request after any commit renders the view
again, and those that arrive during that render wait for it
(``hypertrain.coordinator.web.front``). The ``rendered`` lines print the render alone: the
route's read, render and JSON encoding of each view, in process (no HTTP), as a ceiling rate
next to hello GET's (a round's assignment items are encoded once, by the first render).

"Before" is the same script on the tree before pages: the daemon there ignores the query, so
the rows answer the whole unpaged views (every round; every miner with its envelopes).

    .venv/bin/python bench/views.py [--seconds 4] [--connections 64] [--rounds 10000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sqlite3
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import attrs
import httpx
import trio
from _daemon import COORD, MINER, SETUP_TIMEOUT, Servers, create_run, open_servers
from _load import Cpus, pin_server
from serving import cpu_us, get_spec, measure

from hypertrain.coordinator.flows.compactjson import encode_json
from hypertrain.coordinator.flows.pages import Page
from hypertrain.coordinator.flows.runview import run_view
from hypertrain.coordinator.services.runs import RunsService
from hypertrain.coordinator.tables.rounds import parse_round_open
from hypertrain.coordinator.web.answers import AnswerCache
from hypertrain.coordinator.web.app import AppParts, create_app
from hypertrain.daemon.main import DaemonHandle
from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.envelope import NEVER, seal
from hypertrain.protocol.hashes import roster_hash
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.messages import Chunk, Commit, DeltaManifest, Receipt, RosterEntry
from nurseries import serve_asgi

GROW_TIMEOUT = 300.0  # seconds the store may take to grow to --rounds rounds
ASSIGN_TIMEOUT = 300.0  # seconds the newest round may take to reach its assignment
RENDERS = 20  # renders timed per view


def _hex(label: str, i: int) -> str:
    return hashlib.sha256(f"{label}{i}".encode()).hexdigest()


def _miner_key(i: int) -> Keypair:
    return Keypair.from_seed(i.to_bytes(2, "big") * 16)


def _miner_rows(run_id: str, w: int, miners: int) -> list[tuple[Any, ...]]:
    """``miners`` committed and uploaded miner rows of round ``w`` (sealed envelopes)."""
    rows = []
    for i in range(miners):
        key = _miner_key(i)
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
            seal(COORD, "Receipt", run_id, receipt, NEVER).encode().decode(), 5,
            seal(key, "DeltaManifest", run_id, manifest, NEVER).encode().decode(), delta,
        ))  # fmt: skip
    return rows


def _round_open(run_id: str, template: str, w: int, keys: list[Keypair]) -> str:
    """Round 0's stored RoundOpen ``template`` as round ``w`` with a roster of ``keys``,
    sealed by K_coord (canonical JSON text)."""
    body = parse_round_open(template)
    roster = tuple(RosterEntry(key.ss58, slot, "0000803f") for slot, key in enumerate(keys))
    body = attrs.evolve(
        body,
        w=w,
        roster=roster,
        roster_hash=roster_hash([unstructure(entry) for entry in roster]),
    )
    return seal(COORD, "RoundOpen", run_id, body, NEVER).encode().decode()


def _grow(run_id: str, rounds: int, miners: int) -> Any:
    """A write transaction growing the run to ``rounds`` rounds of ``miners`` miners (module
    doc)."""
    newest = rounds - 1
    keys = [_miner_key(i) for i in range(miners)]
    miner_rows = _miner_rows(run_id, newest, miners)
    entries = json.dumps(
        [
            {"hotkey": key.ss58, "verdict": "MATCH", "tokens": 1_000_000, "soft_score_ppm": 500_000}
            for key in keys
        ]
    )

    def grow(conn: sqlite3.Connection) -> None:
        (template,) = conn.execute(
            "SELECT round_open FROM rounds WHERE run_id = ? AND w = 0", (run_id,)
        ).fetchone()
        conn.execute(
            "UPDATE rounds SET round_open = ? WHERE run_id = ? AND w = 0",
            (_round_open(run_id, template, 0, keys), run_id),
        )
        conn.executemany(
            "INSERT INTO rounds SELECT run_id, ?, round_open, d_open, d_assign, d_commit,"
            " d_audit, d_upload, d_final, base, reasons, opened_round, ?"
            " FROM rounds WHERE run_id = ? AND w = 0",
            [(w, "RELEASED" if w < newest - 1 else None, run_id) for w in range(1, rounds)],
        )
        conn.execute(
            "UPDATE rounds SET round_open = ?, published_state = ? WHERE run_id = ? AND w = ?",
            (_round_open(run_id, template, newest, keys), None, run_id, newest),
        )
        conn.execute(
            "UPDATE rounds SET published_state = 'RELEASED' WHERE run_id = ? AND w = 0",
            (run_id,),
        )
        conn.executemany(
            "INSERT INTO roster SELECT run_id, ?, bond, probation, cluster, region, flags,"
            " admitted_w, removed, blacklisted FROM roster WHERE run_id = ? AND hotkey = ?",
            [(key.ss58, run_id, MINER.ss58) for key in keys if key.ss58 != MINER.ss58],
        )
        conn.executemany(
            "INSERT INTO finalizations (run_id, w, envelope, entries, final_round, at,"
            " ledger_round, vesting_round, released_round, ledger_synced)"
            " VALUES (?, ?, '{}', ?, 1, 0, 0, 1, 1, 1)",
            [(run_id, w, entries) for w in range(newest - 1)],
        )
        conn.executemany(
            "INSERT INTO audit_draws (run_id, w, selected, drawn_round) VALUES (?, ?, '[]', 1)",
            [(run_id, w) for w in range(newest - 1)],
        )
        conn.executemany(
            "INSERT INTO miners (run_id, w, hotkey, slot, status, commit_envelope, receipt,"
            " received_round, delta_manifest, delta_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            miner_rows,
        )

    return grow


async def _renders(handle: DaemonHandle, run_id: str, newest: int, hello: float) -> None:
    """What a request costs when the view must be rendered (the first request after any
    commit): the route's read and render and the JSON encoding, in process, no HTTP."""
    runs = RunsService(handle.ctx)
    db = handle.ctx.db
    views: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("run view, default page", lambda: db.read(run_view, run_id, Page())),
        ("round view, default page", lambda: runs.round_view(run_id, newest, Page())),
        ("round view, full=1", lambda: runs.round_view(run_id, newest, Page(full=True))),
    ]
    for name, render in views:
        encode_json(await render())
        started = time.perf_counter()
        for _ in range(RENDERS):
            encode_json(await render())
        each = (time.perf_counter() - started) / RENDERS
        print(
            f"rendered {name:24s} {each * 1000:7.2f} ms (at most {1 / each:7.1f}/s,"
            f" {1 / each / hello:.2f}x hello GET, before any HTTP)"
        )


def _uncached_app(handle: DaemonHandle) -> Any:
    """The daemon's app again, over its context, with an answer cache that keeps nothing."""
    parts = attrs.evolve(
        AppParts.build(handle.ctx), answers=AnswerCache(handle.ctx.db, max_entries=0)
    )
    return create_app(handle.ctx, parts)


async def _grown(servers: Servers, args: argparse.Namespace) -> str:
    """The run, grown to ``--rounds`` rounds of ``--miners`` miners (module doc); its id."""
    run_id = await create_run(servers)
    if run_id is None:
        raise SystemExit("could not create the run")
    started = time.perf_counter()
    db = servers.daemon.ctx.db
    with trio.fail_after(GROW_TIMEOUT):
        await db.write(_grow(run_id, args.rounds, args.miners))
        await db.checkpoint()  # as the daemon's checkpointer would, first
    grown = time.perf_counter() - started
    url = f"{servers.daemon.url}/v1/runs/{run_id}/rounds/{args.rounds - 1}"
    async with httpx.AsyncClient() as client:
        with trio.fail_after(ASSIGN_TIMEOUT):
            while (await client.get(url, timeout=60)).json().get("assignment") is None:  # noqa: ASYNC110
                await trio.sleep(1.0)  # a poll of the view over HTTP, as a miner's
    print(
        f"{args.rounds:,} rounds, {args.miners} miners in round {args.rounds - 1} (store grown in"
        f" {grown:.1f} s, its assignment drawn {time.perf_counter() - started - grown:.0f} s"
        f" later); {args.connections} connections, {args.seconds:g} s per row"
    )
    return run_id


async def serve_and_measure(cpus: Cpus, args: argparse.Namespace) -> None:
    async with open_servers("ht-bench-views-") as servers:
        handle, hello_url = servers.daemon, servers.hello_url
        with trio.fail_after(SETUP_TIMEOUT):
            uncached_url: str = await servers.nursery.start(
                partial(serve_asgi, _uncached_app(handle), "127.0.0.1", 0)
            )
        run_id = await _grown(servers, args)
        print(cpus.describe())
        newest = args.rounds - 1
        run, roster = f"/v1/runs/{run_id}", f"/v1/runs/{run_id}/roster"
        rnd = f"/v1/runs/{run_id}/rounds/{newest}"
        identity = {"accept-encoding": "identity"}
        gzip = {"accept-encoding": "gzip, deflate"}  # what the miners' httpx clients send
        rows = [
            ("hello GET", hello_url, "/", identity),
            ("run view, default page", handle.url, run, identity),
            ("run view, default page, uncached", uncached_url, run, identity),
            ("run view, limit=1024 full=1", handle.url, f"{run}?limit=1024&full=1", identity),
            ("roster view, default page", handle.url, roster, identity),
            ("round view, default page", handle.url, rnd, identity),
            ("round view, default page, gzip", handle.url, rnd, gzip),
            ("round view, default page, uncached", uncached_url, rnd, identity),
            ("round view, full=1", handle.url, f"{rnd}?full=1", identity),
            ("hello GET, again", hello_url, "/", identity),
        ]
        results: dict[str, dict[str, Any]] = {}
        async with httpx.AsyncClient() as client:
            for name, url, path, headers in rows:
                await client.get(url + path, timeout=60)  # rendered and kept
                answer = await client.get(url + path, headers=headers, timeout=60)
                size = int(answer.headers.get("content-length", len(answer.content)))
                before = handle.ctx.db.statistics()
                spec = get_spec(url, path, args.connections, args.seconds) | {"headers": headers}
                result = await measure(cpus, spec)
                after = handle.ctx.db.statistics()
                results[name] = result
                print(
                    f"{name:36s} {result['rate']:8.1f} req/s {size / 1000:9.1f} KB  server CPU"
                    f" {cpu_us(result):6.0f} us, load CPU {cpu_us(result, 'cpu'):5.0f} us a"
                    f" request ({result['ok']} ok, {result['errors']} errors,"
                    f" {result['stuck']} stuck; {after.writes - before.writes} writes and"
                    f" {after.reads - before.reads} reads committed meanwhile)"
                )
        first, last = results["hello GET"], results["hello GET, again"]
        hello = (first["rate"] + last["rate"]) / 2
        hello_cpu = (cpu_us(first) + cpu_us(last)) / 2
        print(
            f"hello GET, mean of the first and last rows: {hello:.1f} req/s,"
            f" server CPU {hello_cpu:.0f} us a request"
        )
        for name, *_ in rows[1:-1]:
            row = results[name]
            print(
                f"ratio {name:36s} / hello GET: {row['rate'] / hello:.2f}x"
                f" (server CPU a request, hello GET / this: {hello_cpu / cpu_us(row):.2f})"
            )
        await _renders(handle, run_id, newest, hello)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="measured time per row")
    parser.add_argument("--connections", type=int, default=64, help="concurrent connections")
    parser.add_argument("--rounds", type=int, default=10_000, help="rounds in the store")
    parser.add_argument("--miners", type=int, default=256, help="miners of the newest round")
    args = parser.parse_args()
    trio.run(serve_and_measure, pin_server(), args)


if __name__ == "__main__":
    main()
