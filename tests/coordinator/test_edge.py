"""Bounds at the edge (DESIGN 9, issue 18 item 1): every malformed request to the real app is a
4xx naming the problem, answered before any transaction runs.

Each case here answered 500 (or crashed the handler) before the bounds: a 4,400-digit integer
in a body (Python's int-string limit), ``1e999``, lone surrogates reaching SQLite, a 40-digit or
``2**63`` round number in a path (OverflowError in SQLite), a huge ``X-HT-Exp`` header, a
non-ASCII digit in a query parameter.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.testing
from quart_trio import QuartTrio
from werkzeug.routing import Rule
from werkzeug.routing.converters import NumberConverter

from hypertrain.coordinator.web.http import HEADERS_LIMIT, U53Converter
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.object_auth import HEADER_EXP, sign_headers
from tests.coordinator.harness import ADMIN_TOKEN, CapturedApp, Harness, admin_headers
from tests.coordinator.lifecycle_support import open_runs, push, ready_run, unpause

RUN_ID = "ab" * 32
NESTED = "[" * 65 + "]" * 65
BODY_CASES = [
    ('{"key": null, "handle": null, "capabilities": [' + "1" * 4400 + "]}", "an integer of 4400"),
    ('{"key": null, "handle": null, "capabilities": [1e999]}', "number 1e999 is out of range"),
    ('{"key": -0, "handle": null}', "-0 is not allowed"),
    ('{"key": null, "handle": ' + NESTED + "}", "nested deeper than 64 levels"),
    ('{"key": null, "handle": "\\ud800"}', "a string holds a lone surrogate"),
    ('{"key": "\\udfff\\ud800", "handle": null}', "a string holds a lone surrogate"),
]


def _u53_rules(app: QuartTrio) -> Iterator[tuple[Rule, str]]:
    for rule in app.url_map.iter_rules():
        for name, converter in rule._converters.items():
            if isinstance(converter, U53Converter):
                yield rule, name


def _path(rule: Rule, run_id: str, **values: str) -> str:
    """``rule``'s path with ``values`` in their places and every other parameter filled."""

    def fill(match: re.Match[str]) -> str:
        name = match.group(2)
        return values.get(name, run_id if name == "run_id" else "cd" * 32)

    return re.sub(r"<(?:([a-z0-9]+):)?([a-z_]+)>", fill, rule.rule)


async def _running(h: Harness) -> str:
    await push(h, 1, 2, 3)
    run_id = await ready_run(h)
    assert (await unpause(h, run_id)).status_code == 200
    return run_id


@pytest.mark.parametrize(("body", "detail"), BODY_CASES)
async def test_a_body_beyond_the_parsers_bounds_is_400_and_writes_nothing(
    tmp_path: Path, body: str, detail: str
) -> None:
    async with open_runs(tmp_path) as h:
        before = h.ctx.db.statistics()
        keyless = await h.client.post("/v1/compute/register", content=body.encode())
        admin = await h.client.post(
            "/v1/admin/runs", content=body.encode(), headers=admin_headers()
        )
        after = h.ctx.db.statistics()
    for answer in (keyless, admin):
        assert answer.status_code == 400, answer.text
        assert answer.json()["detail"].startswith("JSON: ")
        assert detail in answer.json()["detail"]
    assert (after.writes, after.rollbacks) == (before.writes, before.rollbacks)


