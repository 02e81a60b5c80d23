"""``hypertrain beacon``: push rounds to a coordinator, check relays, verify a round, and serve
a local chain.

Exit statuses of ``beacon push`` (the operator guide's, binding): 0 after a good ``--once``
tick or on SIGTERM/SIGINT; 1 on a refusal by the service (409 conflict, any other status), a
failed ``--once`` tick or ``--max-failures`` failed ticks in a row; 2 on a usage error, a
401/403, or a token file that is not one token. ``beacon check``: 0 PASS, 1 FAIL, 3 relays
unreachable. ``beacon verify``: 0 valid, 1 invalid, 2 usage.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import httpx
import trio

from hypertrain.beacon.bls import check_round
from hypertrain.beacon.chain import QUICKNET, BeaconRound, ChainInfo
from hypertrain.beacon.check import DEFAULT_CHECK_TIMEOUT, live_check, offline_check
from hypertrain.beacon.errors import (
    PusherGaveUp,
    SinkAuthError,
    SinkRefused,
    TokenFileError,
)
from hypertrain.beacon.local import LocalChain, LocalChainError, local_chain_app
from hypertrain.beacon.pusher import (
    DEFAULT_CATCH_UP,
    DEFAULT_INTERVAL,
    DEFAULT_MAX_FAILURES,
    Pusher,
)
from hypertrain.beacon.relays import DEFAULT_QUERY_TIMEOUT, DEFAULT_RELAYS, RelayClient
from hypertrain.beacon.sinks import HttpSink, read_token
from hypertrain.cli.common import (
    EXIT_INVALID,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Subparsers,
    fail,
    positive_int_arg,
    print_json,
    read_json,
)
from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.errors import Malformed
from nurseries import (
    DEFAULT_SHUTDOWN_SIGNALS,
    Supervisor,
    SystemClock,
    run_until_shutdown,
    serve_asgi,
)

__all__ = ["PushOptions", "load_chain", "push_main", "register", "serve_local_main"]

PUSH_GRACE: Final = 5.0
"""Seconds a tick in flight gets to finish after SIGTERM (the pusher stops at once when idle)."""
SERVE_GRACE: Final = 3.0
"""Seconds the local relay gets to finish in-flight requests after SIGTERM."""

Emit = Callable[[dict[str, Any]], None]


def _emit_line(value: dict[str, Any]) -> None:
    print_json(value)
    sys.stdout.flush()


def load_chain(spec: str) -> ChainInfo:
    """``quicknet`` or a file holding a chain's ``/info`` JSON; CliError (exit 2) otherwise."""
    if spec == "quicknet":
        return QUICKNET
    try:
        return ChainInfo.from_json(read_json(spec))
    except CliError as e:
        raise CliError(f"--chain: {e}", EXIT_USAGE) from e
    except Malformed as e:
        raise CliError(f"--chain {spec}: {e.detail}", EXIT_USAGE) from e


def _relay_client(
    relays: Sequence[str],
    chain: ChainInfo,
    client: httpx.AsyncClient,
    query_timeout: float = DEFAULT_QUERY_TIMEOUT,
) -> RelayClient:
    try:
        return RelayClient(relays, chain, client=client, query_timeout=query_timeout)
    except ValueError as e:
        raise CliError(f"--relay: {e}") from e


@attrs.frozen
class PushOptions:
    """The settings of ``beacon push``."""

    api: str
    token_file: Path
    relays: tuple[str, ...] = DEFAULT_RELAYS
    chain: ChainInfo = QUICKNET
    interval: float = DEFAULT_INTERVAL
    catch_up: int = DEFAULT_CATCH_UP
    max_failures: int = DEFAULT_MAX_FAILURES
    once: bool = False


async def push_main(
    options: PushOptions,
    *,
    client: httpx.AsyncClient,
    emit: Emit = _emit_line,
    signals: Sequence[int] = DEFAULT_SHUTDOWN_SIGNALS,
) -> int:
    """Run the pusher program; returns its exit status (see the module docstring)."""
    try:
        read_token(options.token_file)
        relays = _relay_client(options.relays, options.chain, client)
    except TokenFileError as e:
        return fail(e.detail, EXIT_USAGE)
    except CliError as e:
        return fail(str(e), e.code)
    pusher = Pusher(
        relays,
        HttpSink(options.api, options.token_file, client=client),
        interval=options.interval,
        catch_up=options.catch_up,
        max_failures=options.max_failures,
        report=lambda record: emit(unstructure(record)),
    )
    failed_once: list[str] = []

    async def main(supervisor: Supervisor) -> None:
        if options.once:
            record = await pusher.tick()
            if not record.ok:
                failed_once.append(f"tick failed: {record.error}")
        else:
            supervisor.nursery.start_soon(pusher.run, name="beacon pusher")

    code = EXIT_OK
    try:
        await run_until_shutdown(
            main, grace=PUSH_GRACE, signals=signals, on_shutdown=pusher.request_stop
        )
        if failed_once:
            code = fail(failed_once[0], EXIT_INVALID)
    except* (SinkAuthError, TokenFileError) as group:
        code = fail(_first_detail(group), EXIT_USAGE)
    except* (SinkRefused, PusherGaveUp) as group:
        code = fail(_first_detail(group), EXIT_INVALID)
    return code


def _first_detail(group: BaseExceptionGroup[Any]) -> str:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return str(getattr(exc, "detail", exc))


