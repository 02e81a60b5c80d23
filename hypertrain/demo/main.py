"""``hypertrain-daemon --demo``: a whole local network in one command (the README's first).

::

    hypertrain-daemon --demo [--rounds N] [--miners M] [--nodes K] [--auditors A]
                             [--honeypot MODE]... [--dispute] [--train-seconds S]
                             [--port P] [--keep DIR]

What it does, in order (every wait bounded; the files are described in
:mod:`hypertrain.demo.workspace`):

1. a demo directory (a new temporary one, removed at the end; ``--keep DIR``: DIR, new or
   empty, kept) with fresh tokens, an owner key and K_coord;
2. ``hypertrain-daemon`` as a child process on 127.0.0.1 (``--port``, default any free port)
   with its own local beacon chain of one-second rounds; its URL is the first line printed,
   ``daemon: http://127.0.0.1:PORT``, so nodes, dashboards and curl can join, and the second
   the run dashboard's (``dashboard: http://127.0.0.1:PORT/``, :mod:`hypertrain.coordinator.
   web.dashboard`);
3. the dataset, built from the default corpus (the standard library's sources) and pinned into
   the daemon's object store; the holdout split stays on disk, where the daemon evaluates
   every merged theta on it (``HYPERTRAIN_HOLDOUT_DIR``);
4. one training round of the demo's model, timed in a child process as a miner runs it
   (:mod:`hypertrain.demo.probe`; ``--train-seconds S`` skips it and takes ``S``), and the run's
   windows sized from it for the demo's processes sharing this machine's cores, with room to
   spare (:mod:`hypertrain.demo.windows`), said in one line (``demo: one training round
   measured 0.43 s; windows ...``);
5. the CPU test-mode manifest (``hypertrain manifest example``) over that dataset and chain,
   with those windows, sealed by the owner; over the admin API: create the run, register the
   dataset, configure ``N`` rounds, admit ``M`` miners;
6. ``M`` ``hypertrain-miner run`` children and ``K`` ``hypertrain-node`` children (the compute
   network that scores every uploaded delta; scoring window :data:`COMPUTE_WAIT_MS`; paired
   in the test mode :data:`DEMO_PAIRING`, each key its own network), all talking HTTP to the
   daemon; once each miner waits for round 0, the run is unpaused;
7. a live table, one line whenever a round's state, uploads, update norm, clipped count,
   held-out loss or scoring changes (:mod:`hypertrain.demo.table`), then a summary. The demo
   ends once ``N`` rounds were merged and evaluated and every scoring step of their deltas
   settled (by agreement, a third copy or the fallback). The summary ends with the daemon's
   own counters from its ``GET /metrics`` (:mod:`hypertrain.demo.metrics`).

With ``--dispute`` (the dispute drill) one more miner, ``drill-0``, on probation, trains one op
wrong on purpose at the last inner step of every round (``HYPERTRAIN_TEST_MINER_FAULT``, see
:mod:`hypertrain.miner.faults`) and stands by it; at least two auditors run (a referee is never
the disputed auditor). Its audit says MISMATCH, its rerun reproduces its commitment (CONTEST),
it contests, both sides bisect down to that op and the other auditor referees; after the
rounds the demo waits (:data:`DISPUTE_SECONDS`) until every dispute of the drill miner is
resolved and prints one line per dispute. The drill's fault verdicts do not count as honest
miners flagged; the demo is ok only if the drill lost every dispute at exactly its op.

With auditors, once the rounds are done the demo waits (:data:`PAYOUT_SECONDS`) until round 0
is RELEASED (final, and its escrow vested: the demo's ledger settings are short,
:mod:`hypertrain.demo.workspace`), asks ``GET /internal/v1/get_weights`` for the current chain
epoch as the Cortex master would, and prints the answer's weights and the ledger's totals.
Then (:mod:`hypertrain.demo.checkpoint`, bounded by :data:`CHECKPOINT_SECONDS`) it waits for the
last round's checkpoint to be final, fetches it into ``DIR/checkpoint``, verifies it with
``hypertrain verify-checkpoint --replay`` against the daemon, prints a sample of what the model
writes and, with ``--keep``, the command that verifies the kept checkpoint again later.

Exit status: 0 when ``N`` rounds were applied, the held-out loss of the last merged theta is
below that of theta(0) and (with auditors) the audits and the payout went as promised (every
honest miner paid, no caught cheater paid, the ledger balanced, the last checkpoint final and
VERIFIED by replay); 1 otherwise, with the reason
(and the tail of the failing child's log);
2 a usage error; 128 + N stopped by signal N: 130 Ctrl-C (SIGINT), 143 SIGTERM, 129 SIGHUP.

Stopping: SIGINT, SIGTERM and SIGHUP alike (:func:`nurseries.open_supervisor`) cancel the demo at
once; every child gets SIGTERM together and the process group of any still running after
:data:`STOP_GRACE` seconds is killed, so the demo is gone within
:data:`STOP_GRACE` + :data:`~hypertrain.demo.children.KILL_WAIT` seconds. Killed itself with
SIGKILL, the demo cannot stop them: its children hold a lifeline
(:func:`nurseries.open_lifeline`) and shut down as on SIGHUP when it is cut.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import httpx
import trio

from hypertrain.beacon.chain import ChainInfo
from hypertrain.cli.common import EXIT_USAGE, OneLineParser, positive_int_arg
from hypertrain.datasets.pin import pin_async
from hypertrain.demo.checkpoint import CHECKPOINT_SECONDS, CheckpointResult, check_checkpoint
from hypertrain.demo.children import KILL_WAIT, Child, ChildFailed, Children, open_children
from hypertrain.demo.metrics import scrape_metrics
from hypertrain.demo.probe import PROBE_SECONDS, ProbeFailed, measure_training
from hypertrain.demo.table import (
    HEADER,
    AuditTotals,
    DrillResult,
    Payout,
    RoundRow,
    Table,
    Verdict,
    summary_lines,
    verdict,
)
from hypertrain.demo.windows import Windows, size_windows
from hypertrain.demo.workspace import (
    EPOCH_SECONDS,
    MinerHome,
    Workspace,
    build_dataset,
    create_workspace,
    demo_manifest,
)
from hypertrain.miner.faults import TEST_FAULT_ENV
from hypertrain.miner.honeypot import HoneypotMode
from hypertrain.protocol.envelope import NEVER, seal
from hypertrain.protocol.hashes import honeypot_commit
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.pages import (
    ROUND_VIEW_LISTS,
    RUN_VIEW_LISTS,
    Key,
    read_all_pages,
    round_key,
)
from hypertrain.scoring.registry import DELTA_LOSS
from nurseries import open_supervisor

__all__ = ["DemoFailed", "DemoOptions", "build_parser", "main", "run_demo", "run_until_signal"]

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_INTERRUPTED: Final = 130
LISTENING: Final = "hypertrain-daemon listening on "
STARTUP_SECONDS: Final = 60.0
"""Bound for the daemon to listen and for each miner to wait for round 0."""
SETUP_SECONDS: Final = 120.0 + PROBE_SECONDS
"""Bound for everything before the run is unpaused (the training probe included)."""
ROUND_SECONDS: Final = 45.0
"""Bound per round beyond its windows (:class:`~hypertrain.demo.windows.Windows`): the merge
and, from round 1 on, the wait for the audits of the round before (they start 40 rounds after
its ``d_commit``, and round ``w + 1`` is merged only once round ``w - 1``'s are settled)."""
COMPUTE_WAIT_MS: Final = 180_000
"""The demo's scoring window: volunteers on one busy machine get three minutes per step.

Each node scores its copies one after the other, each in a fresh worker process (~3.5 s of CPU,
most of it importing torch), so the last step of a round waits behind that node's copies of the
round's other steps: six of them with the defaults, ~21 s of CPU. Three minutes leave each node
an eighth of a core; a minute was too short on a 2-core machine under load (two of eight steps
went to the fallback), and a longer window costs nothing when the nodes are quick: a step
settles as soon as both copies agree."""
NO_NODES_WAIT_MS: Final = 1_000
"""The scoring window without nodes (``--nodes 0``): nobody will score, the fallback does."""
DEMO_PAIRING: Final = {
    "HYPERTRAIN_COMPUTE_NETWORKS": "per-key",
    "HYPERTRAIN_COMPUTE_PAIR_MIN_AGE_S": "0",
}
"""The demo's test mode of the pairing rules: its nodes all run on 127.0.0.1 with keys minted
seconds ago, so each key counts as its own network (accepted only with ``--beacon local``,
which the demo's daemon runs) and keys of any age are paired. Never the daemon's default."""
SCORING_SECONDS: Final = (COMPUTE_WAIT_MS + DELTA_LOSS.kill_after_ms) / 1000
"""Bound, after the last merge, for the last round's scoring steps to settle: the scoring
window, then the fallback's own worker (killed after ``kill_after_ms``)."""
DISPUTE_SECONDS: Final = 240.0
"""Bound, after the rounds, for the drill miner's disputes to be resolved (three levels of
bisection, each a poll of both parties, then the referee's replay)."""
PAYOUT_SECONDS: Final = 120.0
"""Bound, after the rounds, for round 0 to be RELEASED: final once its audits and the caught
cheaters' dispute window allow, then :data:`~hypertrain.demo.workspace.VEST_ROUNDS` ledger
rounds of :data:`~hypertrain.demo.workspace.EPOCH_SECONDS` (it usually is already)."""
SLUG: Final = "hypertrain"
"""The daemon's challenge slug (its default): ``get_weights`` needs it in a header."""
DRILL_NAME: Final = "drill-0"
AUDITOR_POLL_SECONDS: Final = 1.0
"""The demo's auditors ask for work and look at their disputes every second."""
MAX_NODES: Final = 16
MAX_TRAIN_SECONDS: Final = 3600.0
POLL_SECONDS: Final = 0.5
STOP_GRACE: Final = 10.0
"""Seconds the children get, after SIGTERM, before their process groups are killed."""
HTTP_TIMEOUT: Final = 30.0


class DemoFailed(Exception):
    """The demo cannot go on; the message says why."""


@attrs.frozen
class DemoOptions:
    """The command line (module doc)."""

    rounds: int = 3
    miners: int = 3
    nodes: int = 2
    port: int = 0
    keep: Path | None = None
    auditors: int = 1
    honeypots: tuple[str, ...] = ("fabricate",)
    """One operator-run miner per entry, in that honeypot mode (``--honeypot``)."""
    dispute: bool = False
    """The dispute drill (``--dispute``, module doc)."""
    train_seconds: float | None = None
    """One training round's seconds (``--train-seconds``); None: measured (module doc)."""

    @property
    def trainers(self) -> int:
        """Miners that train at once: the honest ones, the honeypots and the drill miner."""
        return self.miners + len(self.honeypots) + int(self.dispute)

    @property
    def n_auditors(self) -> int:
        """Auditor processes: ``--auditors``, at least two with ``--dispute``."""
        return max(self.auditors, 2) if self.dispute else self.auditors


def _port(value: str) -> int:
    if not value.isdigit() or not 0 <= int(value) <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number (0..65535)")
    return int(value)


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= MAX_TRAIN_SECONDS:
        raise argparse.ArgumentTypeError(f"{value!r} is not seconds in (0, {MAX_TRAIN_SECONDS:g}]")
    return seconds


def _count(value: str) -> int:
    if not value.isdigit() or int(value) > MAX_NODES:
        raise argparse.ArgumentTypeError(f"{value!r} is not a count 0..{MAX_NODES}")
    return int(value)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="hypertrain-daemon --demo",
        description="Run a local hypertrain network: a daemon with its own beacon chain, a "
        "dataset, a run and miners as separate processes over 127.0.0.1; print a live table per "
        "round and exit 0 when the rounds were applied and the held-out loss fell.",
    )
    parser.add_argument("--rounds", type=positive_int_arg, default=3, metavar="N")
    parser.add_argument("--miners", type=positive_int_arg, default=3, metavar="M")
    parser.add_argument(
        "--nodes",
        type=_count,
        default=2,
        metavar="K",
        help="hypertrain-node processes scoring the deltas (default 2; 0: the daemon's fallback)",
    )
    parser.add_argument(
        "--auditors",
        type=_count,
        default=1,
        metavar="A",
        help="hypertrain-auditor processes replaying the audits (default 1; 0: no auditing)",
    )
    parser.add_argument(
        "--honeypot",
        action="append",
        choices=[mode.value for mode in HoneypotMode],
        metavar="MODE",
        help="add an operator-run honeypot miner in MODE (fabricate, last_step, noise, honest);"
        " repeatable; default: one fabricate",
    )
    parser.add_argument(
        "--dispute",
        action="store_true",
        help="the dispute drill: add a miner that trains one op wrong on purpose and contests"
        " its audit; the dispute is bisected to that op and refereed (two auditors at least)",
    )
    parser.add_argument(
        "--train-seconds",
        type=_seconds,
        metavar="S",
        help="size the windows for a training round of S seconds instead of measuring one",
    )
    parser.add_argument(
        "--port", type=_port, default=0, metavar="P", help="daemon port (default: any free one)"
    )
    parser.add_argument(
        "--keep", type=Path, metavar="DIR", help="keep every file in DIR (new or empty)"
    )
    return parser


