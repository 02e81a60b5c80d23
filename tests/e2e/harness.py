"""Real processes on real sockets: a ``hypertrain-daemon`` and ``hypertrain-miner`` children.

:func:`open_daemon` starts ``python -m hypertrain.daemon --port 0 --beacon local --local-period 1``
with fresh secrets in a temporary directory (as the operator guide does), reads the
``hypertrain-daemon listening on URL`` line and always kills the process on exit.
:func:`launch_run` creates, configures, rosters and unpauses a run over the admin API with a
tiny model over :func:`build_tiny_dataset`. :class:`MinerProcess` runs
``python -m hypertrain.miner run --config miner.toml`` with its stdout and stderr in files.

Every wait here is bounded (``trio.fail_after``) and polls files, so no pipe can fill up.
"""

from __future__ import annotations

import json
import secrets
import signal
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import attrs
import httpx
import trio

from hypertrain.beacon import ChainInfo
from hypertrain.datasets import BuildOptions, DatasetManifest, SourceRoot, build
from hypertrain.datasets.manifest import MANIFEST_FILE, load_record
from hypertrain.datasets.tokenizer import VOCAB
from hypertrain.demo.children import child_env
from hypertrain.miner.journal import JOURNAL_FILE
from hypertrain.protocol.envelope import NEVER, seal
from hypertrain.protocol.keys import Keypair, write_seed_file
from hypertrain.protocol.manifest import Beacon, RunManifest
from hypertrain.protocol.testmode import TEST_TIMEOUTS, decoder_param_count
from hypertrain.trainer.params import init_state_hash
from tests.trainer.helpers import TINY_DIMS, in_process_env, tiny_manifest

STARTUP_TIMEOUT: Final = 30.0
"""Seconds for the daemon to print its URL."""
POLL: Final = 0.05
"""Seconds between two looks at a file or a process."""
KILL_WAIT: Final = 10.0
"""Seconds to reap a killed child."""
SEQ_LEN: Final = 16
TRAIN_ROUNDS: Final = 120
"""drand rounds (1 s each) between d_assign and d_commit: room for the children's start-up.

Real time, sized from the work: before the last commit the sigkill test's children do ~25 s of
CPU (ten miner start-ups, each importing torch, and five trainings); 120 s leaves all of them
together a fifth of a core. With 40 a loaded 2-core machine let a miner reach d_commit before
it had even accepted. A window that ends later costs nothing when the machine is fast: miners
commit and upload as soon as they are done."""
ROUND_TIMEOUT: Final = float(
    TEST_TIMEOUTS["assign_after_open"] + TRAIN_ROUNDS + TEST_TIMEOUTS["upload_after_commit"] + 10
)
"""Seconds a test waits for its miners after the run is launched: until d_upload of round 0
(after it nothing they do can count), and 10 s for them to report and exit."""
_TEXT: Final = "".join(
    f"line {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(400)
)


async def wait_until(
    predicate: Callable[[], bool], what: str, limit: float, context: Callable[[], str]
) -> None:
    """Poll ``predicate`` every :data:`POLL` s (files and children have no event to wait on);
    after ``limit`` seconds fail, naming ``what`` and showing ``context()``."""
    with trio.move_on_after(limit):
        while True:
            if predicate():
                return
            await trio.sleep(POLL)
    raise AssertionError(f"timed out after {limit} s waiting for {what}\n{context()}")


async def _kill(process: trio.Process) -> None:
    with trio.CancelScope(shield=True):
        if process.returncode is None:
            process.kill()
            with trio.move_on_after(KILL_WAIT):
                await process.wait()


@attrs.define
class Daemon:
    """A running daemon: its URL, the owner key it trusts, its K_coord and admin token."""

    url: str
    owner: Keypair
    coord: Keypair
    admin_token: str
    log: Path

    @property
    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_token}"}


