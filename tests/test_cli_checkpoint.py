"""``hypertrain verify-checkpoint`` and ``hypertrain checkpoint fetch`` (cli/checkpoint.py):
exit statuses 0/1/2/3, output shapes, and fetch against an in-process fake daemon."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from hypertrain.aggregator.checkpoint import (
    FILES,
    LINEAGE_FILE,
    MANIFEST_FILE,
    MODEL_FILE,
    build_checkpoint,
    parse_manifest,
)
from hypertrain.aggregator.checkpoint_client import CheckpointClient, fetch_checkpoint
from hypertrain.aggregator.outerstate import unpack_outer
from hypertrain.aggregator.remote_client import DaemonUnreachable, Retry, RetryableStatus
from hypertrain.cli import build_parser, main
from hypertrain.cli.checkpoint import fetch_main, verify_main
from hypertrain.coordinator.tables.checkpoints import CheckpointRow
from nurseries import Backoff
from tests.aggregator.chain import COORD, INFO_OF, OTHER, Chain, make_chain

Capture = pytest.CaptureFixture[str]
ONCE = Retry(budget=0.0)
Files = dict[str, bytes]


@pytest.fixture(scope="module")
def chain() -> Chain:
    return make_chain(rounds=3)


def write_dir(path: Path, files: Files) -> Path:
    path.mkdir()
    for name, data in files.items():
        (path / name).write_bytes(data)
    return path


def write_store(root: Path, store: dict[str, bytes], *, nested: bool) -> Path:
    for key, data in store.items():
        path = root / key[:2] / key if nested else root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def run(capsys: Capture, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def verified(out: str) -> dict[str, object]:
    (line,) = out.splitlines()
    result = json.loads(line)
    assert result["result"] == "VERIFIED"
    return dict(result)


def failed_checks(code: int, out: str, err: str) -> list[str]:
    assert code == 1
    (line,) = out.splitlines()
    result = json.loads(line)
    assert result["result"] == "FAIL"
    assert err.splitlines() == [line for line in err.splitlines() if line.startswith("FAIL ")]
    assert [line.split(":")[0].removeprefix("FAIL ") for line in err.splitlines()] == [
        name.split(":")[0] for name in result["failed"]
    ]
    return list(result["failed"])


def test_a_good_checkpoint_is_verified(chain: Chain, tmp_path: Path, capsys: Capture) -> None:
    ckpt = write_dir(tmp_path / "ckpt", chain.checkpoint())
    code, out, _ = run(capsys, "verify-checkpoint", str(ckpt), "--signer", COORD.ss58)
    assert code == 0
    result = verified(out)
    assert (result["rounds"], result["replayed"]) == ([0, 2], False)


@pytest.mark.parametrize("nested", [True, False])
def test_replay_from_an_object_directory(
    chain: Chain, tmp_path: Path, capsys: Capture, nested: bool
) -> None:
    ckpt = write_dir(tmp_path / "ckpt", chain.checkpoint())
    objects = write_store(tmp_path / "objects", chain.store, nested=nested)
    code, out, _ = run(
        capsys, "verify-checkpoint", str(ckpt), "--replay", "--objects", str(objects)
    )
    assert code == 0
    assert verified(out)["replayed_rounds"] == 3


def test_a_missing_object_fails_replay(chain: Chain, tmp_path: Path, capsys: Capture) -> None:
    ckpt = write_dir(tmp_path / "ckpt", chain.checkpoint())
    missing = chain.tapes()[2].body.inputs[1].object
    store = {k: v for k, v in chain.store.items() if k != missing}
    objects = write_store(tmp_path / "objects", store, nested=True)
    code, out, err = run(
        capsys, "verify-checkpoint", str(ckpt), "--replay", "--objects", str(objects)
    )
    assert failed_checks(code, out, err) == [f"object:{missing}"]
    assert "tape w=2 inputs[1].object" in err


def test_failures_are_named(chain: Chain, tmp_path: Path, capsys: Capture) -> None:
    extra = write_dir(tmp_path / "extra", {**chain.checkpoint(), "README": b"hello"})
    assert failed_checks(*run(capsys, "verify-checkpoint", str(extra))) == ["files"]
    provisional = write_dir(tmp_path / "prov", chain.checkpoint("provisional"))
    code, out, err = run(capsys, "verify-checkpoint", str(provisional))
    assert failed_checks(code, out, err) == ["status"]
    assert "provisional" in err
    other = write_dir(tmp_path / "other", chain.checkpoint(key=OTHER))
    code, out, err = run(capsys, "verify-checkpoint", str(other), "--signer", COORD.ss58)
    assert failed_checks(code, out, err) == ["signer", "lineage.signature"]


def test_a_subdirectory_or_symlink_is_an_extra_entry_never_followed(
    chain: Chain, tmp_path: Path, capsys: Capture
) -> None:
    files = chain.checkpoint()
    sub = write_dir(tmp_path / "sub", files)
    (sub / "more").mkdir()
    code, out, err = run(capsys, "verify-checkpoint", str(sub))
    assert failed_checks(code, out, err) == ["files"]
    assert "more (a directory)" in err
    real = write_dir(tmp_path / "real", {MODEL_FILE: files[MODEL_FILE]})
    linked = write_dir(tmp_path / "linked", {n: b for n, b in files.items() if n != MODEL_FILE})
    os.symlink(real / MODEL_FILE, linked / MODEL_FILE)
    code, out, err = run(capsys, "verify-checkpoint", str(linked))
    assert failed_checks(code, out, err) == ["files"]
    assert "model.safetensors (a symbolic link)" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["--replay"],
        ["--replay", "--api", "http://127.0.0.1:1", "--objects", "."],
        ["--api", "http://127.0.0.1:1"],
        ["--objects", "."],
        ["--signer", "not-an-address"],
        ["--replay", "--objects", "/nonexistent-objects"],
    ],
)
def test_usage_errors_exit_2(
    chain: Chain, tmp_path: Path, capsys: Capture, argv: list[str]
) -> None:
    ckpt = write_dir(tmp_path / "ckpt", chain.checkpoint())
    code, out, err = run(capsys, "verify-checkpoint", str(ckpt), *argv)
    assert (code, out, len(err.splitlines())) == (2, "", 1)


def test_not_a_directory_exits_2(tmp_path: Path, capsys: Capture) -> None:
    code, out, err = run(capsys, "verify-checkpoint", str(tmp_path / "none"))
    assert (code, out) == (2, "")
    assert err.strip().endswith("not a directory")


@contextmanager
def _refusing_url() -> Iterator[str]:
    """A loopback URL whose port refuses connections for the block: a socket bound to it that
    never listens holds it, so no other process can take it meanwhile."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_an_unreachable_daemon_exits_3(chain: Chain, tmp_path: Path, capsys: Capture) -> None:
    ckpt = write_dir(tmp_path / "ckpt", chain.checkpoint())
    with _refusing_url() as api:
        args = _args("verify-checkpoint", str(ckpt), "--replay", "--api", api)
        assert verify_main(args, retry=ONCE) == 3
        out, err = capsys.readouterr()
        assert out == ""
        assert err.startswith("hypertrain: daemon unreachable")
        assert len(err.splitlines()) == 1
        fetch = _args("checkpoint", "fetch", "--api", api, "--run-id", "a" * 64, "--out", "x")
        assert fetch_main(fetch, retry=ONCE) == 3
        assert capsys.readouterr().err.startswith("hypertrain: daemon unreachable")


