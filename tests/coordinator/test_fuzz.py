"""A fixed-seed fuzz of every route of the real app, in process (issue 18 item 6, the default
suite's sample; the grammar is :mod:`tests.coordinator.fuzz_support`).

Promises checked: no answer is a 5xx except a documented 503, every 4xx is JSON with a
non-empty ``detail``, no request goes unanswered (an exception escaping the app would reach the
client here); requests without credentials change no table that only authenticated routes
write; afterwards ``/health`` is 200 and SQLite's integrity check is ok.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import httpx
import trio
import trio.testing

from tests.coordinator.fuzz_support import (
    Credentials,
    FuzzRequest,
    Grammar,
    Tally,
    check_answer,
    routes_of,
)
from tests.coordinator.harness import (
    ADMIN_TOKEN,
    INTERNAL_TOKEN,
    WORKER_TOKEN,
    CapturedApp,
    Harness,
)
from tests.coordinator.lifecycle_support import MINERS, open_runs, push, ready_run, unpause

SEED = 18
REQUESTS = 1000
ANONYMOUS = 300
KEYLESS_TABLES = frozenset({"compute_nodes", "meta"})
"""Tables a request without credentials may write: keyless node registration, and the probe
write of ``/health``."""


ANSWER_BOUND = 120.0
"""Virtual seconds one request may take (a long poll holds 25 s)."""


async def _exchange(
    client: httpx.AsyncClient, request: FuzzRequest
) -> tuple[httpx.Response, str, bytes]:
    async with client.stream(
        request.method,
        request.path,
        headers=list(request.headers),
        content=request.body,
        timeout=120,
    ) as answer:
        content_type = answer.headers.get("content-type", "")
        body = b"" if content_type.startswith("text/event-stream") else await answer.aread()
    return answer, content_type, body


async def _send(client: httpx.AsyncClient, request: FuzzRequest, tally: Tally) -> None:
    try:
        with trio.fail_after(ANSWER_BOUND):  # virtual seconds: a hung handler fails the test
            answer, content_type, body = await _exchange(client, request)
    except trio.TooSlowError:
        tally.add(request, 599, f"no answer within {ANSWER_BOUND:g} s")
        return
    except Exception as e:  # an app error reaches the client in process: no answer was given
        tally.add(request, 599, f"no answer: {e!r:.300}")
        return
    tally.add(
        request, answer.status_code, check_answer(request, answer.status_code, content_type, body)
    )


def _tables(conn: sqlite3.Connection) -> dict[str, str]:
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    digests = {}
    for name in names:
        rows = conn.execute(f'SELECT * FROM "{name}" ORDER BY 1').fetchall()
        digests[name] = hashlib.sha256(repr(rows).encode()).hexdigest()
    return digests


def integrity_check(conn: sqlite3.Connection) -> str:
    return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


async def setup_credentials(h: Harness) -> Credentials:
    await push(h, 1, 2, 3)
    run_id = await ready_run(h)
    assert (await unpause(h, run_id)).status_code == 200
    minted = await h.client.post(
        "/v1/compute/register",
        json={"key": None, "handle": "n1", "capabilities": ["delta-loss"], "hardware": "cpu"},
    )
    info = await h.ctx.objects.put_bytes(b"a stored object")
    return Credentials(
        admin=ADMIN_TOKEN,
        worker=WORKER_TOKEN,
        internal=INTERNAL_TOKEN,
        node_key=minted.json()["key"],
        slug=h.ctx.settings.slug,
        run_id=run_id,
        hotkey=MINERS[0],
        object_sha=info.sha256,
    )


async def test_no_request_of_the_fuzz_corpus_gets_a_5xx_or_a_bare_error(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    captured = CapturedApp()
    async with open_runs(tmp_path, extra_routes=captured) as h:
        creds = await setup_credentials(h)
        assert captured.app is not None
        routes = routes_of(captured.app.url_map)
        grammar = Grammar(routes, creds, SEED)

        anonymous = Tally()
        before = await h.ctx.db.read(_tables)
        for request in grammar.requests(ANONYMOUS, credentials=False):
            await _send(h.client, request, anonymous)
        after = await h.ctx.db.read(_tables)

        tally = Tally()
        for request in grammar.requests(REQUESTS):
            await _send(h.client, request, tally)

        health = await h.client.get("/health")
        integrity = await h.ctx.db.read(integrity_check)
    print(f"fuzz (in process, seed {SEED}): anonymous {anonymous.summary()}")
    print(f"fuzz (in process, seed {SEED}): {tally.summary()}")
    assert len(routes) >= 60
    assert anonymous.failures == []
    assert tally.failures == []
    changed = sorted(name for name in before if before[name] != after.get(name))
    assert set(changed) <= KEYLESS_TABLES, changed
    assert health.status_code == 200, health.text
    assert integrity == "ok"
    # The corpus reaches past the edge too: some requests are served, some refused each way.
    assert tally.statuses[200] > 0
    assert {400, 401, 404} <= set(tally.statuses)
