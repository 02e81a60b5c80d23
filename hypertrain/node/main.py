"""``hypertrain-node``: the volunteer compute node's command line (the composition root).

::

    hypertrain-node [--key ht_...] [--dir D] [--url U] [--once] [--json] [--handle H]
                    [--cache-max-mb MB] [--leaderboard-every MIN]
                    [--proxy URL] [--cold-scorer]

Scores other people's submissions for the coordinator at ``--url`` (>
``HYPERTRAIN_COORDINATOR_URL`` > ``http://127.0.0.1:8000``; https, or http to this machine
only). The node directory is ``--dir`` > ``HYPERTRAIN_NODE_DIR`` > ``~/.hypertrain/node``; the
first run mints a key and saves it in ``node.json`` there (mode 0600); ``--key`` attaches an
existing key instead. The node's key goes to the coordinator and nowhere else: proxy
environment variables (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``) are ignored, and
``--proxy URL`` (http or https) is the only way to use one. ``--once`` takes one lease poll and
exits. One line per event on stderr;
``--json`` prints ``{node_id, handle, jobs, posted, accepted, skipped, abandoned, last_job}``
on stdout at exit. ``--cache-max-mb`` bounds the input cache in ``cache/`` of the node directory
(default 2048; least recently used inputs are deleted above it, never one a running job uses).
Each job is scored in a sandboxed child forked from one warm scorer process that imported torch
once, at start (:mod:`hypertrain.scoring.warm`); ``--cold-scorer`` starts a new scorer process
per job instead (about 3 s more a job). Every ``--leaderboard-every`` minutes (default 10)
the node prints its own leaderboard line (rank, compute credits, jobs done, agreement rate,
strikes) before its next lease.

Ctrl-C, SIGTERM or SIGHUP (and, for a node started by the demo, the demo's end) stops at once,
killing a scorer worker in progress: a job in progress is not posted (its lease expires without a
strike), and the exit status is 0. Exit status: 0 stopped, or ``--once`` polled empty or posted
its job; 1 unrecoverable (register refused, the key unknown, ``--once`` without a posted job);
2 a usage, URL, key or node-file error (one line on stderr, before any request).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Final
from urllib.parse import urlsplit

import trio

from hypertrain.cli.common import (
    EXIT_INVALID,
    EXIT_OK,
    EXIT_USAGE,
    OneLineParser,
    exception_leaves,
    positive_int_arg,
    print_json,
)
from hypertrain.compute.keys import check_handle
from hypertrain.node.cache import DEFAULT_MAX_BYTES
from hypertrain.node.client import NodeClient
from hypertrain.node.errors import IdentityError, NodeFatal, NodeFileError
from hypertrain.node.identity import coordinator_url
from hypertrain.node.nodefile import node_dir
from hypertrain.node.probe import probe_machine
from hypertrain.node.runner import NodeRunner
from hypertrain.node.runner_types import (
    DEFAULT_SETTINGS,
    NodeStatistics,
    Probed,
    RunnerSettings,
    Score,
)
from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.errors import Malformed
from hypertrain.scoring.sandbox import run_scorer
from hypertrain.scoring.warm import open_warm_scorer
from nurseries import SystemClock, lifeline_from_env, open_supervisor

__all__ = ["SHUTDOWN_GRACE_SECONDS", "build_parser", "main"]

SHUTDOWN_GRACE_SECONDS: Final = 5.0
"""A backstop only: the shutdown hook cancels the node's work at once, since a job in progress
must not be posted (its lease just expires)."""
_PROG: Final = "hypertrain-node"


def _say(line: str) -> None:
    sys.stderr.write(f"{_PROG}: {line}\n")
    sys.stderr.flush()


def _fail(message: str, code: int) -> int:
    _say(" ".join(str(message).split()))
    return code


def build_parser() -> argparse.ArgumentParser:
    """The ``hypertrain-node`` argument parser."""
    parser = OneLineParser(prog=_PROG, description="Score jobs for a hypertrain coordinator.")
    parser.add_argument("--key", help="attach this node key (ht_...) instead of node.json's")
    parser.add_argument("--dir", help="the node directory (default ~/.hypertrain/node)")
    parser.add_argument("--url", help="the coordinator (default http://127.0.0.1:8000)")
    parser.add_argument("--handle", help="the handle to register (default: the server picks)")
    parser.add_argument(
        "--proxy",
        metavar="URL",
        help="reach the coordinator through this HTTP proxy (proxy variables are ignored)",
    )
    parser.add_argument("--once", action="store_true", help="one lease poll, then exit")
    parser.add_argument("--json", action="store_true", help="print a JSON summary at exit")
    parser.add_argument(
        "--cache-max-mb",
        type=positive_int_arg,
        default=DEFAULT_MAX_BYTES >> 20,
        metavar="MB",
        help="the input cache's size bound (default %(default)s)",
    )
    parser.add_argument(
        "--leaderboard-every",
        type=positive_int_arg,
        default=int(DEFAULT_SETTINGS.standing_every or 600) // 60,
        metavar="MIN",
        help="print the node's leaderboard line this often (default %(default)s minutes)",
    )
    parser.add_argument(
        "--cold-scorer",
        action="store_true",
        help="start a scorer process per job instead of forking it from a warm one",
    )
    return parser


@asynccontextmanager
async def _open_score(cold: bool) -> AsyncIterator[Score]:
    """The node's scorer: the warm one, or a cold worker per job (``--cold-scorer``)."""
    if cold:
        yield run_scorer
        return
    async with open_warm_scorer() as scorer:
        yield scorer.score


