"""A small network whose daemon is killed and restarted: the crash test's processes.

:func:`open_crash_network` makes a demo workspace (:mod:`hypertrain.demo.workspace`: secrets,
K_coord, the owner key, the state dir), starts ``hypertrain-daemon`` with its own local chain
on a port picked once (the miners' ``miner.toml`` names it; the daemon binds with
SO_REUSEADDR, so a new one rebinds at once after a SIGKILL), launches a run over the tiny
dataset of :mod:`tests.e2e.harness` without auditors, and starts :data:`MINERS`
``hypertrain-miner run`` children (:mod:`hypertrain.demo.children`: output in files, every
child stopped when the block exits). Every child runs this checkout's code (``PYTHONPATH``).

:meth:`CrashNetwork.crash` SIGKILLs the daemon's process group and starts a new daemon on the
same state dir and port (at the instant of a chosen journal write, with
:mod:`tests.e2e.killer`); :meth:`CrashNetwork.crash_twice` also kills the next daemon as it
starts; :meth:`CrashNetwork.kill_daemon` then :meth:`CrashNetwork.start_daemon` make an
outage of any length. Each time no daemon listened is an :class:`Outage` (in beacon rounds).
A miner rides out every restart (issue 18): a round it cannot finish fails and it goes on with
the next, so each miner is started once; :func:`rounds_lost` reads what each lost and
:func:`unexplained_losses` checks that an outage swallowed a deadline of each. Every wait is
bounded.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import attrs
import httpx
import trio

from hypertrain.beacon import ChainInfo
from hypertrain.demo.children import Child, Children, open_children
from hypertrain.demo.workspace import EPOCH_SECONDS, MinerHome, Workspace, create_workspace
from hypertrain.ledger import journal_path
from hypertrain.miner.main import TEST_HOLD_ENV
from hypertrain.protocol.envelope import NEVER, seal
from hypertrain.protocol.f32 import f32_hex
from hypertrain.protocol.manifest import Beacon, RunManifest
from tests.e2e.harness import build_tiny_dataset, tiny_run_manifest

__all__ = [
    "FAST_RETRY",
    "Crash",
    "CrashNetwork",
    "MinerSlot",
    "Outage",
    "Settings",
    "open_crash_network",
    "rounds_lost",
    "unexplained_losses",
]

REPO: Final = Path(__file__).resolve().parents[2]
LISTENING: Final = "hypertrain-daemon listening on "
SLUG: Final = "hypertrain"
MINERS: Final = 2
STARTUP_SECONDS: Final = 30.0
"""Bound for a daemon to listen after it is started, and for a miner to wait for round 0."""
KILL_WAIT: Final = 10.0
DAEMON_GRACE: Final = 2.0
"""The daemon's ``--grace``: after SIGTERM, what is in flight gets that long."""
STOP_GRACE: Final = 20.0
"""Bound on a child's exit after SIGTERM before it is killed (the daemon's grace, then the
interpreter's teardown, which takes seconds on a busy machine)."""
HTTP_TIMEOUT: Final = 5.0
POLL: Final = 0.1
KILLER: Final = Path(__file__).with_name("killer.py")
FAST_RETRY: Final = {"HYPERTRAIN_MINER_RETRY_MAX_SECONDS": "1"}
"""``miner_env`` for miners that try again within a second of a daemon's return (at most 10 s
later by default)."""
MARGIN: Final = 3
"""Beacon rounds a :data:`FAST_RETRY` miner needs, once a daemon is back, to finish a phase (its
next try within a second, the call, a round of rounding either side): an outage that ends
closer to a deadline than this swallowed it (:meth:`Outage.swallows`)."""
NOBODY_SCORES_MS: Final = 3_600_000
"""``HYPERTRAIN_COMPUTE_WAIT_MS``: no node runs, and the fallback's torch workers would take
the CPU the restarts need; scoring does not hold finality (every soft score is then 0)."""


