"""``hypertrain aggregate`` against the real daemon (``aggregator = "external"``), in virtual time.

Checked: with three real miners the remote aggregator merges rounds 0 and 1 and opens rounds 1
and 2 with the right hashes and published start states; its objects are byte for byte the
daemon's own step on the same inputs; its tapes replay from the daemon's store; a pass stopped
between opening a round and publishing its state is finished by the next one. Adversarial: a key
that is not the run's K_coord, bad admin token files, an unreachable daemon, the previous
OuterState unknown, the admin object upload's 422/401.
"""

from __future__ import annotations

import hashlib
import io
import json
import sqlite3
import types
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import httpx
import pytest
import trio
import trio.testing

from hypertrain.aggregator.merge import Params
from hypertrain.aggregator.remote import RemoteAggregator, RemoteConfig
from hypertrain.aggregator.remote_client import AggregatorClient, Retry
from hypertrain.aggregator.remote_plan import MergeReport
from hypertrain.aggregator.statedir import StateDir
from hypertrain.aggregator.step import Step, compute_step
from hypertrain.aggregator.tape import parse_signed_tape, seal_tape, tape_bytes
from hypertrain.aggregator.tape_replay import replay_tape
from hypertrain.beacon.ingest import latest_round
from hypertrain.cli import build_parser
from hypertrain.cli.aggregate import _report, aggregate_main
from hypertrain.coordinator.flows.aggregation import (
    AggregationRow,
    StepInputs,
    get_aggregation,
    step_inputs,
)
from hypertrain.coordinator.tables.miners import miner_details
from hypertrain.coordinator.tables.rounds import get_round_row
from hypertrain.coordinator.tables.runs import get_run
from hypertrain.daemon.main import DaemonHandle
from hypertrain.daemon.services import SERVICES, DaemonParts, aggregator_service
from hypertrain.daemon.settings import ConfigError, load_settings
from hypertrain.miner.progress import Progress
from hypertrain.miner.session import run_miner
from hypertrain.protocol.keys import Keypair, write_seed_file
from hypertrain.protocol.manifest import RunManifest
from nurseries import Backoff, run_inline
from nurseries.testing import open_asgi_transport
from tests.coordinator.harness import ADMIN_TOKEN, WORKER_TOKEN, admin_headers
from tests.daemon.support import running_daemon
from tests.miner.conftest import coord, data_dir, run_manifest  # noqa: F401 (fixtures)
from tests.miner.rounds_support import set_total_rounds
from tests.miner.test_against_the_daemon import API, COORD, MINERS, _config, _launch, _settings

RUN_TIMEOUT = 2400.0  # virtual seconds
FAST_RETRY = Retry(budget=0.02, backoff=Backoff(initial=0.01, maximum=0.01))


@asynccontextmanager
async def _external_daemon(
    tmp_path: Path,
) -> AsyncIterator[tuple[DaemonHandle, httpx.AsyncBaseTransport]]:
    settings = attrs.evolve(_settings(tmp_path), aggregator="external")
    async with (
        running_daemon(settings, SERVICES) as handle,
        open_asgi_transport(handle.app, lifespan=False) as transport,
    ):
        yield handle, transport


def _args(
    tmp_path: Path, run_id: str, *, token: str = ADMIN_TOKEN, coord_key: Path | None = None
) -> list[str]:
    token_file = tmp_path / "aggregator-admin-token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    return [
        "aggregate",
        "--api",
        API,
        "--run-id",
        run_id,
        "--admin-token-file",
        str(token_file),
        "--coord-key",
        str(coord_key or tmp_path / "secrets" / "coord.key"),
        "--state-dir",
        str(tmp_path / "aggregator-state"),
        "--once",
    ]


async def _aggregate(argv: list[str], transport: httpx.AsyncBaseTransport) -> int:
    args = build_parser().parse_args(argv)
    return await aggregate_main(args, transport=transport, retry=FAST_RETRY)