@asynccontextmanager
async def open_daemon(root: Path) -> AsyncIterator[Daemon]:
    """A ``hypertrain-daemon`` child on a free 127.0.0.1 port with fresh secrets in ``root``."""
    secret_dir = root / "secrets"
    secret_dir.mkdir(mode=0o700, parents=True)
    tokens = {name: secrets.token_hex(32) for name in ("internal", "admin", "worker")}
    env = child_env({})
    for name, token in tokens.items():
        path = secret_dir / f"{name}_token"
        path.write_text(token + "\n")
        path.chmod(0o600)
        env[f"CHALLENGE_{name.upper()}_TOKEN_FILE"] = str(path)
    owner, coord = (
        Keypair.from_seed(secrets.token_bytes(32)),
        Keypair.from_seed(secrets.token_bytes(32)),
    )
    write_seed_file(secret_dir / "coord.key", coord.seed)
    env |= {
        "HYPERTRAIN_COORD_KEY_FILE": str(secret_dir / "coord.key"),
        "HYPERTRAIN_OWNER_HOTKEY": owner.ss58,
        "CHALLENGE_STATE_DIR": str(root / "state"),
    }
    out, log = root / "daemon.out", root / "daemon.log"
    argv = [sys.executable, "-m", "hypertrain.daemon", "--port", "0", "--beacon", "local"]
    argv += ["--local-period", "1"]
    with out.open("wb") as stdout, log.open("wb") as stderr:
        process = await trio.lowlevel.open_process(argv, env=env, stdout=stdout, stderr=stderr)
    try:
        prefix = "hypertrain-daemon listening on "

        def url() -> str | None:
            for line in out.read_text().splitlines():
                if line.startswith(prefix):
                    return line[len(prefix) :].strip()
            return None

        await wait_until(
            lambda: url() is not None or process.poll() is not None,
            "the daemon's URL",
            STARTUP_TIMEOUT,
            log.read_text,
        )
        found = url()
        assert found is not None, f"the daemon exited {process.returncode}: {log.read_text()}"
        assert found.startswith("http://127.0.0.1:"), found
        yield Daemon(found, owner, coord, tokens["admin"], log)
    finally:
        await _kill(process)


def build_tiny_dataset(root: Path) -> Path:
    """A tiny built dataset (byte tokens, seq_len 16, 64 samples a shard) under ``root``."""
    source = root / "corpus.txt"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text(_TEXT, encoding="utf-8")
    out = root / "data"
    build(
        BuildOptions(
            sources=(SourceRoot(source, "corpus"),),
            out=out,
            seq_len=SEQ_LEN,
            samples_per_shard=64,
            salt=b"s" * 32,
        )
    )
    return out


def tiny_run_manifest(data_dir: Path) -> RunManifest:
    """The tiny CPU manifest (the miner tests' one) over ``data_dir``; coord and beacon unset."""
    record = load_record(DatasetManifest, data_dir / MANIFEST_FILE)
    base = tiny_manifest(env=in_process_env())
    dims = decoder_param_count(vocab=VOCAB, **TINY_DIMS)
    model = attrs.evolve(base.model, vocab=VOCAB, seq_len=SEQ_LEN, param_count=dims)
    return attrs.evolve(
        base, model=model, dataset=record.dataset_spec(), init_state_hash=init_state_hash(model)
    )


async def launch_run(
    client: httpx.AsyncClient, daemon: Daemon, manifest: RunManifest, miners: Sequence[Keypair]
) -> str:
    """Create the run (sealed by the owner, naming the daemon's chain), configure, admit
    ``miners`` and unpause it (round 0 opens); returns the run id."""
    info = ChainInfo.from_json((await client.get("/v1/beacon/info")).json())
    beacon = Beacon(
        chain_hash=info.hash, period=info.period_ms // 1000, genesis_time=info.genesis_ms // 1000
    )
    manifest = attrs.evolve(manifest, coord_pubkey=daemon.coord.ss58, beacon=beacon)
    envelope = seal(daemon.owner, "RunManifest", manifest.run_id(), manifest, NEVER).to_json()
    created = await client.post("/v1/admin/runs", json=envelope, headers=daemon.admin)
    assert created.status_code == 201, created.text
    run_id: str = created.json()["run_id"]
    base = f"/v1/admin/runs/{run_id}"
    steps: list[tuple[str, object]] = [
        (f"{base}/config", {"train_rounds": TRAIN_ROUNDS, "final_after_upload": 5}),
        *((f"{base}/roster/{key.ss58}", {}) for key in miners),
        (f"{base}/paused", {"paused": False}),
    ]
    for path, body in steps:
        r = await client.put(path, json=body, headers=daemon.admin)
        assert r.status_code == 200, r.text
    return run_id