@attrs.frozen
class Settings:
    """The run's timing in drand rounds of one second (a run's beacon period is whole seconds):
    a round opens every ``assign_after_open + train_rounds + upload_after_commit`` rounds and
    is final ``audit_after_commit`` (40, the protocol's minimum) + ``final_after_upload``
    rounds after its ``d_commit``."""

    total_rounds: int = 10
    assign_after_open: int = 1
    train_rounds: int = 2
    upload_after_commit: int = 1
    final_after_upload: int = 1
    vest_rounds: int = 2
    """``HYPERTRAIN_VEST_ROUNDS`` = the manifest's ``E_vest_rounds`` (so ``q_base`` 0.5)."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _manifest(ws: Workspace, chain: ChainInfo, data_dir: Path, settings: Settings) -> RunManifest:
    """The tiny CPU manifest over ``data_dir`` and the daemon's chain, no auditors, vesting
    after :attr:`Settings.vest_rounds` ledger rounds."""
    base = tiny_run_manifest(data_dir)
    beacon = Beacon(
        chain_hash=chain.hash, period=chain.period_ms // 1000, genesis_time=chain.genesis_ms // 1000
    )
    timeouts = attrs.evolve(
        base.verify.T,
        assign_after_open=settings.assign_after_open,
        upload_after_commit=settings.upload_after_commit,
    )
    verify = attrs.evolve(
        base.verify, T=timeouts, q_base=f32_hex(0.5), E_vest_rounds=settings.vest_rounds
    )
    return attrs.evolve(base, coord_pubkey=ws.coord.ss58, beacon=beacon, verify=verify, auditors=())


@attrs.frozen
class Crash:
    """One kill: whether it struck as the journal was written, and the kind of the journal's
    last record as the killed daemon left it."""

    on_write: bool
    last_record: str


@attrs.frozen
class Outage:
    """A time no daemon listened: the beacon round at the kill and when the next listened."""

    killed: int
    listening: int

    def swallows(self, deadline: int) -> bool:
        """Whether it left a miner too little time before ``deadline`` (a beacon round): it
        began before and ended less than :data:`MARGIN` rounds before."""
        return self.killed <= deadline < self.listening + MARGIN


def rounds_lost(net: CrashNetwork) -> dict[str, list[int]]:
    """Per miner (hotkey), the rounds it did not upload, from the summary of the one process
    that ran it (which went through its last round, with exit status 1 for a round lost)."""
    lost = {}
    for slot in net.miners:
        assert slot.finished(), f"{slot.home.name} never printed its summary:\n{slot.child.tail()}"
        summary = slot.summary()
        ws = [int(r["w"]) for r in summary["rounds"] if r["status"] != "UPLOADED"]
        assert slot.child.returncode == (1 if ws else 0), slot.child.tail()
        lost[slot.home.key.ss58] = ws
    return lost


def unexplained_losses(
    views: Mapping[int, dict[str, Any]] | Sequence[dict[str, Any]],
    lost: dict[str, list[int]],
    outages: list[Outage],
) -> list[tuple[int, str]]:
    """``(w, hotkey)`` of each round a miner did not upload (``lost``: its rounds, by hotkey)
    though no outage swallowed that round's ``d_commit`` or ``d_upload`` (``views``: the round
    views, by round)."""
    unexplained = []
    for hotkey, rounds in lost.items():
        for w in rounds:
            body = views[w]["round_open"]["body"]
            deadlines = (int(body["d_commit"]), int(body["d_upload"]))
            if not any(o.swallows(d) for o in outages for d in deadlines):
                unexplained.append((w, hotkey))
    return unexplained


@attrs.define(eq=False)
class MinerSlot:
    """One miner: its home and the child running it."""

    home: MinerHome
    child: Child

    @property
    def holds(self) -> Path:
        """Its hold directory (:data:`~hypertrain.miner.main.TEST_HOLD_ENV`), miner 0's only."""
        return self.home.home / "holds"

    def summary(self) -> dict[str, Any]:
        """The JSON summary it printed at the end (:meth:`finished` first)."""
        summary: dict[str, Any] = json.loads(self.child.stdout.read_text())
        return summary

    def finished(self) -> bool:
        """It printed its summary: it went through its last round."""
        return bool(self.child.stdout.read_text().strip())