class FakeDaemon:
    """The daemon's public checkpoint routes over a chain: checkpoints w=1 and w=2."""

    def __init__(self, chain: Chain) -> None:
        self.run_id = chain.manifest.run_id()
        self.store = dict(chain.store)
        tapes = chain.tapes()
        theta_1 = unpack_outer(chain.store[chain.steps[1].out_state]).theta
        self.checkpoints = {
            1: build_checkpoint(
                COORD,
                status="final",
                tapes=tapes[:2],
                theta=theta_1,
                model=chain.manifest.model,
                info=INFO_OF(chain.manifest),
            ),
            2: chain.checkpoint("provisional"),
        }
        self.served: dict[int, Files] = {w: dict(f) for w, f in self.checkpoints.items()}

    def listing(self) -> dict[str, object]:
        items = []
        for w, files in sorted(self.checkpoints.items()):
            body = parse_manifest(files[MANIFEST_FILE]).body
            keys = {n: hashlib.sha256(b).hexdigest() for n, b in files.items()}
            row = CheckpointRow(  # the daemon's listing entry, as it serves it
                run_id=self.run_id,
                w=w,
                status=body.status,
                theta_hash=body.theta_hash,
                manifest_key=keys[MANIFEST_FILE],
                lineage_key=keys[LINEAGE_FILE],
                model_key=keys[MODEL_FILE],
                tapes=(),
                written_round=100 + w,
            )
            items.append(row.listing())
        return {"run_id": self.run_id, "checkpoints": items}

    def handler(self, request: httpx.Request) -> httpx.Response:
        parts = request.url.path.strip("/").split("/")
        if parts[:3] != ["v1", "runs", self.run_id] or parts[3:4] != ["checkpoints"]:
            return httpx.Response(404, json={"detail": "unknown run"})
        if len(parts) == 4:
            return httpx.Response(200, json=self.listing())
        w = int(parts[4])
        if w not in self.served:
            return httpx.Response(404, json={"detail": f"no checkpoint at w={w}"})
        if len(parts) == 7 and parts[5] == "objects" and parts[6] in self.store:
            return httpx.Response(200, content=self.store[parts[6]])
        if len(parts) == 6 and parts[5] in self.served[w]:
            return httpx.Response(200, content=self.served[w][parts[5]])
        return httpx.Response(404, json={"detail": "no such object"})

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handler)