@attrs.define
class MinerProcess:
    """One miner's home (key, miner.toml, workdir) and its ``hypertrain-miner run`` children."""

    home: Path
    key: Keypair
    process: trio.Process | None = None
    runs: int = 0

    @classmethod
    def create(cls, root: Path, api: str, data_dir: Path) -> MinerProcess:
        key = Keypair.from_seed(secrets.token_bytes(32))
        home = root / key.ss58[:10]
        home.mkdir(parents=True)
        write_seed_file(home / "miner.key", key.seed)
        (home / "miner.toml").write_text(
            f'api = "{api}"\nkeyfile = "miner.key"\nworkdir = "work"\n'
            f'data_dir = "{data_dir}"\npoll_seconds = 0.5\nchunk_bytes = 4096\n',
            encoding="utf-8",
        )
        return cls(home, key)

    @property
    def workdir(self) -> Path:
        return self.home / "work"

    @property
    def round_dir(self) -> Path:
        return self.workdir / "rounds" / "0"

    def stderr(self, run: int | None = None) -> str:
        """The stderr of child number ``run`` (default: the latest)."""
        path = self.home / f"stderr.{self.runs if run is None else run}.txt"
        return path.read_text() if path.exists() else ""

    def stdout(self) -> str:
        return (self.home / f"stdout.{self.runs}.txt").read_text()

    def journal(self) -> list[dict[str, Any]]:
        """The journal's events (read without the miner's truncation of a torn line)."""
        path = self.workdir / JOURNAL_FILE
        text = path.read_text() if path.exists() else ""
        return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]

    def phases(self) -> list[str]:
        return [e["phase"] for e in self.journal() if e["w"] == 0]

    def describe(self) -> str:
        return f"--- miner {self.key.ss58[:10]} stderr ---\n{self.stderr()}"

    async def start(self, *args: str, **env: str) -> None:
        """Start ``hypertrain-miner run --config miner.toml ARGS`` with ``env`` added."""
        assert self.process is None or self.process.returncode is not None
        self.runs += 1
        argv = [sys.executable, "-m", "hypertrain.miner", "run", "--config", "miner.toml", *args]
        with (
            (self.home / f"stdout.{self.runs}.txt").open("wb") as stdout,
            (self.home / f"stderr.{self.runs}.txt").open("wb") as stderr,
        ):
            self.process = await trio.lowlevel.open_process(
                argv, cwd=self.home, env=child_env(env), stdout=stdout, stderr=stderr
            )

    async def wait(self, limit: float) -> int:
        """The exit status of the current child, within ``limit`` seconds."""
        assert self.process is not None
        await wait_until(
            lambda: self.process is not None and self.process.poll() is not None,
            f"miner {self.key.ss58[:10]} to exit",
            limit,
            self.describe,
        )
        code = self.process.returncode
        assert code is not None
        return code

    async def sigkill(self) -> None:
        assert self.process is not None
        assert self.process.returncode is None
        self.process.send_signal(signal.SIGKILL)
        code = await self.wait(KILL_WAIT)
        assert code == -signal.SIGKILL, code

    async def kill(self) -> None:
        if self.process is not None:
            await _kill(self.process)


def check_row_matches_workdir(row: dict[str, Any], miner: MinerProcess) -> None:
    """The coordinator holds exactly the Commit the miner signed and the Receipt it was given."""
    assert row["status"] == "UPLOADED", row
    commit = json.loads((miner.round_dir / "commit.json").read_text())
    receipt = json.loads((miner.round_dir / "receipt.json").read_text())
    assert row["commit"] == commit
    assert row["receipt"] == receipt
    assert row["delta_manifest"]["body"]["delta_hash"] == commit["body"]["delta_hash"]


def summary_ok(miner: MinerProcess) -> bool:
    """The child's JSON summary on stdout says every round was UPLOADED."""
    summary = json.loads(miner.stdout())
    return bool(summary["ok"]) and [r["status"] for r in summary["rounds"]] == ["UPLOADED"]


__all__ = [
    "ROUND_TIMEOUT",
    "Daemon",
    "MinerProcess",
    "build_tiny_dataset",
    "check_row_matches_workdir",
    "launch_run",
    "open_daemon",
    "summary_ok",
    "tiny_run_manifest",
    "wait_until",
]
