"""The real ``hypertrain-daemon`` program as a subprocess, on real loopback sockets."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import trio

from hypertrain.protocol.keys import write_seed_file

DAEMON = Path(sys.executable).with_name("hypertrain-daemon")
GRACE = 3.0
STARTUP_TIMEOUT = 30.0
REQUEST_TIMEOUT = httpx.Timeout(5.0)
# A hang guard, not a timing assertion: the daemon's own shutdown is bounded by the grace (the
# log shows it finished without the grace cancelling anything); what follows is interpreter
# teardown (torch's modules included), which on a busy machine takes seconds of wall time.
EXIT_MARGIN = 60.0


def _fresh_env(tmp_path: Path) -> dict[str, str]:
    """The operator guide's local server: fresh secrets in ``tmp_path``, mode 0600."""
    secret_dir = tmp_path / "secrets"
    secret_dir.mkdir(mode=0o700, parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHALLENGE_", "HYPERTRAIN_"))}
    for name in ("internal", "admin", "worker"):
        path = secret_dir / f"{name}_token"
        path.write_text(secrets.token_hex(32) + "\n")
        path.chmod(0o600)
        env[f"CHALLENGE_{name.upper()}_TOKEN_FILE"] = str(path)
    write_seed_file(secret_dir / "coord.key", secrets.token_bytes(32))
    env["HYPERTRAIN_COORD_KEY_FILE"] = str(secret_dir / "coord.key")
    env["CHALLENGE_STATE_DIR"] = str(tmp_path / "data")
    return env


async def _read_line(stream: trio.abc.ReceiveStream) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = await stream.receive_some(1)
        if not chunk:
            break
        data += chunk
    return data.decode()


async def test_daemon_serves_health_and_exits_0_on_sigterm_within_the_grace(
    tmp_path: Path,
) -> None:
    stderr_path = tmp_path / "stderr.log"
    argv = [str(DAEMON), "--port", "0", "--beacon", "local", "--local-period", "0.5"]
    argv += ["--grace", str(GRACE)]
    stderr = stderr_path.open("wb")  # the child writes its log here; closed once it started
    try:
        process = await trio.lowlevel.open_process(
            argv, env=_fresh_env(tmp_path), stdout=subprocess.PIPE, stderr=stderr
        )
    finally:
        stderr.close()
    try:
        assert process.stdout is not None
        with trio.fail_after(STARTUP_TIMEOUT):
            line = await _read_line(process.stdout)
        assert line.startswith("hypertrain-daemon listening on http://127.0.0.1:"), line
        url = line.split()[-1]
        async with httpx.AsyncClient(base_url=url, timeout=REQUEST_TIMEOUT) as client:
            health = await client.get("/health")
            assert health.status_code == 200
            assert health.json()["ok"] is True
            assert health.json()["ledger"]["minted"] == 0  # the daemon opened its ledger
            assert (await client.get("/v1/beacon/latest")).json()["round"] >= 1
            async with client.stream("GET", "/v1/events", timeout=httpx.Timeout(30.0)) as sse:
                assert sse.status_code == 200
                received = b""
                with trio.fail_after(GRACE):
                    async for chunk in sse.aiter_raw():
                        if not received:
                            process.send_signal(signal.SIGTERM)
                        received += chunk
                # The stream ended (stopping) well before the grace would have cut it.
                assert received.startswith(b": connected\n\n")
        with trio.fail_after(GRACE + EXIT_MARGIN):
            code = await process.wait()
        log = stderr_path.read_text()
        assert code == 0, log
        assert "SIGTERM received" in log
        assert "shut down (signal: SIGTERM)" in log
        assert "shutdown cancelled the remaining work" not in log
    finally:
        if process.returncode is None:
            process.kill()
            with trio.move_on_after(EXIT_MARGIN):
                await process.wait()


async def _run_config_error(argv: list[str], tmp_path: Path) -> tuple[int, str]:
    with trio.fail_after(STARTUP_TIMEOUT):
        result = await trio.run_process(
            [str(DAEMON), *argv],
            env={**_fresh_env(tmp_path), "CHALLENGE_STATE_DIR": str(tmp_path / "unused")},
            check=False,
            capture_stdout=True,
            capture_stderr=True,
        )
    assert result.stdout == b""
    return result.returncode, result.stderr.decode()


async def test_bad_config_exits_2_with_one_line(tmp_path: Path) -> None:
    toml = tmp_path / "daemon.toml"
    toml.write_text("port = 8000\nsurprise = true\n")
    code, err = await _run_config_error(["--config", str(toml)], tmp_path)
    assert code == 2
    assert err.count("\n") == 1
    assert err.startswith("hypertrain-daemon: error: ")
    assert "unknown key 'surprise'" in err
    code, err = await _run_config_error(["--port", "70000"], tmp_path / "2")
    assert (code, err) == (
        2,
        "hypertrain-daemon: error: --port: expected an integer 0..65535, got 70000\n",
    )
    assert not (tmp_path / "unused").exists()
    assert not (tmp_path / "2" / "unused").exists()


def test_the_program_starts_without_importing_torch() -> None:
    # A daemon restarted after a crash listens once its imports are done; torch alone takes
    # seconds to import and only the held-out loss needs it (imported there, when first used).
    probe = "import sys, hypertrain.daemon.main; print('torch' in sys.modules)"
    root = Path(__file__).resolve().parents[2]
    env = os.environ | {"PYTHONPATH": str(root)}
    result = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=False
    )
    assert (result.returncode, result.stdout) == (0, "False\n"), result.stderr