def _lines(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def _reports(out: str) -> list[dict[str, object]]:
    """The merge reports (the lines of finalised rounds left out)."""
    return [line for line in _lines(out) if line.get("state") != "FINAL"]


def test_a_merge_report_is_one_json_line_with_a_note_only_when_there_is_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    key, theta = "ab" * 32, "cd" * 32
    _report(MergeReport(0, key, theta, 0.25, 1, 1))
    _report(MergeReport(1, key, theta, 1.5, 0, None, "round 2 was already open"))
    assert capsys.readouterr().out == (
        f'{{"w":0,"tape_key":"{key}","theta_hash":"{theta}","update_norm":0.25,"clipped":1,'
        '"opened":1}\n'
        f'{{"w":1,"tape_key":"{key}","theta_hash":"{theta}","update_norm":1.5,"clipped":0,'
        '"opened":null,"note":"round 2 was already open"}\n'
    )


def _inputs_of(conn: sqlite3.Connection, run_id: str, w: int, prev_key: str | None) -> StepInputs:
    """What the daemon's step_inputs reads, for a round whose predecessor it did not merge."""
    row = get_round_row(conn, run_id, w)
    assert row is not None
    uploads = tuple(
        (hotkey, miner.delta_hash)
        for hotkey, miner in sorted(miner_details(conn, run_id, w).items())
        if miner.status == "UPLOADED" and miner.delta_hash is not None
    )
    return StepInputs(get_run(conn, run_id), row, latest_round(conn), prev_key, uploads)


async def test_the_remote_aggregator_merges_two_rounds_byte_for_byte_as_the_daemon(
    tmp_path: Path,
    data_dir: Path,  # noqa: F811
    run_manifest: RunManifest,  # noqa: F811
    configured: None,
    autojump_clock: trio.testing.MockClock,
    capsys: pytest.CaptureFixture[str],
) -> None:
    codes: list[int] = []
    async with (
        _external_daemon(tmp_path) as (handle, transport),
        httpx.AsyncClient(transport=transport, base_url=API) as client,
    ):
        run_id = await _launch(client, run_manifest)
        await set_total_rounds(client, run_id, 3)
        configs = {key.ss58: _config(tmp_path, key, data_dir) for key in MINERS}
        exits: dict[str, int] = {}

        async def mine(key: Keypair) -> None:
            summary = await run_miner(
                configs[key.ss58],
                key,
                rounds=2,
                start=0,
                transport=transport,
                progress=Progress(io.StringIO()),
                configure=lambda env: None,
            )
            exits[key.ss58] = summary.exit_code

        with trio.fail_after(RUN_TIMEOUT):
            async with trio.open_nursery() as nursery:
                for key in MINERS:
                    nursery.start_soon(mine, key)
                for _ in range(2):
                    codes.append(await _aggregate(_args(tmp_path, run_id), transport))
        views = [(await client.get(f"/v1/runs/{run_id}/rounds/{w}")).json() for w in range(3)]
        reports = _reports(capsys.readouterr().out)
        assert [r["w"] for r in reports] == [0, 1]
        # The daemon's own step on the same inputs: round 0 exactly as its service reads it,
        # round 1 from the remote's round 0 state (the daemon has no aggregation of round 0).
        inputs0 = await handle.ctx.db.read(step_inputs, run_id, 0)
        ours: list[Step] = [
            await compute_step(handle.ctx.objects.get, inputs0.merge_inputs(), COORD, run_inline)
        ]
        inputs1 = await handle.ctx.db.read(_inputs_of, run_id, 1, ours[0].out_state)
        ours.append(
            await compute_step(handle.ctx.objects.get, inputs1.merge_inputs(), COORD, run_inline)
        )
        stored = {
            step.w: [
                handle.ctx.objects.path_of(hashlib.sha256(b).hexdigest()) for b in step.objects
            ]
            for step in ours
        }
        recorded = [await handle.ctx.db.read(get_aggregation, run_id, w) for w in (0, 1)]
        params = Params.from_outer(run_manifest.outer)
        objects = handle.ctx.objects
        replayed = [
            replay_tape(
                parse_signed_tape(objects.path_of(str(r["tape_key"])).read_bytes()),
                coord_ss58=COORD.ss58,
                load_object=lambda key: objects.path_of(key).read_bytes(),
                outer_params=params,
            )
            for r in reports
        ]

    assert codes == [0, 0]
    assert exits == dict.fromkeys((key.ss58 for key in MINERS), 0)
    for w, (report, step) in enumerate(zip(reports, ours, strict=True)):
        # aggregator = external: the daemon merged nothing itself, it recorded the remote's tape
        assert recorded[w] == AggregationRow(
            tape_key=step.tape_key,
            out_state=step.out_state,
            theta_start_sha256=step.theta_start_sha256,
            theta_hash=step.theta_hash,
            update_norm=step.update_norm,
            clipped=step.clipped,
            inputs=step.inputs,
        )
        assert views[w]["tape_key"] == step.tape_key
        assert views[w]["update_norm"] == step.update_norm
        assert report == {
            "w": w,
            "tape_key": step.tape_key,
            "theta_hash": step.theta_hash,
            "update_norm": step.update_norm,
            "clipped": step.clipped,
            "opened": w + 1,
        }
        # Every object is in the daemon's store, byte for byte the daemon's own.
        for blob, path in zip(step.objects, stored[w], strict=True):
            assert path.read_bytes() == blob
        body = views[w + 1]["round_open"]["body"]
        assert body["prev_final_hash"] == body["theta_hash"] == step.theta_hash
        assert body["outer_state_hash"] == step.outer_state_hash
        assert body["center_hash"] == step.center_hash
        assert views[w + 1]["state_sha256"] == step.theta_start_sha256
        assert body["d_open"] >= views[w]["round_open"]["body"]["d_upload"]
        assert replayed[w].tape_key == step.tape_key
        assert replayed[w].theta_hash == step.theta_hash
        assert {m["status"] for m in views[w]["miners"]} == {"UPLOADED"}
        assert step.update_norm > 0
        merged = StateDir(tmp_path / "aggregator-state").merged(run_id, w)
        assert merged is not None
        assert merged.out_state == step.out_state


async def test_a_pass_stopped_before_publishing_is_finished_by_the_next_one(
    tmp_path: Path,
    run_manifest: RunManifest,  # noqa: F811
    configured: None,
    autojump_clock: trio.testing.MockClock,
    capsys: pytest.CaptureFixture[str],
) -> None:
    class _Crash(Exception):
        pass

    class Crashing(AggregatorClient):
        async def publish_state(self, run_id: str, w: int, theta_start_sha256: str) -> None:
            raise _Crash("stopped after POST .../aggregate")

    async with (
        _external_daemon(tmp_path) as (_handle, transport),
        httpx.AsyncClient(transport=transport, base_url=API) as client,
    ):
        run_id = await _launch(client, run_manifest)
        await set_total_rounds(client, run_id, 2)
        config = RemoteConfig(run_id, COORD, tmp_path / "aggregator-state")
        crashing = Crashing(API, ADMIN_TOKEN, transport=transport, retry=FAST_RETRY)
        reports: list[MergeReport] = []
        with trio.fail_after(RUN_TIMEOUT), pytest.raises(_Crash):
            await RemoteAggregator(config, crashing, reports.append).merge_next()
        await crashing.aclose()
        before = (await client.get(f"/v1/runs/{run_id}/rounds/1")).json()
        with trio.fail_after(RUN_TIMEOUT):
            code = await _aggregate(_args(tmp_path, run_id), transport)
        after = (await client.get(f"/v1/runs/{run_id}/rounds/1")).json()
        with trio.fail_after(RUN_TIMEOUT):
            again = await _aggregate(_args(tmp_path, run_id), transport)
    merged0 = StateDir(tmp_path / "aggregator-state").merged(run_id, 0)
    assert merged0 is not None
    assert reports == []
    assert before["state_sha256"] is None
    assert after["state_sha256"] == merged0.theta_start_sha256
    assert after["round_open"]["body"]["theta_hash"] == merged0.theta_hash
    captured = capsys.readouterr()
    (last,) = _reports(captured.out)
    assert (code, again) == (0, 0)
    assert last["w"] == 1
    assert last["opened"] is None
    assert "nothing to merge" in captured.err


def _forget_tape(conn: sqlite3.Connection, run_id: str, w: int) -> None:
    conn.execute("DELETE FROM aggregations WHERE run_id = ? AND w = ?", (run_id, w))


async def test_refusals_exit_with_a_clear_message(
    tmp_path: Path,
    run_manifest: RunManifest,  # noqa: F811
    configured: None,
    autojump_clock: trio.testing.MockClock,
    capsys: pytest.CaptureFixture[str],
) -> None:
    wrong_key = tmp_path / "wrong.key"
    write_seed_file(wrong_key, bytes([0x99]) * 32)
    async with (
        _external_daemon(tmp_path) as (handle, transport),
        httpx.AsyncClient(transport=transport, base_url=API) as client,
    ):
        run_id = await _launch(client, run_manifest)
        results = {}
        with trio.fail_after(RUN_TIMEOUT):
            argv = _args(tmp_path, run_id, coord_key=wrong_key)
            results["wrong key"] = (await _aggregate(argv, transport), capsys.readouterr().err)
            argv = _args(tmp_path, run_id, token="not-the-token")
            results["wrong token"] = (await _aggregate(argv, transport), capsys.readouterr().err)
            argv = _args(tmp_path, run_id)
            argv[argv.index("--admin-token-file") + 1] = str(tmp_path / "missing")
            results["no token file"] = (await _aggregate(argv, transport), capsys.readouterr().err)
            empty = tmp_path / "empty-token"
            empty.write_text("\n")
            empty.chmod(0o600)
            argv[argv.index("--admin-token-file") + 1] = str(empty)
            results["empty token"] = (await _aggregate(argv, transport), capsys.readouterr().err)
            # Round 0 merged, its tape unrecorded (as by an aggregator that stopped before
            # PUT .../tape), then a fresh state directory: round 0's OuterState is unknown.
            assert await _aggregate(_args(tmp_path, run_id), transport) == 0
            capsys.readouterr()
            await handle.ctx.db.write(_forget_tape, run_id, 0)
            argv = _args(tmp_path, run_id)
            argv[argv.index("--state-dir") + 1] = str(tmp_path / "fresh-state")
            results["state unknown"] = (await _aggregate(argv, transport), capsys.readouterr().err)

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    code = await _aggregate(_args(tmp_path, run_id), httpx.MockTransport(down))
    results["unreachable"] = (code, capsys.readouterr().err)

    assert results["wrong key"][0] == 2
    assert f"coord_pubkey {COORD.ss58}" in results["wrong key"][1]
    assert results["wrong token"][0] == 2
    assert "refused the admin token" in results["wrong token"][1]
    assert results["no token file"][0] == 2
    assert "missing: no such file" in results["no token file"][1]
    assert results["empty token"][0] == 2
    assert "does not hold one token" in results["empty token"][1]
    assert results["state unknown"][0] == 1
    assert "OuterState of round 0" in results["state unknown"][1]
    assert results["unreachable"][0] == 3
    assert "daemon unreachable" in results["unreachable"][1]
    assert "ConnectError" in results["unreachable"][1]


async def test_the_admin_object_upload(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    big = bytes(range(256)) * (5 * 4096)  # 5 MiB: over the app's 1 MiB body limit
    key = hashlib.sha256(big).hexdigest()
    other = hashlib.sha256(b"other").hexdigest()
    async with (
        _external_daemon(tmp_path) as (handle, transport),
        httpx.AsyncClient(transport=transport, base_url=API) as client,
    ):
        path = f"/v1/aggregator/objects/{key}"
        no_token = await client.put(path, content=big)
        worker = await client.put(
            path, content=big, headers={"Authorization": f"Bearer {WORKER_TOKEN}"}
        )
        wrong = await client.put(
            f"/v1/aggregator/objects/{other}", content=big, headers=admin_headers()
        )
        stored_after_wrong = handle.ctx.objects.exists(other) or handle.ctx.objects.exists(key)
        bad_key = await client.put(
            "/v1/aggregator/objects/xyz", content=b"x", headers=admin_headers()
        )
        first = await client.put(path, content=big, headers=admin_headers())
        second = await client.put(path, content=big, headers=admin_headers())
        as_admin = await client.get(f"/v1/objects/{key}", headers=admin_headers())
        as_nobody = await client.get(f"/v1/objects/{key}", headers=admin_headers("nope"))
    assert no_token.status_code == 401
    assert worker.status_code == 401
    assert wrong.status_code == 422, wrong.text
    assert not stored_after_wrong
    assert bad_key.status_code == 400
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json() == {"sha256": key, "size": len(big)}
    assert as_admin.status_code == 200
    assert as_admin.content == big
    # Neither token: the worker token's refusal (this daemon has none configured: 503).
    assert as_nobody.status_code == 503
    assert "worker token not configured" in as_nobody.json()["detail"]


def test_the_aggregator_setting(tmp_path: Path) -> None:
    argv = ["--beacon", "local"]
    assert load_settings(argv, {}).aggregator == "internal"
    env = {"HYPERTRAIN_AGGREGATOR": "external"}
    assert load_settings(argv, env).aggregator == "external"
    toml = tmp_path / "daemon.toml"
    toml.write_text('aggregator = "external"\n')
    assert load_settings([*argv, "--config", str(toml)], {}).aggregator == "external"
    with pytest.raises(ConfigError, match="HYPERTRAIN_AGGREGATOR: expected internal or external"):
        load_settings(argv, {"HYPERTRAIN_AGGREGATOR": "remote"})


def test_the_aggregator_service_is_off_when_external(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    app = types.SimpleNamespace(finality=None)  # what the factory reads of the app parts
    parts = DaemonParts(settings, None, None, None, None, app)  # type: ignore[arg-type]
    external = attrs.evolve(parts, settings=attrs.evolve(settings, aggregator="external"))
    assert aggregator_service(parts) is not None
    assert aggregator_service(external) is None


def test_usage_errors_exit_2_naming_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hypertrain.cli import main

    run_id = "ab" * 32
    base = ["aggregate", "--api", API, "--run-id", run_id, "--admin-token-file", "t"]
    cases = {
        "--coord-key": base,
        "not an http(s) URL": ["aggregate", "--api", "ftp://x", *base[3:], "--coord-key", "k"],
        "is not 64 lowercase hex": [*base[:4], "xyz", *base[5:], "--coord-key", "k"],
        "t: no such file": [*base, "--coord-key", "k", "--once"],
    }
    for needle, argv in cases.items():
        assert main(argv) == 2, needle
        assert needle in capsys.readouterr().err, needle
    token = tmp_path / "token"
    token.write_text("secret\n")
    token.chmod(0o600)
    argv = [*base[:-1], str(token), "--coord-key", str(tmp_path / "nokey"), "--once"]
    assert main(argv) == 2
    assert "--coord-key" in capsys.readouterr().err
    token.chmod(0o644)  # what a plain `echo secret > token` makes: refused before any request
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert (
        f"--admin-token-file {token}: mode 0644 lets others read it; run chmod 600 {token}" in err
    )


async def test_the_tape_route_records_only_k_coords_tape_of_that_round_once(
    tmp_path: Path,
    run_manifest: RunManifest,  # noqa: F811
    configured: None,
    autojump_clock: trio.testing.MockClock,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with (
        _external_daemon(tmp_path) as (handle, transport),
        httpx.AsyncClient(transport=transport, base_url=API) as client,
    ):
        run_id = await _launch(client, run_manifest)
        with trio.fail_after(RUN_TIMEOUT):
            assert await _aggregate(_args(tmp_path, run_id), transport) == 0
        (report,) = _reports(capsys.readouterr().out)
        tape_key = str(report["tape_key"])
        signed = parse_signed_tape(handle.ctx.objects.path_of(tape_key).read_bytes())
        forged = tape_bytes(seal_tape(Keypair.from_seed(bytes([7]) * 32), signed.body))
        forged_key = hashlib.sha256(forged).hexdigest()
        r = await client.put(
            f"/v1/aggregator/objects/{forged_key}", content=forged, headers=admin_headers()
        )
        assert r.status_code == 200, r.text

        async def put(w: int, key: str, headers: dict[str, str] | None = None) -> httpx.Response:
            return await client.put(
                f"/v1/aggregator/runs/{run_id}/rounds/{w}/tape",
                json={"tape_key": key},
                headers=admin_headers() if headers is None else headers,
            )

        again = await put(0, tape_key)
        refused = {
            "no admin": await put(0, tape_key, {}),
            "unknown object": await put(0, "ab" * 32),
            "another signer": await put(0, forged_key),
            "another round": await put(1, tape_key),
            "not hex": await put(0, "nope"),
        }
        view = (await client.get(f"/v1/runs/{run_id}/rounds/0")).json()

    assert again.status_code == 200, again.text
    assert again.json() == {
        "run_id": run_id,
        "w": 0,
        "tape_key": tape_key,
        "theta_hash": report["theta_hash"],
        "update_norm": report["update_norm"],
        "clipped": report["clipped"],
    }
    statuses = {name: r.status_code for name, r in refused.items()}
    assert statuses == {
        "no admin": 401,
        "unknown object": 409,
        "another signer": 403,
        "another round": 422,
        "not hex": 400,
    }
    assert "is not in the object store" in refused["unknown object"].json()["detail"]
    assert "the tape is for run" in refused["another round"].json()["detail"]
    assert view["tape_key"] == tape_key
    assert view["update_norm"] == report["update_norm"]


async def test_once_on_a_paused_run_exits_3_after_its_wait_instead_of_waiting_forever(
    tmp_path: Path,
    run_manifest: RunManifest,  # noqa: F811
    autojump_clock: trio.testing.MockClock,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with (
        _external_daemon(tmp_path) as (_handle, transport),
        httpx.AsyncClient(transport=transport, base_url=API) as client,
    ):
        run_id = await _launch(client, run_manifest)
        paused = await client.put(
            f"/v1/admin/runs/{run_id}/paused", json={"paused": True}, headers=admin_headers()
        )
        assert paused.status_code == 200, paused.text
        t0 = trio.current_time()
        with trio.fail_after(RUN_TIMEOUT):
            code = await _aggregate([*_args(tmp_path, run_id), "--once-wait", "95"], transport)
        waited = trio.current_time() - t0
    assert code == 3
    assert 95.0 <= waited < 96.0  # the bound, not a poll (10 s) later, and not forever
    err = capsys.readouterr().err
    assert "--once gave up after 95 s" in err
    assert "the run is paused" in err