@attrs.define(eq=False)
class CrashNetwork:
    """The running network (module doc); build it with :func:`open_crash_network`."""

    ws: Workspace
    children: Children
    client: httpx.AsyncClient
    settings: Settings
    env: dict[str, str]
    port: int = attrs.field(factory=_free_port)
    daemon: Child | None = None
    starts: int = 0
    """Daemons started so far."""
    up: trio.Event = attrs.field(factory=trio.Event)
    """Set once the current daemon listens (a new event for each daemon)."""
    chain: ChainInfo | None = None
    run_id: str = ""
    miners: list[MinerSlot] = attrs.field(factory=list)
    miner_env: dict[str, str] = attrs.field(factory=dict)
    """Extra environment of every miner (``HYPERTRAIN_MINER_*`` overrides its miner.toml)."""
    outages: list[Outage] = attrs.field(factory=list)
    """Every time no daemon listened, from a kill to the next daemon listening."""
    down_since: int | None = None
    """The beacon round of the first kill since a daemon last listened."""
    holds: tuple[str, ...] = ()
    """The hold files (``W.POINT``) miner 0 starts with in its hold directory
    (:attr:`MinerSlot.holds`); with none, no miner has one."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def journal(self) -> Path:
        return journal_path(self.ws.state)

    def current_daemon(self) -> Child:
        assert self.daemon is not None
        return self.daemon

    # The daemon.

    async def _spawn(self) -> Child:
        n = self.starts
        self.starts += 1
        argv = [sys.executable, "-m", "hypertrain.daemon", "--host", "127.0.0.1"]
        argv += ["--port", str(self.port), "--beacon", "local", "--local-period", "1"]
        argv += ["--grace", str(DAEMON_GRACE)]
        self.daemon = await self.children.start(
            f"hypertrain-daemon #{n}",
            argv,
            env=self.env,
            stdout=self.ws.root / f"daemon.{n}.out",
            stderr=self.ws.root / f"daemon.{n}.log",
        )
        return self.daemon

    async def start_daemon(self) -> None:
        """Start a daemon on the state dir and port; returns once it listens."""
        daemon = await self._spawn()
        await daemon.wait_for_line(lambda s: s.startswith(LISTENING), STARTUP_SECONDS)
        if self.down_since is not None:
            self.outages.append(Outage(self.down_since, self.beacon_round()))
            self.down_since = None
        self.up.set()

    async def _kill(self, daemon: Child, *, struck: bool = False) -> str:
        """SIGKILL ``daemon``'s process group (unless ``struck`` already) and reap it; the kind
        of the journal's last record as it left it."""
        self.up = trio.Event()
        code = daemon.returncode
        assert code is None or struck, f"the daemon exited by itself ({code}):\n{daemon.tail()}"
        if not struck:
            os.killpg(daemon.process.pid, signal.SIGKILL)
        if self.down_since is None and self.chain is not None:
            self.down_since = self.beacon_round()
        assert await daemon.wait(KILL_WAIT) == -signal.SIGKILL, daemon.tail()
        lines = self.journal.read_bytes().splitlines()
        return str(json.loads(lines[-1])["kind"]) if lines else "nothing"

    async def crash(
        self,
        *,
        on_write: int = 0,
        limit: float = 0.0,
        during: Callable[[], Awaitable[None]] | None = None,
    ) -> Crash:
        """SIGKILL the daemon's process group, then start a new daemon (:meth:`start_daemon`).

        With ``on_write`` N, the kill strikes the instant the daemon writes its ledger journal
        the N-th time from now (:mod:`tests.e2e.killer`), or after ``limit`` seconds; ``during``
        is then awaited meanwhile (a request that makes the daemon write)."""
        daemon = self.current_daemon()
        struck = False
        if on_write:
            struck = await self._kill_on_write(daemon, on_write, limit, during)
        last = await self._kill(daemon, struck=struck)
        await self.start_daemon()
        return Crash(struck, last)

    async def kill_daemon(self) -> None:
        """SIGKILL the daemon's process group and reap it; :meth:`start_daemon` starts the
        next (an outage in between)."""
        await self._kill(self.current_daemon())

    async def crash_twice(self, delay: float) -> tuple[Crash, Crash, bool]:
        """SIGKILL the daemon, start a new one and SIGKILL it ``delay`` seconds later, as it
        starts (opening its database and ledger, catching its chain up, feeding the ledger)
        or just after; then start another (:meth:`start_daemon`). Both kills, and whether the
        second daemon had begun to listen."""
        first = await self._kill(self.current_daemon())
        starting = await self._spawn()
        await trio.sleep(delay)
        listened = LISTENING in starting.stdout.read_text()
        second = await self._kill(starting)
        await self.start_daemon()
        return Crash(False, first), Crash(False, second), listened

    async def _kill_on_write(
        self,
        daemon: Child,
        writes: int,
        limit: float,
        during: Callable[[], Awaitable[None]] | None,
    ) -> bool:
        n = self.starts
        argv = [sys.executable, str(KILLER), str(self.journal), str(daemon.process.pid)]
        killer = await self.children.start(
            f"killer #{n}",
            [*argv, str(limit), str(writes)],
            env={},
            stdout=self.ws.root / f"killer.{n}.out",
            stderr=self.ws.root / f"killer.{n}.err",
        )
        await killer.wait_for_line(lambda line: line == "armed", STARTUP_SECONDS)
        if during is not None:
            await during()
        assert await killer.wait(limit + KILL_WAIT) == 0, killer.tail()
        return killer.stdout.read_text().splitlines()[-1] == "struck"

    async def stop_daemon(self) -> int:
        """SIGTERM, the graceful stop; its exit status."""
        self.up = trio.Event()
        return await self.current_daemon().stop(STOP_GRACE)

    # HTTP.

    async def get(self, path: str, **kwargs: Any) -> httpx.Response | None:
        """``GET path``; None when no daemon answers (killed, restarting)."""
        try:
            return await self.client.get(f"{self.url}{path}", **kwargs)
        except httpx.TransportError:
            return None

    async def get_json(self, path: str) -> Any:
        """The JSON of ``GET path`` (which must answer 200), None when no daemon answers."""
        r = await self.get(path)
        if r is None:
            return None
        assert r.status_code == 200, (path, r.status_code, r.text[:300])
        return r.json()

    async def run_view(self) -> dict[str, Any] | None:
        view: dict[str, Any] | None = await self.get_json(f"/v1/runs/{self.run_id}")
        return view

    async def weights(self, epoch: int) -> bytes | None:
        """``get_weights`` for ``epoch``, asked as the Cortex master asks; None when no daemon
        answers (it may have died with the answer written, or before)."""
        headers = {
            "Authorization": f"Bearer {self.ws.internal_token}",
            "X-Platform-Challenge-Slug": SLUG,
        }
        params = {"epoch": epoch}
        r = await self.get("/internal/v1/get_weights", params=params, headers=headers)
        if r is None:
            return None
        assert r.status_code == 200, (epoch, r.status_code, r.text[:300])
        return r.content

    def beacon_round(self) -> int:
        """The local chain's round now (round 1 at its genesis)."""
        assert self.chain is not None
        return self.chain.round_at(time.time())

    def current_epoch(self) -> int:
        """The ledger's chain epoch now (its genesis is the local chain's, in whole seconds)."""
        assert self.chain is not None
        return (int(time.time()) - math.floor(self.chain.genesis_time)) // EPOCH_SECONDS

    # The run and its miners.

    async def _admin(self, method: str, path: str, body: object) -> Any:
        headers = {"Authorization": f"Bearer {self.ws.admin_token}"}
        r = await self.client.request(method, f"{self.url}{path}", json=body, headers=headers)
        assert r.status_code in (200, 201), (method, path, r.status_code, r.text[:300])
        return r.json()

    async def launch(self, data_dir: Path) -> None:
        """Create, configure and roster the run, start the miners, and unpause it once each
        waits for round 0."""
        self.chain = ChainInfo.from_json(await self.get_json("/v1/beacon/info"))
        manifest = _manifest(self.ws, self.chain, data_dir, self.settings)
        envelope = seal(self.ws.owner, "RunManifest", manifest.run_id(), manifest, NEVER)
        created = await self._admin("POST", "/v1/admin/runs", envelope.to_json())
        self.run_id = str(created["run_id"])
        base = f"/v1/admin/runs/{self.run_id}"
        s = self.settings
        config = {
            "train_rounds": s.train_rounds,
            "final_after_upload": s.final_after_upload,
            "total_rounds": s.total_rounds,
        }
        await self._admin("PUT", f"{base}/config", config)
        for i in range(MINERS):
            home = self.ws.add_miner(i, self.url, self.run_id)
            with home.config.open("a", encoding="utf-8") as toml:
                toml.write(f'data_dir = "{data_dir}"\n')
            await self._admin("PUT", f"{base}/roster/{home.key.ss58}", {})
            child = await self._start_miner(home, 0, s.total_rounds, 0)
            self.miners.append(MinerSlot(home, child))
        for slot in self.miners:
            await slot.child.wait_for_line(
                lambda line: line.endswith("round 0: waiting"), STARTUP_SECONDS, stream="stderr"
            )
        await self._admin("PUT", f"{base}/paused", {"paused": False})

    async def _start_miner(self, home: MinerHome, start: int, rounds: int, n: int) -> Child:
        argv = [sys.executable, "-m", "hypertrain.miner", "run", "--config", str(home.config)]
        argv += ["--start", str(start), "--rounds", str(rounds)]
        env = {"PYTHONPATH": str(REPO), **self.miner_env}
        if self.holds and not self.miners:
            holds = home.home / "holds"
            holds.mkdir(exist_ok=True)
            for name in self.holds:
                (holds / name).touch()
            env[TEST_HOLD_ENV] = str(holds)
        return await self.children.start(
            f"{home.name} #{n}",
            argv,
            env=env,
            stdout=home.home / f"stdout.{n}.txt",
            stderr=home.home / f"stderr.{n}.txt",
            cwd=home.home,
        )