async def test_a_lone_surrogate_behind_a_node_key_is_400(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        minted = await h.client.post(
            "/v1/compute/register",
            json={"key": None, "handle": None, "capabilities": ["delta-loss"], "hardware": "cpu"},
        )
        node = {"Authorization": f"Bearer {minted.json()['key']}"}
        lease = await h.client.post(
            "/v1/compute/jobs/lease",
            content=b'{"capabilities": [], "hardware": "\\ud800", "wait_ms": 0}',
            headers=node,
        )
    assert (lease.status_code, lease.json()) == (
        400,
        {"detail": "JSON: $.hardware: a string holds a lone surrogate"},
    )


@pytest.mark.parametrize("w", ["9" * 40, str(2**63), str(2**53), "9" * 4400, "abc", "-1", "1.0"])
async def test_every_integer_path_parameter_is_bounded_before_the_handler(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, w: str
) -> None:
    """Every ``<u53:...>`` of the app, with and without the admin token: a 400 naming the
    parameter, and no transaction ran (the converter answers before the handler)."""
    captured = CapturedApp()
    async with open_runs(tmp_path, extra_routes=captured) as h:
        run_id = await _running(h)
        assert captured.app is not None
        rules = list(_u53_rules(captured.app))
        before = h.ctx.db.statistics()
        answers = []
        for rule, name in rules:
            method = sorted(set(rule.methods or ()) - {"HEAD", "OPTIONS"})[0]
            for headers in ({}, admin_headers()):
                path = _path(rule, run_id, **{name: w})
                answers.append((name, await h.client.request(method, path, headers=headers)))
        after = h.ctx.db.statistics()
    assert len(rules) >= 9
    for name, answer in answers:
        assert answer.status_code == 400, (answer.request.url, answer.text)
        assert answer.json()["detail"].startswith(f"{name}: must be an int in [0, 2^53-1], got ")
    assert (after.reads, after.writes) == (before.reads, before.writes)


async def test_no_route_uses_werkzeugs_unbounded_number_converters(tmp_path: Path) -> None:
    captured = CapturedApp()
    async with open_runs(tmp_path, extra_routes=captured):
        assert captured.app is not None
        converters = [
            (rule.rule, type(converter))
            for rule in captured.app.url_map.iter_rules()
            for converter in rule._converters.values()
        ]
    assert [c for c in converters if issubclass(c[1], NumberConverter)] == []
    assert sum(c[1] is U53Converter for c in converters) >= 9


async def test_an_integer_path_parameter_in_range_reaches_the_handler(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_runs(tmp_path) as h:
        run_id = await _running(h)
        zero = await h.client.get(f"/v1/runs/{run_id}/rounds/0")
        leading = await h.client.get(f"/v1/runs/{run_id}/rounds/00")
        largest = await h.client.get(f"/v1/runs/{run_id}/rounds/{2**53 - 1}")
    assert zero.status_code == leading.status_code == 200
    assert zero.json() == leading.json()
    assert largest.status_code == 404, largest.text


@pytest.mark.parametrize("raw", ["9" * 5000, "\u00b2", "0", "-1", ""])
async def test_a_query_integer_is_bounded(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, raw: str
) -> None:
    async with open_runs(tmp_path) as h:
        run_id = await _running(h)
        answer = await h.client.get(
            f"/v1/aggregator/runs/{run_id}/rounds/0/inputs",
            params={"d_open": raw},
            headers=admin_headers(ADMIN_TOKEN),
        )
    assert answer.status_code == 400, answer.text
    assert answer.json()["detail"].startswith("d_open: must be an int in [1, 2^53-1], got ")


@pytest.mark.parametrize("exp", ["9" * 4400, str(2**63), "0", "01", "-5", "\u0661"])
async def test_a_signed_download_with_a_bad_exp_header_is_400(tmp_path: Path, exp: str) -> None:
    async with open_runs(tmp_path) as h:
        headers = sign_headers(Keypair.from_seed(bytes([5]) * 32), RUN_ID, "cd" * 32, 10)
        headers[HEADER_EXP] = exp
        answer = await h.client.get(
            f"/v1/objects/{'cd' * 32}",
            headers={k.encode(): v.encode() for k, v in headers.items()},
        )
    assert answer.status_code == 400, answer.text
    assert answer.json()["detail"].startswith("object auth: X-HT-Exp")


async def test_headers_over_the_limit_are_431_before_any_handler(tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        before = h.ctx.db.statistics()
        big = await h.client.get("/health", headers={"X-Padding": "p" * HEADERS_LIMIT})
        many = await h.client.get("/v1/runs", headers=[(f"X-P{i}", "p" * 100) for i in range(200)])
        after = h.ctx.db.statistics()
        within = await h.client.get("/version", headers={"X-Padding": "p" * 8000})
    for answer in (big, many):
        assert (answer.status_code, answer.json()) == (
            431,
            {"detail": f"request headers over the limit of {HEADERS_LIMIT} bytes"},
        )
    assert (after.reads, after.writes) == (before.reads, before.writes)
    assert within.status_code == 200
