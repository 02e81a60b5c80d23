"""Schemathesis against the daemon's app on a real socket (issue 20 item 4).

The app is served by hypercorn over 127.0.0.1 (as in ``test_fuzz_live.py``) with a running run,
a registered node and a stored object; the ``schemathesis`` CLI (a child process) reads
``GET /openapi.json`` and runs its examples, coverage, fuzzing and stateful phases over every
operation, in positive and negative mode, with the checks below, bounded by
:data:`MAX_EXAMPLES` per operation and :data:`BUDGET` seconds in two runs (:data:`RUNS`;
the CLI's start-up comes on top). It holds the admin, worker,
internal tokens and the node key (one per security scheme) and knows the run's id, a rostered
hotkey and the stored object's hash (a dictionary it draws path parameters from half the
time). A lease poll it sends without ``wait_ms`` asks for 0 (a hook): a 25 s hold per
request would spend the time budget waiting.

Promises: every request is answered; no 5xx (counted on the server side, by an ASGI wrapper,
as well as by schemathesis's ``not_a_server_error``); no check fails (schema conformance of
every answer, status codes and content types as documented, invalid data refused with a
4xx...); ``/health`` 200 and SQLite's integrity check ``ok`` afterwards. The counts are
printed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from hypertrain.coordinator.web.app import AppParts, create_app
from hypertrain.coordinator.web.openapi import OPENAPI_PATH
from nurseries import serve_asgi
from tests.coordinator.fuzz_support import Credentials
from tests.coordinator.lifecycle_support import open_runs
from tests.coordinator.test_fuzz import integrity_check, setup_credentials

MAX_EXAMPLES = int(os.environ.get("OPENAPI_EXAMPLES", "8"))
BUDGET = int(os.environ.get("OPENAPI_SECONDS", "60"))
RUNS = (("examples,coverage,fuzzing", BUDGET * 7 // 12), ("stateful", BUDGET * 5 // 12))
"""The two runs (phases, time budget in seconds): each spends its whole budget (fuzzing and
stateful testing repeat until it is spent), so stateful testing gets its own.
``OPENAPI_SECONDS=600 OPENAPI_EXAMPLES=50`` is a longer run than the suite's."""
SEED = 20
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
    "missing_required_header",
    "unsupported_method",
    "use_after_free",
    "ensure_resource_availability",
    "ignored_auth",
)
"""Every check but ``positive_data_acceptance``: a body the schema allows may still be refused
(a signature that does not verify, an id no run has), which the schema cannot say."""

HOOKS = """
import schemathesis

LONG_POLLS = ("/v1/compute/jobs/lease",)


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    if case.operation.path in LONG_POLLS and isinstance(case.body, dict):
        if "wait_ms" not in case.body:
            case.body = {**case.body, "wait_ms": 0}
"""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGI = Callable[
    [Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]
]