async def serve_local_main(
    state_dir: Path,
    host: str,
    port: int,
    period: float | None,
    *,
    emit: Emit = _emit_line,
    signals: Sequence[int] = DEFAULT_SHUTDOWN_SIGNALS,
) -> int:
    """Serve a local chain relay until a shutdown signal; prints ``{url, info}`` once bound."""
    try:
        chain = LocalChain.open(state_dir, clock=SystemClock(), period=period)
    except LocalChainError as e:
        raise CliError(e.detail) from e
    stopping = trio.Event()
    bind_errors: list[OSError] = []

    async def main(supervisor: Supervisor) -> None:
        serve = functools.partial(
            serve_asgi, local_chain_app(chain), host, port, shutdown_trigger=stopping.wait
        )
        try:
            url = await supervisor.nursery.start(serve)
        except OSError as e:  # raised by the bind, before serving started
            bind_errors.append(e)
            return
        emit({"url": url, "info": chain.info.to_json()})

    await run_until_shutdown(main, grace=SERVE_GRACE, signals=signals, on_shutdown=stopping.set)
    if bind_errors:
        raise CliError(f"cannot listen on {host}:{port}: {bind_errors[0]}")
    return EXIT_OK


def _client() -> httpx.AsyncClient:
    return httpx.AsyncClient(follow_redirects=False, trust_env=False)


def _push(args: argparse.Namespace) -> int:
    options = PushOptions(
        api=args.api,
        token_file=Path(args.admin_token_file),
        relays=tuple(args.relay or DEFAULT_RELAYS),
        chain=load_chain(args.chain),
        interval=args.interval,
        catch_up=args.catch_up,
        max_failures=args.max_failures,
        once=args.once,
    )

    async def run() -> int:
        async with _client() as client:
            return await push_main(options, client=client)

    return trio.run(run)


def _check(args: argparse.Namespace) -> int:
    chain = load_chain(args.chain)
    if not args.live:
        code, report = offline_check(chain)
    else:
        urls = args.relay or list(DEFAULT_RELAYS)

        async def run() -> tuple[int, dict[str, Any]]:
            async with _client() as client:
                relays = _relay_client(urls, chain, client, query_timeout=args.timeout)
                return await live_check(relays, budget=args.timeout)

        code, report = trio.run(run)
    print_json(report)
    return code


def _verify(args: argparse.Namespace) -> int:
    chain = load_chain(args.chain)
    try:
        rnd = BeaconRound.from_json(read_json(args.input))
        check_round(chain, rnd)
    except Malformed as e:
        raise CliError(f"invalid round: {e.detail}", EXIT_INVALID) from e
    print_json(
        {"valid": True, "round": rnd.round, "randomness": rnd.randomness, "chain": chain.hash}
    )
    return EXIT_OK


def _serve(args: argparse.Namespace) -> int:
    return trio.run(serve_local_main, Path(args.state_dir), args.host, args.port, args.period)


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < 86400:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds in (0, 86400)")
    return seconds


def _port(value: str) -> int:
    if not value.isascii() or not value.isdigit() or not 0 <= int(value) <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number")
    return int(value)


def register(subparsers: Subparsers[Any]) -> None:
    """Add ``beacon push``, ``beacon check``, ``beacon verify`` and ``beacon local serve``."""
    group = subparsers.add_parser("beacon", help="drand beacon: push, check, verify, local chain")
    commands = group.add_subparsers(title="beacon commands", metavar="COMMAND", required=True)
    chain_help = "quicknet (default) or a file with the chain's /info JSON"
    relay_help = "relay base URL (repeatable; default: drand's public relays)"

    push = commands.add_parser("push", help="push verified rounds to a coordinator, every tick")
    push.add_argument("--api", required=True, metavar="URL", help="coordinator base URL")
    push.add_argument("--admin-token-file", required=True, metavar="FILE")
    push.add_argument("--relay", action="append", metavar="URL", help=relay_help)
    push.add_argument("--interval", type=_seconds, default=DEFAULT_INTERVAL, metavar="S")
    push.add_argument("--catch-up", type=positive_int_arg, default=DEFAULT_CATCH_UP, metavar="N")
    push.add_argument("--once", action="store_true", help="run one tick and exit")
    push.add_argument(
        "--max-failures", type=positive_int_arg, default=DEFAULT_MAX_FAILURES, metavar="N"
    )
    push.add_argument("--chain", default="quicknet", metavar="quicknet|FILE", help=chain_help)
    push.set_defaults(handler=_push)

    check = commands.add_parser("check", help="check the pinned chain (and relays with --live)")
    check.add_argument("--live", action="store_true", help="fetch info and latest from relays")
    check.add_argument("--relay", action="append", metavar="URL", help=relay_help)
    check.add_argument("--chain", default="quicknet", metavar="quicknet|FILE", help=chain_help)
    check.add_argument("--timeout", type=_seconds, default=DEFAULT_CHECK_TIMEOUT, metavar="S")
    check.set_defaults(handler=_check)

    verify = commands.add_parser("verify", help="verify one round's JSON offline")
    verify.add_argument("input", metavar="FILE", help="round JSON file, or - for stdin")
    verify.add_argument("--chain", default="quicknet", metavar="quicknet|FILE", help=chain_help)
    verify.set_defaults(handler=_verify)

    local = commands.add_parser("local", help="a local development chain")
    local_commands = local.add_subparsers(title="local commands", metavar="COMMAND", required=True)
    serve = local_commands.add_parser("serve", help="serve a local chain as a drand relay")
    serve.add_argument("--state-dir", required=True, metavar="DIR")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=_port, default=0, metavar="P", help="0 picks a free port")
    serve.add_argument("--period", type=_seconds, default=None, metavar="S")
    serve.set_defaults(handler=_serve)