@pytest.fixture(scope="module")
def daemon(chain: Chain) -> FakeDaemon:
    return FakeDaemon(chain)


def test_replay_from_the_daemon(chain: Chain, daemon: FakeDaemon, tmp_path: Path) -> None:
    ckpt = write_dir(tmp_path / "ckpt", chain.checkpoint())
    args = _args("verify-checkpoint", str(ckpt), "--replay", "--api", "http://d")
    assert verify_main(args, transport=daemon.transport(), retry=ONCE) == 0


def _fetch(
    daemon: FakeDaemon, *argv: str, transport: Callable[[], httpx.MockTransport] | None = None
) -> int:
    args = _args("checkpoint", "fetch", "--api", "http://d", "--run-id", daemon.run_id, *argv)
    made = (transport or daemon.transport)()
    return fetch_main(args, transport=made, retry=ONCE)


def test_fetch_the_newest_and_a_chosen_one(
    daemon: FakeDaemon, tmp_path: Path, capsys: Capture
) -> None:
    out = tmp_path / "deep" / "newest"
    assert _fetch(daemon, "--out", str(out)) == 0
    line = json.loads(capsys.readouterr().out)
    assert (line["w"], line["status"], line["out"]) == (2, "provisional", str(out))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == daemon.checkpoints[2]
    assert line["files"] == {
        n: hashlib.sha256(b).hexdigest() for n, b in daemon.checkpoints[2].items()
    }
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _fetch(daemon, "--out", str(empty), "--w", "1") == 0
    assert sorted(p.name for p in empty.iterdir()) == sorted(FILES)
    assert json.loads(capsys.readouterr().out)["status"] == "final"
    assert main(["verify-checkpoint", str(empty)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep", "empty"]


def test_fetch_refuses_a_non_empty_out(daemon: FakeDaemon, tmp_path: Path, capsys: Capture) -> None:
    out = tmp_path / "full"
    out.mkdir()
    (out / "x").write_bytes(b"")
    assert _fetch(daemon, "--out", str(out)) == 2
    assert "not empty" in capsys.readouterr().err


def test_fetch_refuses_a_file_that_is_not_the_listing_s(
    chain: Chain, tmp_path: Path, capsys: Capture
) -> None:
    bad = FakeDaemon(chain)
    model = bytearray(bad.served[2][MODEL_FILE])
    model[-1] ^= 1
    bad.served[2][MODEL_FILE] = bytes(model)
    assert _fetch(bad, "--out", str(tmp_path / "out")) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "model.safetensors: the bytes hash to" in err
    assert list(tmp_path.iterdir()) == []  # no out, no temporary directory left


def test_fetch_404_and_a_bad_listing_exit_1(
    daemon: FakeDaemon, tmp_path: Path, capsys: Capture
) -> None:
    assert _fetch(daemon, "--out", str(tmp_path / "a"), "--w", "7") == 1
    assert "no checkpoint at w=7" in capsys.readouterr().err

    def not_found() -> httpx.MockTransport:
        return httpx.MockTransport(lambda _r: httpx.Response(404, json={"detail": "unknown run"}))

    assert _fetch(daemon, "--out", str(tmp_path / "b"), transport=not_found) == 1
    assert "HTTP 404: unknown run" in capsys.readouterr().err

    def garbled() -> httpx.MockTransport:
        return httpx.MockTransport(lambda _r: httpx.Response(200, json={"run_id": "x"}))

    assert _fetch(daemon, "--out", str(tmp_path / "c"), transport=garbled) == 1
    assert "listing is not valid" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_broken_download_is_retried_from_the_start(daemon: FakeDaemon, tmp_path: Path) -> None:
    calls: list[str] = []

    def flaky(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if request.url.path.endswith(MODEL_FILE) and calls.count(request.url.path) == 1:
            return httpx.Response(503, json={"detail": "busy"})
        return daemon.handler(request)

    retry = Retry(budget=1.0, backoff=Backoff(initial=0.0, maximum=0.0))
    with CheckpointClient("http://d", transport=httpx.MockTransport(flaky), retry=retry) as client:
        fetched = fetch_checkpoint(client, daemon.run_id, tmp_path / "out", w=2)
    assert (
        fetched.files[MODEL_FILE] == hashlib.sha256(daemon.checkpoints[2][MODEL_FILE]).hexdigest()
    )
    assert sum(p.endswith(MODEL_FILE) for p in calls) == 2


def test_the_synchronous_client_retries_on_the_shared_schedule_until_its_budget() -> None:
    """Always 503 with ``Retry-After: 3``, a budget of 9 s, jitter draws of 1: tries at 0, 3
    (the server's 3 s over 1), 6 (3 over 2), 9 (4 shortened to the budget's end), then
    DaemonUnreachable caused by the last 503."""
    now = [100.0]
    tried: list[float] = []

    def busy(request: httpx.Request) -> httpx.Response:
        tried.append(now[0] - 100.0)
        return httpx.Response(503, headers={"Retry-After": "3"}, json={"detail": "busy"})

    def sleep(seconds: float) -> None:
        now[0] += seconds

    retry = Retry(budget=9.0, backoff=Backoff(initial=1.0, maximum=30.0), draw=lambda: 1.0)
    with (
        CheckpointClient(
            "http://d", transport=httpx.MockTransport(busy), retry=retry, sleep=sleep,
            clock=lambda: now[0],
        ) as client,
        pytest.raises(DaemonUnreachable, match="after 4 tries") as caught,
    ):  # fmt: skip
        client.listing("ab" * 32)
    assert tried == [0.0, 3.0, 6.0, 9.0]
    assert isinstance(caught.value.__cause__, RetryableStatus)