@asynccontextmanager
async def open_crash_network(
    root: Path,
    settings: Settings,
    *,
    holds: tuple[str, ...] = (),
    miner_env: dict[str, str] | None = None,
) -> AsyncIterator[CrashNetwork]:
    """The network under ``root``, its run launched (module doc); every child is stopped when
    the block exits. Miner 0 starts with the hold files ``holds`` (``W.POINT``, in its
    :attr:`MinerSlot.holds`); every miner gets ``miner_env``."""
    ws = create_workspace(root / "net")
    data_dir = await trio.to_thread.run_sync(build_tiny_dataset, root / "dataset")
    env = ws.daemon_env()
    del env["HYPERTRAIN_HOLDOUT_DIR"]  # no held-out loss either: it is a torch evaluation
    env |= {
        "HYPERTRAIN_VEST_ROUNDS": str(settings.vest_rounds),
        "HYPERTRAIN_COMPUTE_WAIT_MS": str(NOBODY_SCORES_MS),
        "PYTHONPATH": str(REPO),
    }
    async with (
        open_children(STOP_GRACE) as children,
        httpx.AsyncClient(timeout=HTTP_TIMEOUT) as client,
    ):
        net = CrashNetwork(
            ws, children, client, settings, env, miner_env=dict(miner_env or {}), holds=holds
        )
        await net.start_daemon()
        await net.launch(data_dir)
        yield net