Say = Callable[[str], None]


def _say(line: str) -> None:
    print(line, flush=True)


@attrs.define
class _Admin:
    """The admin API calls of the demo; any answer but the expected one is DemoFailed."""

    client: httpx.AsyncClient
    token: str

    async def call(self, method: str, path: str, body: object = None, ok: int = 200) -> Any:
        headers = {"Authorization": f"Bearer {self.token}"}
        r = await self.client.request(method, path, json=body, headers=headers)
        if r.status_code != ok:
            raise DemoFailed(f"{method} {path} answered {r.status_code}: {r.text[:300]}")
        return r.json()


def compute_wait_ms(nodes: int) -> int:
    """The scoring window: :data:`COMPUTE_WAIT_MS` for volunteers; without any (``--nodes 0``)
    :data:`NO_NODES_WAIT_MS`, since no copy will come and the daemon's fallback scores."""
    return COMPUTE_WAIT_MS if nodes else NO_NODES_WAIT_MS


def hidden_slices(nodes: int) -> int:
    """The demo's slices of a hidden step (``HYPERTRAIN_HIDDEN_SLICES``): a node gets one slice
    of a hidden window and each slice needs two nodes, so ``nodes // 2`` (at least 1) slices
    let every slice be scored by two agreeing nodes: one slice with the default two nodes (each
    node holds the whole window, as before shards), two with four."""
    return max(1, nodes // 2)


async def _start_daemon(
    children: Children, ws: Workspace, port: int, nodes: int
) -> tuple[Child, str]:
    argv = [sys.executable, "-m", "hypertrain.daemon", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--beacon", "local", "--local-period", "1"]
    env = ws.daemon_env() | {
        "HYPERTRAIN_COMPUTE_WAIT_MS": str(compute_wait_ms(nodes)),
        "HYPERTRAIN_HIDDEN_SLICES": str(hidden_slices(nodes)),
    }
    env |= DEMO_PAIRING
    daemon = await children.start(
        "hypertrain-daemon", argv, env=env, stdout=ws.daemon_out, stderr=ws.daemon_log
    )
    line = await daemon.wait_for_line(lambda s: s.startswith(LISTENING), STARTUP_SECONDS)
    return daemon, line[len(LISTENING) :].strip()


@attrs.frozen
class _Network:
    """What ``_launch`` started: the run, its honest miners and its honeypot miners, and the
    reveal of the honeypot commitment (posted at the end)."""

    run_id: str
    miners: list[Child]
    honeypots: list[Child]
    reveal: dict[str, Any]
    drill: tuple[str, str] | None = None
    """The drill miner's hotkey and the op spec it trains wrong (``--dispute``)."""
    names: dict[str, str] = attrs.field(factory=dict)
    """hotkey -> the demo's name for it (``miner-0``, ``honeypot-0-fabricate``, ...)."""
    honest: tuple[str, ...] = ()
    """The honest miners' hotkeys."""
    chain: ChainInfo | None = None
    windows: Windows = attrs.field(kw_only=True)
    """The run's windows, sized from the measured training round."""


def _auditor_argv(url: str, run_id: str, ws: Workspace, home: MinerHome) -> list[str]:
    argv = [sys.executable, "-m", "hypertrain.auditor", "--api", url, "--run-id", run_id]
    argv += ["--token-file", str(ws.worker_token_file), "--keyfile", str(home.home / "auditor.key")]
    argv += ["--poll-seconds", str(AUDITOR_POLL_SECONDS)]
    return [*argv, "--data-dir", str(home.home / "data")]


def drill_spec(manifest: RunManifest) -> str:
    """The drill miner's fault: the ``mlp`` output of the last layer at the last inner step
    (inside the final window, which every segment audit replays)."""
    return f"step={manifest.inner.H};layer={manifest.model.n_layers - 1};op=mlp"


async def _launch(
    children: Children, ws: Workspace, api: _Admin, url: str, options: DemoOptions, say: Say
) -> _Network:
    """Steps 3 to 6 of the module doc."""
    dataset = await trio.to_thread.run_sync(build_dataset, ws, 64)
    pinned = await pin_async(ws.dataset, ws.state / "objects")
    say(
        f"demo: dataset of {dataset.n_samples} samples of {dataset.seq_len} tokens "
        f"({dataset.holdout.n_samples} held out), pinned as {pinned.manifest_sha256[:16]}"
    )
    chain = ChainInfo.from_json(await api.call("GET", "/v1/beacon/info"))
    n_auditors = options.n_auditors
    auditors = [ws.add_auditor(i) for i in range(n_auditors)]
    keys = [a.key.ss58 for a in auditors]
    windows = await _windows(children, ws, options, demo_manifest(ws, chain, dataset, keys), say)
    manifest = demo_manifest(ws, chain, dataset, keys, windows)
    if manifest.model.seq_len != dataset.seq_len:
        raise DemoFailed(f"the model needs seq_len {manifest.model.seq_len}")
    envelope = seal(ws.owner, "RunManifest", manifest.run_id(), manifest, NEVER).to_json()
    run_id = str((await api.call("POST", "/v1/admin/runs", envelope, ok=201))["run_id"])
    base = f"/v1/admin/runs/{run_id}"
    await api.call("PUT", f"{base}/dataset", {"manifest_sha256": pinned.manifest_sha256})
    config = {
        "train_rounds": windows.train_rounds,
        "final_after_upload": windows.final_after_upload,
        "total_rounds": options.rounds,
    }
    await api.call("PUT", f"{base}/config", config)
    homes = [ws.add_miner(i, url, run_id) for i in range(options.miners)]
    pots = [
        (ws.add_miner(options.miners + j, url, run_id, name=f"honeypot-{j}-{mode}"), mode)
        for j, mode in enumerate(options.honeypots)
    ]
    for home in homes:
        await api.call("PUT", f"{base}/roster/{home.key.ss58}", {})
    for home, _ in pots:  # honeypots are on probation: audited every round
        await api.call("PUT", f"{base}/roster/{home.key.ss58}", {"probation": True})
    drill_home = None
    if options.dispute:
        drill_home = ws.add_miner(options.miners + len(pots), url, run_id, name=DRILL_NAME)
        await api.call("PUT", f"{base}/roster/{drill_home.key.ss58}", {"probation": True})
    members = sorted((home.key.ss58, mode) for home, mode in pots)
    salt = secrets.token_bytes(32)
    commitment = honeypot_commit(members, salt)
    await api.call("PUT", f"{base}/honeypot", {"commitment": commitment})
    reveal = {
        "commitment": commitment,
        "members": [{"hotkey": hotkey, "mode": mode} for hotkey, mode in members],
        "salt": salt.hex(),
    }
    say(
        f"demo: run {run_id[:16]} ({manifest.model.param_count:,} parameters,"
        f" H={manifest.inner.H} inner steps a round), {options.miners} miners,"
        f" {len(pots)} honeypots ({', '.join(options.honeypots) or 'none'}),"
        f" {n_auditors} auditors, {options.nodes} compute nodes, {options.rounds} rounds"
    )
    miners: list[Child] = []
    honeypots: list[Child] = []
    for home, mode in [(home, None) for home in homes] + list(pots):
        argv = [sys.executable, "-m", "hypertrain.miner", "run", "--config", str(home.config)]
        argv += ["--rounds", str(options.rounds), "--start", "0"]
        if mode is not None:
            argv += ["--honeypot", mode]
        child = await children.start(
            home.name, argv, env={}, stdout=home.stdout, stderr=home.stderr, cwd=home.home
        )
        (miners if mode is None else honeypots).append(child)
    drill = None
    if drill_home is not None:
        spec = drill_spec(manifest)
        drill = (drill_home.key.ss58, spec)
        say(f"demo: {DRILL_NAME} trains {spec} wrong on purpose and will contest its audits")
        argv = [sys.executable, "-m", "hypertrain.miner", "run", "--config", str(drill_home.config)]
        argv += ["--rounds", str(options.rounds), "--start", "0"]
        child = await children.start(
            drill_home.name,
            argv,
            env={TEST_FAULT_ENV: spec},
            stdout=drill_home.stdout,
            stderr=drill_home.stderr,
            cwd=drill_home.home,
        )
        honeypots.append(child)  # not honest: it neither counts for the rounds nor the loss
    for home in auditors:
        await children.start(
            home.name,
            _auditor_argv(url, run_id, ws, home),
            env={},
            stdout=home.home / "stdout.txt",
            stderr=home.home / "stderr.txt",
            cwd=home.home,
        )
    for i in range(options.nodes):
        node_dir = ws.root / "nodes" / f"node-{i}"
        node_dir.mkdir(parents=True)
        argv = [sys.executable, "-m", "hypertrain.node", "--url", url, "--dir", str(node_dir)]
        argv += ["--handle", f"demo-node-{i}"]
        await children.start(
            f"node-{i}",
            argv,
            env={},
            stdout=node_dir / "stdout.txt",
            stderr=node_dir / "stderr.txt",
            cwd=node_dir,
        )
    for miner in miners + honeypots:
        await miner.wait_for_line(
            lambda s: s.endswith("round 0: waiting"), STARTUP_SECONDS, stream="stderr"
        )
    await api.call("PUT", f"{base}/paused", {"paused": False})
    names = {home.key.ss58: home.name for home in homes} | {h.key.ss58: h.name for h, _ in pots}
    if drill_home is not None:
        names[drill_home.key.ss58] = drill_home.name
    honest = tuple(home.key.ss58 for home in homes)
    return _Network(run_id, miners, honeypots, reveal, drill, names, honest, chain, windows=windows)


async def _windows(
    children: Children, ws: Workspace, options: DemoOptions, manifest: RunManifest, say: Say
) -> Windows:
    """Measure one training round of ``manifest``'s model (unless ``--train-seconds`` gave
    it) and size the run's windows from it (:mod:`hypertrain.demo.windows`); say both."""
    seconds, how = options.train_seconds, "given as"
    if seconds is None:
        try:
            seconds = await measure_training(children, manifest, ws.dataset, ws.root / "probe")
        except ProbeFailed as e:
            raise DemoFailed(str(e)) from e
        how = "measured"
    windows = size_windows(
        seconds,
        trainers=options.trainers,
        others=options.nodes + options.n_auditors + 1,  # + 1: the daemon merging
        cores=os.cpu_count() or 1,
        period=manifest.beacon.period,
    )
    say(windows.line(how))
    return windows


def _check_children(daemon: Child, miners: Sequence[Child]) -> None:
    if daemon.returncode is not None:
        raise DemoFailed(f"the daemon exited with status {daemon.returncode}:\n{daemon.tail()}")
    if all(m.returncode not in (None, 0) for m in miners):
        raise DemoFailed(f"every miner failed; {miners[0].name}:\n{miners[0].tail()}")


async def _watch(
    client: httpx.AsyncClient,
    run_id: str,
    options: DemoOptions,
    daemon: Child,
    miners: Sequence[Child],
    say: Say,
    windows: Windows,
) -> tuple[list[RoundRow], float | None]:
    """Print the table until ``N`` rounds are merged and evaluated (or the time is up: each
    round's windows plus :data:`ROUND_SECONDS`, then :data:`SCORING_SECONDS`)."""
    table = Table()
    expect_audits = options.auditors > 0 or options.dispute
    initial: float | None = None
    say(HEADER)
    per_round = ROUND_SECONDS + windows.round_seconds
    with trio.move_on_after(per_round * options.rounds + SCORING_SECONDS):
        while True:
            _check_children(daemon, miners)
            run = await _run_view(client, run_id)
            for item in sorted(run.get("rounds") or [], key=lambda r: int(r["w"])):
                w = int(item["w"])
                done = table.printed.get(w)
                if done is not None and done.complete:
                    continue
                view = await _paged(client, f"/v1/runs/{run_id}/rounds/{w}", ROUND_VIEW_LISTS)
                row = RoundRow.from_view(view, expect_audits=expect_audits)
                if w == 0 and initial is None and row.heldout_loss is not None:
                    initial = row.heldout_loss
                    say(f"demo: held-out loss of theta(0): {initial:.4f}")
                line = table.update(row)
                if line is not None:
                    say(line)
            rows = table.latest()
            if sum(r.complete for r in rows) >= options.rounds:
                return rows, initial
            await trio.sleep(POLL_SECONDS)
    return table.latest(), initial


async def _paged(
    client: httpx.AsyncClient, path: str, lists: tuple[str, ...], key: Key | None = None
) -> dict[str, Any]:
    """The view at ``path`` with every page of its ``lists`` (one request while the run has at
    most 256 rounds and miners, as the demo's runs do)."""

    async def page(offset: int) -> dict[str, Any]:
        answer: dict[str, Any] = (
            await client.get(path, params={"offset": offset} if offset else None)
        ).json()
        return answer

    return await read_all_pages(page, lists, key=key)


async def _run_view(client: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    """The run view with all its rounds."""
    return await _paged(client, f"/v1/runs/{run_id}", RUN_VIEW_LISTS, round_key)


async def _drill_outcome(
    client: httpx.AsyncClient, run_id: str, drill: tuple[str, str], say: Say
) -> DrillResult:
    """Wait until the drill miner has a dispute and every one is resolved (the caller bounds
    it); say each outcome once."""
    hotkey, spec = drill
    said: set[str] = set()
    while True:
        r = await client.get(f"/v1/runs/{run_id}/disputes", params={"party": hotkey})
        disputes = r.json().get("disputes", []) if r.status_code == 200 else []
        for d in disputes:
            outcome = d.get("outcome") or {}
            if d.get("state") != "resolved" or d["dispute_id"] in said:
                continue
            said.add(d["dispute_id"])
            how = (
                f"refereed by {str(outcome.get('referee'))[:8]}"
                if outcome.get("cause") == "referee"
                else "silent past its deadline"
            )
            say(
                f"demo: dispute {d['dispute_id'][:16]} of {DRILL_NAME} (round {d['w']}):"
                f" the {outcome.get('loser_role')} lost at {outcome.get('op_spec')},"
                f" {how}, after {len(d['bisects'])} bisects"
            )
        if disputes and all(d.get("state") == "resolved" for d in disputes):
            return DrillResult(
                spec,
                tuple(
                    (str(d["outcome"]["loser_role"]), str(d["outcome"]["op_spec"]))
                    for d in disputes
                ),
            )
        await trio.sleep(POLL_SECONDS)


async def _payout(client: httpx.AsyncClient, ws: Workspace, net: _Network, say: Say) -> Payout:
    """Wait until round 0 is RELEASED (its escrow vested; the caller bounds the wait), then ask
    ``get_weights`` for the current chain epoch (the Cortex master's call) and say it."""
    while True:
        run = await _run_view(client, net.run_id)
        states = {int(r["w"]): r["state"] for r in run.get("rounds") or []}
        if states.get(0) == "RELEASED":
            break
        await trio.sleep(POLL_SECONDS)
    assert net.chain is not None
    latest = int((await client.get("/v1/beacon/latest")).json()["round"])
    genesis = net.chain.genesis_ms // 1000
    epoch = (int(net.chain.time_of(latest)) - genesis) // EPOCH_SECONDS
    headers = {"Authorization": f"Bearer {ws.internal_token}", "X-Platform-Challenge-Slug": SLUG}
    r = await client.get("/internal/v1/get_weights", params={"epoch": epoch}, headers=headers)
    if r.status_code != 200:
        raise DemoFailed(f"get_weights answered {r.status_code}: {r.text[:300]}")
    say(f"demo: round 0 RELEASED; get_weights epoch {epoch}: {r.text}")
    cheaters = tuple(h for h in net.names if h not in net.honest)
    return Payout(r.json(), net.honest, cheaters)


async def run_demo(options: DemoOptions, say: Say = _say) -> int:
    """The demo (module doc); returns the exit status."""
    started = trio.current_time()
    root = options.keep or Path(tempfile.mkdtemp(prefix="hypertrain-demo-"))
    try:
        ws = create_workspace(root)
        async with open_children(STOP_GRACE) as children:
            with trio.fail_after(STARTUP_SECONDS):
                daemon, url = await _start_daemon(children, ws, options.port, options.nodes)
            say(f"daemon: {url}")
            say(f"dashboard: {url}/")
            kept = "kept" if options.keep else "removed at the end; --keep DIR keeps them"
            say(f"demo: files in {root} ({kept}); daemon log {ws.daemon_log}")
            async with httpx.AsyncClient(base_url=url, timeout=HTTP_TIMEOUT) as client:
                api = _Admin(client, ws.admin_token)
                with trio.fail_after(SETUP_SECONDS):
                    net = await _launch(children, ws, api, url, options, say)
                rows, initial = await _watch(
                    client, net.run_id, options, daemon, net.miners, say, net.windows
                )
                drill = None
                if net.drill is not None:
                    with trio.move_on_after(DISPUTE_SECONDS):
                        drill = await _drill_outcome(client, net.run_id, net.drill, say)
                    if drill is None:
                        drill = DrillResult(net.drill[1], ())
                payout = None
                if options.auditors or options.dispute:
                    with trio.move_on_after(PAYOUT_SECONDS):
                        payout = await _payout(client, ws, net, say)
                checkpoint = None
                if options.auditors or options.dispute:
                    with trio.move_on_after(CHECKPOINT_SECONDS):
                        checkpoint = await check_checkpoint(
                            client, url, net.run_id, options.rounds - 1, root, ws.coord.ss58
                        )
                    if checkpoint is None:
                        checkpoint = CheckpointResult(
                            root / "checkpoint", failure="the last checkpoint was not final in time"
                        )
                audits = None
                if options.auditors or options.dispute:
                    await api.call(
                        "POST", f"/v1/admin/runs/{net.run_id}/honeypot/reveal", net.reveal
                    )
                    stats = await api.call("GET", f"/run/{net.run_id}/auditor-stats")
                    audits = AuditTotals.from_stats(stats)
                totals = await scrape_metrics(client)
            for miner in net.miners + net.honeypots:
                await miner.wait(STOP_GRACE)
            await daemon.stop(STOP_GRACE)
        result = verdict(rows, options.rounds, initial, audits, drill, payout)
        if result.ok and checkpoint is not None:
            result = (
                Verdict(False, f"the last checkpoint: {checkpoint.failure}")
                if checkpoint.failure is not None
                else Verdict(True, f"{result.reason}, and the last checkpoint verified by replay")
            )
        for line in summary_lines(rows, options.rounds, initial, trio.current_time() - started):
            say(line)
        if audits is not None:
            say(audits.line())
        if payout is not None:
            for line in payout.lines(net.names):
                say(line)
        say(totals.line())
        if checkpoint is not None:
            for line in checkpoint.lines(root, options.keep is not None, ws.coord.ss58):
                say(line)
        say(f"demo: {'ok' if result.ok else 'FAILED'}: {result.reason}")
        return EXIT_OK if result.ok else EXIT_FAILED
    except (DemoFailed, ChildFailed, trio.TooSlowError, httpx.HTTPError, OSError) as e:
        reason = str(e) or type(e).__name__
        say(f"demo: FAILED: {reason}")
        return EXIT_FAILED
    finally:
        if options.keep is None:
            shutil.rmtree(root, ignore_errors=True)


async def run_until_signal(options: DemoOptions, say: Say = _say) -> int:
    """:func:`run_demo` until it ends or a signal stops it (module doc); the exit status."""
    code = EXIT_INTERRUPTED
    demo = trio.CancelScope()

    async def work() -> None:
        nonlocal code
        with demo:
            code = await run_demo(options, say)

    async with open_supervisor(grace=STOP_GRACE + KILL_WAIT, on_shutdown=demo.cancel) as sup:
        sup.nursery.start_soon(work, name="demo")
    if sup.shutdown_signal is None:
        return code
    print(f"demo: stopped by {sup.shutdown_signal.name}", file=sys.stderr)
    return 128 + sup.shutdown_signal.value


def main(argv: Sequence[str]) -> int:
    """Parse ``argv`` (without ``--demo``) and run the demo; returns the exit status."""
    try:
        args = build_parser().parse_args(list(argv))
    except SystemExit as e:
        return EXIT_USAGE if e.code else EXIT_OK
    options = DemoOptions(
        rounds=args.rounds,
        miners=args.miners,
        nodes=args.nodes,
        port=args.port,
        keep=args.keep,
        auditors=args.auditors,
        honeypots=tuple(args.honeypot) if args.honeypot else ("fabricate",),
        dispute=args.dispute,
        train_seconds=args.train_seconds,
    )
    try:
        return trio.run(run_until_signal, options)
    except KeyboardInterrupt:
        print("demo: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
