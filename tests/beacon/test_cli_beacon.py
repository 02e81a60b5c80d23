"""``hypertrain beacon``: the pusher's exit codes, check, verify, the real programs end to end."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio.testing

from hypertrain.beacon.chain import ChainInfo
from hypertrain.beacon.check import QUICKNET_VECTORS, live_check
from hypertrain.beacon.ingest import latest_round, store_round
from hypertrain.beacon.local import local_chain_app
from hypertrain.beacon.relays import RelayClient
from hypertrain.cli import main
from hypertrain.cli.beacon import PushOptions, push_main
from hypertrain.protocol.converter import unstructure
from hypertrain.store import open_database
from nurseries import ASGIApp, SystemClock, VirtualClock, serve_asgi
from nurseries.testing import open_mounted_client
from tests.beacon.coordinator_app import CoordinatorApp
from tests.beacon.relay_fakes import GENESIS, IMPOSTOR_SEED, down_app, make_chain, tampering_app

Capture = pytest.CaptureFixture[str]
TOKEN = "abc.DEF_123-~"
RELAYS = ("http://relay-a", "http://relay-b")
API = "http://coord"
REPO = Path(__file__).resolve().parents[2]


@attrs.define
class Setup:
    coordinator: CoordinatorApp
    client: httpx.AsyncClient
    token_file: Path
    lines: list[dict[str, Any]] = attrs.Factory(list)

    async def push(self, **changes: Any) -> int:
        wall = VirtualClock(epoch=GENESIS)
        changes.setdefault("relays", RELAYS)
        options = PushOptions(
            api=API, token_file=self.token_file, chain=make_chain(wall).info, **changes
        )
        return await push_main(options, client=self.client, emit=self.lines.append)


@asynccontextmanager
async def setup(tmp_path: Path, relay_b: str = "good") -> AsyncIterator[Setup]:
    wall = VirtualClock(epoch=GENESIS)
    chain = make_chain(wall)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    b_app: ASGIApp = {
        "good": local_chain_app(chain),
        "down": down_app(503),
        "bad": tampering_app(local_chain_app(chain), make_chain(wall, seed=IMPOSTOR_SEED)),
    }[relay_b]
    async with open_database(tmp_path / "coord.db", wall_clock=wall) as db:
        coordinator = CoordinatorApp(db, chain.info, TOKEN, wall)
        apps: dict[str, ASGIApp] = {RELAYS[0]: local_chain_app(chain), RELAYS[1]: b_app}
        apps[API] = coordinator
        async with open_mounted_client(apps) as client:
            await trio.sleep(6.0)  # round 3 is due
            yield Setup(coordinator, client, token_file)


# --- push: exit codes, in process and in virtual time ------------------------------------------


async def test_push_once_good_tick_exits_0(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with setup(tmp_path) as s:
        assert await s.push(once=True) == 0
        assert s.lines == [{"pushed": [1, 2, 3], "latest": 3, "known": 0}]
        assert s.coordinator.pushes == [1, 2, 3]


async def test_push_once_failed_tick_exits_1(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, capsys: Capture
) -> None:
    async with setup(tmp_path, relay_b="down") as s:
        assert await s.push(once=True) == 1
        assert s.lines[0]["failures"] == 1
        assert "BeaconUnavailable" in s.lines[0]["error"]
        assert "tick failed: BeaconUnavailable" in capsys.readouterr().err


async def test_push_disagreeing_relays_fail_the_tick(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with setup(tmp_path, relay_b="bad") as s:
        assert await s.push(once=True) == 1
        assert "BeaconDisagreement" in s.lines[0]["error"]
        assert s.coordinator.pushes == []


async def test_push_conflict_exits_1(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, capsys: Capture
) -> None:
    async with setup(tmp_path) as s:
        other = make_chain(VirtualClock(epoch=GENESIS), seed=IMPOSTOR_SEED)
        await s.coordinator.db.write(store_round, other.round(3), 0)
        s.coordinator.claim_latest = 2
        assert await s.push() == 1
        assert "HTTP 409: round 3 is already stored" in capsys.readouterr().err
        assert s.coordinator.pushes == [3]


@pytest.mark.parametrize(("status", "token"), [(401, TOKEN), (None, "other-token")])
async def test_push_auth_failure_exits_2(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, status: int | None, token: str
) -> None:
    async with setup(tmp_path) as s:
        s.coordinator.fail_with = status
        s.token_file.write_text(token)
        assert await s.push() == 2


@pytest.mark.parametrize("content", ["", "a b", "tokén", "tok\x00en", "x" * 5000])
async def test_push_malformed_token_file_exits_2(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, capsys: Capture, content: str
) -> None:
    async with setup(tmp_path) as s:
        s.token_file.write_text(content)
        assert await s.push(once=True) == 2
        assert s.lines == []
        assert "admin token file" in capsys.readouterr().err


@pytest.mark.parametrize("mode", [0o644, 0o620], ids=oct)
async def test_push_token_file_others_may_read_exits_2_naming_the_fix(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, capsys: Capture, mode: int
) -> None:
    async with setup(tmp_path) as s:
        s.token_file.chmod(mode)
        assert await s.push(once=True) == 2
        assert s.lines == []
        err = capsys.readouterr().err
        assert f"admin token file {s.token_file}: mode {mode:04o} lets others read it" in err
        assert f"run chmod 600 {s.token_file}" in err


async def test_push_max_failures_in_a_row_exits_1(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, capsys: Capture
) -> None:
    async with setup(tmp_path) as s:
        s.coordinator.fail_with = 503
        start = trio.current_time()
        assert await s.push(max_failures=4, interval=2.0) == 1
        assert trio.current_time() - start == 6.0
        assert [line["failures"] for line in s.lines] == [1, 2, 3, 4]
        assert "4 ticks failed in a row" in capsys.readouterr().err


async def test_push_runs_until_sigterm_and_exits_0(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with setup(tmp_path) as s:

        async def terminate_after_three_ticks() -> None:
            await trio.sleep(6.5)  # ticks at +0, +3, +6
            assert len(s.lines) == 3
            os.kill(os.getpid(), signal.SIGTERM)

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(terminate_after_three_ticks)
                start = trio.current_time()
                assert await s.push() == 0
                assert trio.current_time() - start == 6.5  # stopped at once: it was idle
        assert [line["pushed"] for line in s.lines] == [[1, 2, 3], [4], [5]]
        assert await s.coordinator.db.read(latest_round) == 5


async def test_push_usage_errors_exit_2(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, capsys: Capture
) -> None:
    async with setup(tmp_path) as s:
        assert await s.push(relays=(RELAYS[0],)) == 2
        assert "--relay: need at least 2 relays, got 1" in capsys.readouterr().err
    assert main(["beacon", "push", "--api", API, "--admin-token-file", "t", "--catch-up", "0"]) == 2
    assert main(["beacon", "push", "--api", API, "--admin-token-file", "t", "--chain", "nope"]) == 2
    assert "--chain" in capsys.readouterr().err


# --- check and verify ----------------------------------------------------------------------------


def test_check_offline_passes(capsys: Capture) -> None:
    assert main(["beacon", "check"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["result"] == "PASS"
    assert report["checks"] == {
        "chain_hash": True,
        "pinned_quicknet": True,
        "vector_1000000": True,
        "vector_20000000": True,
        "tampered_refused": True,
    }


async def test_live_check_pass_fail_censored(autojump_clock: trio.testing.MockClock) -> None:
    wall = VirtualClock(epoch=GENESIS)
    chain = make_chain(wall)
    apps = {
        "http://a": local_chain_app(chain),
        "http://b": local_chain_app(chain),
        "http://bad": tampering_app(local_chain_app(chain), make_chain(wall, seed=IMPOSTOR_SEED)),
        "http://down": down_app(502),
    }
    async with open_mounted_client(apps) as client:

        def check(urls: list[str], info: ChainInfo = chain.info) -> Awaitable[tuple[int, Any]]:
            return live_check(RelayClient(urls, info, client=client), budget=5.0)

        code, report = await check(["http://a", "http://b"])
        assert (code, report["result"], report["round"]) == (0, "PASS", 1)
        code, report = await check(["http://a", "http://bad"])
        assert (code, report["result"]) == (1, "FAIL")
        assert "http://bad: round 1: BLS" in report["reason"]
        code, report = await check(["http://a", "http://down"])
        assert (code, report["result"]) == (3, "CENSORED(network)")
        code, report = await check(
            ["http://a", "http://b"], make_chain(wall, seed=IMPOSTOR_SEED).info
        )
        assert (code, report["result"]) == (3, "CENSORED(network)")  # unknown chain: 404s


def test_verify_a_valid_and_a_tampered_round(tmp_path: Path, capsys: Capture) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps(unstructure(QUICKNET_VECTORS[0])))
    assert main(["beacon", "verify", str(good)]) == 0
    assert json.loads(capsys.readouterr().out)["valid"] is True
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps({**unstructure(QUICKNET_VECTORS[0]), "round": 1000001}))
    assert main(["beacon", "verify", str(tampered)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("hypertrain: invalid round: round 1000001: BLS signature does not")
    tampered.write_text('{"round": 3}')
    assert main(["beacon", "verify", str(tampered)]) == 1
    assert main(["beacon", "verify", str(tmp_path / "missing.json")]) == 2


# --- the real programs over loopback ------------------------------------------------------------


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "hypertrain", *args]


async def _first_line(process: trio.Process) -> dict[str, Any]:
    assert process.stdout is not None
    data = b""
    while not data.endswith(b"\n"):
        chunk = await process.stdout.receive_some(4096)
        assert chunk, "the program ended before printing its line"
        data += chunk
    return dict(json.loads(data))


@asynccontextmanager
async def local_relay(state_dir: Path) -> AsyncIterator[dict[str, Any]]:
    """``beacon local serve`` on 127.0.0.1 port 0 with a 1 s period; yields its JSON line.

    Two relays asked for ``latest`` at once each answer from their own clock, and the client
    accepts answers up to two rounds apart: with 1 s rounds one loaded relay process may answer
    up to 2 s after the other (with 0.5 s rounds, only 1 s)."""
    args = _cli("beacon", "local", "serve", "--state-dir", str(state_dir), "--period", "1")
    process = await trio.lowlevel.open_process(args, stdout=subprocess.PIPE, cwd=REPO)
    try:
        yield await _first_line(process)
        process.send_signal(signal.SIGTERM)
        assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_the_real_pusher_against_real_local_relays(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    with trio.fail_after(60):
        async with (
            local_relay(tmp_path / "chain") as one,
            local_relay(tmp_path / "chain") as two,
            open_database(tmp_path / "coord.db") as db,
            trio.open_nursery() as nursery,
        ):
            assert one["info"] == two["info"]
            assert one["url"].startswith("http://127.0.0.1:")
            (tmp_path / "info.json").write_text(json.dumps(one["info"]))
            chain_info = make_chain(SystemClock()).info.from_json(one["info"])
            coordinator = CoordinatorApp(db, chain_info, TOKEN, SystemClock())
            api = await nursery.start(serve_asgi, coordinator, "127.0.0.1", 0)
            info_file = str(tmp_path / "info.json")
            push = _cli(
                "beacon", "push", "--api", api, "--admin-token-file", str(token_file),
                "--relay", one["url"], "--relay", two["url"], "--chain", info_file,
            )  # fmt: skip
            done = await trio.run_process([*push, "--once"], capture_stdout=True, check=False)
            assert done.returncode == 0
            line = json.loads(done.stdout)
            assert line["known"] == 0
            assert line["pushed"] == list(range(max(1, line["latest"] - 19), line["latest"] + 1))
            check = _cli(
                "beacon", "check", "--live", "--relay", one["url"], "--relay", two["url"],
                "--chain", str(tmp_path / "info.json"),
            )  # fmt: skip
            done = await trio.run_process(check, capture_stdout=True, check=False)
            assert (done.returncode, json.loads(done.stdout)["result"]) == (0, "PASS")
            running = await trio.lowlevel.open_process(
                [*push, "--interval", "0.5"], stdout=subprocess.PIPE, cwd=REPO
            )
            first = await _first_line(running)
            assert first["known"] >= line["latest"]
            running.send_signal(signal.SIGTERM)
            assert await running.wait() == 0
            assert await db.read(latest_round) >= first["latest"]
            nursery.cancel_scope.cancel()


_TIMED_MAIN = """
import sys, time
from hypertrain.cli import main
start = time.monotonic()
code = main(sys.argv[1:])
print(f"elapsed {time.monotonic() - start}", file=sys.stderr)
raise SystemExit(code)
"""
"""The umbrella CLI's ``main`` in a child that times ``main`` itself: interpreter start-up and
imports (seconds on a loaded machine, nothing the command controls) stay out of the measure."""


def test_check_live_without_network_exits_3_within_its_timeout() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _TIMED_MAIN, "beacon", "check", "--live", "--timeout", "4"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 3, done.stderr
    assert json.loads(done.stdout)["result"] == "CENSORED(network)"
    elapsed = float(done.stderr.splitlines()[-1].removeprefix("elapsed "))
    # The budget, plus what main does outside it (one HTTP client, the report: well under 0.1 s
    # of CPU), with room for that work to get a thirtieth of a core.
    assert elapsed < 4 + 3.0


def test_check_offline_of_a_chain_file(tmp_path: Path, capsys: Capture) -> None:
    info = make_chain(SystemClock()).info.to_json()
    chain_file = tmp_path / "info.json"
    chain_file.write_text(json.dumps(info))
    assert main(["beacon", "check", "--chain", str(chain_file)]) == 0
    assert json.loads(capsys.readouterr().out)["checks"] == {"chain_hash": True}
    chain_file.write_text(json.dumps({**info, "hash": "0" * 64}))
    assert main(["beacon", "check", "--chain", str(chain_file)]) == 1
    assert json.loads(capsys.readouterr().out)["result"] == "FAIL"
    chain_file.write_text(json.dumps({**info, "period": "3"}))
    assert main(["beacon", "check", "--chain", str(chain_file)]) == 2
    assert "--chain" in capsys.readouterr().err


def test_local_serve_on_a_busy_port_is_a_usage_error(tmp_path: Path, capsys: Capture) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        args = ["beacon", "local", "serve", "--state-dir", str(tmp_path), "--port", port]
        assert main(args) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


def test_python_dash_m_hypertrain_beacon_is_the_beacon_group() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hypertrain.beacon", "check"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"] == "PASS"