class Counted:
    """An ASGI app counting the statuses it answers (and naming the requests answered 5xx)."""

    def __init__(self, app: ASGI) -> None:
        self.app = app
        self.statuses: Counter[int] = Counter()
        self.server_errors: list[str] = []

    async def __call__(
        self,
        scope: Scope,
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counted_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status = int(message["status"])
                self.statuses[status] += 1
                if status >= 500:
                    self.server_errors.append(f"{status} {scope['method']} {scope['path']}")
            await send(message)

        await self.app(scope, receive, counted_send)


def _config(creds: Credentials) -> str:
    return f'''
[auth.openapi.AdminToken]
bearer = "{creds.admin}"

[auth.openapi.WorkerToken]
bearer = "{creds.worker}"

[auth.openapi.InternalToken]
bearer = "{creds.internal}"

[auth.openapi.NodeKey]
bearer = "{creds.node_key}"

[dictionaries.runs]
values = ["{creds.run_id}"]

[dictionaries.hotkeys]
values = ["{creds.hotkey}"]

[dictionaries.objects]
values = ["{creds.object_sha}"]

[parameters]
"path.run_id" = {{ dictionary = "runs", probability = 0.5 }}
"path.hotkey" = {{ dictionary = "hotkeys", probability = 0.5 }}
"path.sha256" = {{ dictionary = "objects", probability = 0.5 }}

[[operations]]
include-path = "/v1/events"
max-stream-events = 1
request-timeout = 20.0
'''


def _junit_failures(path: Path) -> tuple[int, list[str]]:
    """(test cases, ``operation: message`` of each failure) of schemathesis's JUnit report."""
    root = ET.parse(path).getroot()
    cases = root.iter("testcase")
    failures: list[str] = []
    count = 0
    for case in cases:
        count += 1
        for failed in (*case.findall("failure"), *case.findall("error")):
            text = (failed.get("message") or failed.text or "").strip()
            failures.append(f"{case.get('name')}: {text[:600]}")
    return count, failures


@pytest.mark.slow
async def test_schemathesis_finds_no_server_error_or_schema_violation(tmp_path: Path) -> None:
    async with open_runs(tmp_path / "daemon") as h, trio.open_nursery() as nursery:
        creds = await setup_credentials(h)
        counted = Counted(create_app(h.ctx, AppParts.build(h.ctx)))
        url = await nursery.start(serve_asgi, counted, "127.0.0.1", 0)
        work = tmp_path / "schemathesis"
        work.mkdir()
        (work / "st_hooks.py").write_text(HOOKS)
        config = work / "schemathesis.toml"
        config.write_text(_config(creds))
        env = {**os.environ, "SCHEMATHESIS_HOOKS": "st_hooks", "PYTHONPATH": str(work)}
        started = time.monotonic()
        outputs: list[str] = []
        failures: list[str] = []
        cases = 0
        for phases, budget in RUNS:
            junit = work / f"junit-{phases.replace(',', '-')}.xml"
            command = [
                str(Path(sys.executable).with_name("schemathesis")),
                "--config-file",
                str(config),
                "run",
                f"{url}{OPENAPI_PATH}",
                "--checks",
                ",".join(CHECKS),
                "--mode",
                "all",
                "--phases",
                phases,
                "--max-examples",
                str(MAX_EXAMPLES),
                "--max-time",
                str(budget),
                "--seed",
                str(SEED),
                "--workers",
                "1",  # two raced CPython 3.11's ast.parse inside hypothesis ("AST constructor
                # recursion depth mismatch", a Runtime Error of the tool, not of the daemon)
                "--request-timeout",
                "30",
                "--generation-database",
                "none",
                "--continue-on-failure",
                "--no-color",
                "--report",
                "junit",
                "--report-junit-path",
                str(junit),
            ]
            with trio.fail_after(budget * 3 + 60):
                done = await trio.run_process(
                    command,
                    cwd=work,
                    env=env,
                    capture_stdout=True,
                    stderr=subprocess.STDOUT,
                    check=False,
                )
            outputs.append(done.stdout.decode(errors="replace"))
            found = _junit_failures(junit) if junit.exists() else (0, [f"{phases}: no report"])
            cases += found[0]
            failures += found[1]
            if done.returncode != 0 and not found[1]:
                failures.append(f"{phases}: schemathesis exited {done.returncode}")
        elapsed = time.monotonic() - started
        async with httpx.AsyncClient(base_url=url, trust_env=False) as client:
            health = await client.get("/health")
        integrity = await h.ctx.db.read(integrity_check)
        nursery.cancel_scope.cancel()
    requests = sum(counted.statuses.values())
    statuses = dict(sorted(counted.statuses.items()))
    for output in outputs:
        found = [i for i in (output.find("FAILURES"), output.find("WARNINGS")) if i >= 0]
        print(output[min(found) if found else -6000 :][:12000])
    print(
        f"schemathesis ({elapsed:.0f} s, seed {SEED}, {MAX_EXAMPLES} examples an operation,"
        f" {' then '.join(p for p, _ in RUNS)}):"
        f" {requests} requests, {cases} operations, statuses {statuses},"
        f" {len(counted.server_errors)} server errors, {len(failures)} failed checks"
    )
    for failure in failures:
        print("  ", failure)
    assert counted.server_errors == []
    assert failures == []
    assert health.status_code == 200
    assert integrity == "ok"