async def _probe() -> Probed:
    hardware, caps, described = await trio.to_thread.run_sync(probe_machine, abandon_on_cancel=True)
    return Probed(hardware, tuple(caps), described)


async def _serve(args: argparse.Namespace, url: str) -> tuple[int, NodeStatistics]:
    code = EXIT_OK
    async with NodeClient(url, proxy=args.proxy) as client, _open_score(args.cold_scorer) as score:
        runner = NodeRunner(
            client=client,
            directory=node_dir(args.dir, os.environ),
            key_flag=args.key,
            handle=args.handle,
            probe=_probe,
            score=score,
            wall=SystemClock(),
            say=_say,
            settings=RunnerSettings(
                cache_max_bytes=args.cache_max_mb << 20,
                standing_every=args.leaderboard_every * 60.0,
            ),
        )

        stop = trio.CancelScope()

        async def work() -> None:
            nonlocal code
            with stop:
                code = await runner.run(once=args.once)

        try:
            async with open_supervisor(
                grace=SHUTDOWN_GRACE_SECONDS,
                on_shutdown=stop.cancel,
                lifeline=lifeline_from_env(os.environ),
            ) as supervisor:
                supervisor.nursery.start_soon(work, name="hypertrain-node")
        finally:
            if args.json:
                print_json(unstructure(runner.statistics()))
        if supervisor.shutdown_requested:
            _say("stopped (a job in progress is not posted; its lease expires without a strike)")
    return code, runner.statistics()


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point: returns the exit status (module doc)."""
    args = build_parser().parse_args(argv)
    try:
        url = coordinator_url(args.url, os.environ)
        if args.handle is not None:
            check_handle(args.handle)
        if args.proxy is not None:
            proxy = urlsplit(args.proxy)
            if proxy.scheme not in ("http", "https") or not proxy.hostname:
                raise IdentityError(f"--proxy: not an http(s) proxy URL: {args.proxy!r}")
    except IdentityError as e:
        return _fail(str(e), EXIT_USAGE)
    except Malformed as e:
        return _fail(f"--handle: {e.detail}", EXIT_USAGE)
    try:
        code, _ = trio.run(_serve, args, url)
    except BaseException as e:  # the process boundary: one line, classified
        for leaf in exception_leaves(e):
            if isinstance(leaf, IdentityError | NodeFileError):
                return _fail(str(leaf), EXIT_USAGE)
            if isinstance(leaf, NodeFatal):
                return _fail(str(leaf), EXIT_INVALID)
            if isinstance(leaf, KeyboardInterrupt):
                return EXIT_OK
        raise
    return code


if __name__ == "__main__":
    sys.exit(main())