def test_the_daemon_does_not_import_the_test_tools() -> None:
    """The program imports neither ``trio.testing`` nor pytest (which ``trio.testing`` imports
    when it is installed): a production install pays for neither, and a bad flag answers fast."""
    probe = (
        "import sys, hypertrain.daemon.main;"
        " print(sorted({'pytest', 'trio.testing'} & set(sys.modules)))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    result = subprocess.run(
        [sys.executable, "-c", probe],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert result.stdout.strip() == "[]"


async def test_metrics_on_their_own_listener_and_json_access_lines(tmp_path: Path) -> None:
    """``--metrics-bind``: ``/metrics`` on its own listener (the API's answers 404), counting
    the API's requests by route; ``--log-format json --access-log``: one JSON object a line,
    the access lines with their route and status."""
    stderr_path = tmp_path / "stderr.log"
    argv = [str(DAEMON), "--port", "0", "--beacon", "local", "--local-period", "0.5"]
    argv += ["--grace", str(GRACE), "--metrics-bind", "127.0.0.1:0"]
    argv += ["--log-format", "json", "--access-log"]
    with stderr_path.open("wb") as stderr:
        process = await trio.lowlevel.open_process(
            argv, env=_fresh_env(tmp_path), stdout=subprocess.PIPE, stderr=stderr
        )
    try:
        assert process.stdout is not None
        with trio.fail_after(STARTUP_TIMEOUT):
            api = (await _read_line(process.stdout)).split()[-1]
            line = await _read_line(process.stdout)
        assert line.startswith("hypertrain-daemon metrics on http://127.0.0.1:"), line
        metrics = line.split()[-1]
        assert metrics.endswith("/metrics"), metrics
        assert not metrics.startswith(api), (api, metrics)
        async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT) as client:
            assert (await client.get(f"{api}/health")).status_code == 200
            assert (await client.get(f"{api}/v1/runs/ab12")).status_code == 404
            assert (await client.get(f"{api}/metrics")).status_code == 404
            text = (await client.get(metrics)).text
        assert 'hypertrain_http_requests_total{method="GET",route="/health",status="200"} 1.0' in (
            text
        )
        assert 'route="/v1/runs/<run_id>",status="404"} 1.0' in text
        assert 'route="unmatched",status="404"} 1.0' in text  # the API's /metrics
        assert "hypertrain_beacon_lag_rounds " in text
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(GRACE + EXIT_MARGIN):
            code = await process.wait()
        assert code == 0, stderr_path.read_text()
        lines = [json.loads(x) for x in stderr_path.read_text().splitlines()]
        access = [x for x in lines if x["logger"] == "hypertrain.access"]
        shown = [(x["method"], x["route"], x["status"]) for x in access]
        assert shown == [
            ("GET", "/health", 200),
            ("GET", "/v1/runs/<run_id>", 404),
            ("GET", "unmatched", 404),
        ]
        assert all({"time", "level", "message", "duration_ms"} <= set(x) for x in access)
    finally:
        if process.returncode is None:
            process.kill()
            with trio.move_on_after(EXIT_MARGIN):
                await process.wait()


async def test_a_bad_metrics_bind_exits_2_with_one_line(tmp_path: Path) -> None:
    code, err = await _run_config_error(["--metrics-bind", "localhost:9100"], tmp_path)
    assert (code, err) == (
        2,
        "hypertrain-daemon: error: --metrics-bind: expected HOST:PORT with an IP address as HOST"
        " (127.0.0.1:9100, [::1]:9100), got 'localhost:9100'\n",
    )


async def test_a_metrics_address_in_use_exits_2_naming_it(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["--port", "0", "--beacon", "local", "--metrics-bind", f"127.0.0.1:{port}"]
        code, err = await _run_config_error(argv, tmp_path)
    assert code == 2, err
    last = err.splitlines()[-1]  # after the log lines of the start (the API listened)
    assert last == (
        f"hypertrain-daemon: error: --metrics-bind 127.0.0.1:{port}: cannot listen"
        " (Address already in use)"
    )
