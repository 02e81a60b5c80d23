"""Serve an ASGI app with hypercorn's trio worker as a task of the caller's nursery.

`serve_asgi` is a service in the house style: start it with ``await nursery.start(...)`` and
receive the URL it really listens on (port 0 picks a free port). It returns after a graceful
shutdown triggered by ``shutdown_trigger``, or ends by cancellation.

Shutdown, as measured with hypercorn 0.18.0 (docs DESIGN.md section 8): hypercorn's trigger
closes the listeners but does not wake in-flight long polls or SSE streams; they run on until
``graceful_timeout`` and are then cut. So the app keeps its own "stopping" event that long polls
and streams also wait on (they answer 503 with Retry-After), and that one event is the trigger:

    stopping = trio.Event()                  # shared with the app
    url = await nursery.start(partial(serve_asgi, app, "127.0.0.1", 0,
                                      shutdown_trigger=stopping.wait))
    ...
    stopping.set()                           # app-level stop first, hypercorn with it

The trio worker does not enforce ``keep_alive_timeout`` at shutdown, so an idle keep-alive
connection holds shutdown for the whole ``graceful_timeout``: keep it small and close clients
first. It does enforce it from a connection's accept to its first request: with hypercorn's
5 s, a server taking in 10,000 long polls at once closed (or reset) the connections it had not
got around to reading yet; ``keep_alive_timeout`` (default :data:`DEFAULT_KEEP_ALIVE_TIMEOUT`)
gives them that long.
``read_timeout`` stays unset (it would cut long polls).

Every app is served through `guard_unread_bodies` (``nurseries._unread``): a response that
starts before its request body ended drains the rest (at most ``unread_body_limit`` bytes) or
closes the connection, so an early answer (401, 413, 503...) never hangs a keep-alive client
nor leaves a socket in CLOSE-WAIT.

`tune_collector_for_serving` is for a server process, called once it is up: CPython's cyclic
collector, left at its defaults, took a third of the daemon's time answering a burst of 1,000
held long polls (every 700 allocations a young collection walked the polls' live objects; a
full one the whole heap, imports included); with the startup heap frozen and young
collections every :data:`SERVING_GC_THRESHOLDS` ``[0]`` allocations it took a fiftieth.
"""

from __future__ import annotations

import gc
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Final, cast

import trio
from hypercorn.config import Config, Sockets
from hypercorn.trio.run import worker_serve
from hypercorn.typing import ASGIFramework
from hypercorn.utils import wrap_app

from nurseries._unread import (
    DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_UNREAD_BODY_LIMIT,
    ASGIApp,
    guard_unread_bodies,
)

__all__ = [
    "DEFAULT_BACKLOG",
    "DEFAULT_DRAIN_TIMEOUT",
    "DEFAULT_GRACEFUL_TIMEOUT",
    "DEFAULT_KEEP_ALIVE_TIMEOUT",
    "DEFAULT_LIFESPAN_TIMEOUT",
    "DEFAULT_UNREAD_BODY_LIMIT",
    "SERVING_GC_THRESHOLDS",
    "ASGIApp",
    "make_config",
    "serve_asgi",
    "tune_collector_for_serving",
]

log = logging.getLogger(__name__)

DEFAULT_GRACEFUL_TIMEOUT: float = 1.5
"""Seconds in-flight requests get after the shutdown trigger fires."""
DEFAULT_BACKLOG: int = 2048
"""Listen backlog; hypercorn's default of 100 lost 15-26% of 10,000 long polls here."""
SERVING_GC_THRESHOLDS: Final = (20_000, 10, 10)
"""``gc.set_threshold`` of a server process (module doc); CPython's default is (700, 10, 10)."""
DEFAULT_KEEP_ALIVE_TIMEOUT: float = 60.0
"""Seconds a connection may stay idle: before its first request, and between two (module doc)."""
DEFAULT_LIFESPAN_TIMEOUT: float = 60.0
"""Seconds the app's lifespan startup (and, separately, shutdown) may take."""


def tune_collector_for_serving() -> None:
    """Set a serving process's cyclic garbage collector up (module doc): collect once, freeze
    what survives (the imports and the long-lived objects built at startup, which later
    collections then never walk again) and collect the young generation every
    :data:`SERVING_GC_THRESHOLDS` ``[0]`` allocations. Call it once, from the program's entry
    point after its services started, never from a library or a test process."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*SERVING_GC_THRESHOLDS)


def _bind(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def make_config(
    host: str,
    port: int,
    *,
    graceful_timeout: float = DEFAULT_GRACEFUL_TIMEOUT,
    backlog: int = DEFAULT_BACKLOG,
    keep_alive_timeout: float = DEFAULT_KEEP_ALIVE_TIMEOUT,
    lifespan_timeout: float = DEFAULT_LIFESPAN_TIMEOUT,
    logger: logging.Logger | None = None,
    access_logger: logging.Logger | None = None,
) -> Config:
    """The hypercorn `Config` `serve_asgi` uses; logging goes to stdlib loggers only.

    Errors and lifecycle messages go to ``logger`` (default: this module's logger); access
    lines go to ``access_logger`` and are not produced at all when it is ``None``, the default
    (each line costs throughput). Hypercorn installs no handlers and prints nothing itself.
    """
    config = Config()
    config.bind = [_bind(host, port)]
    config.backlog = backlog
    config.graceful_timeout = graceful_timeout
    config.keep_alive_timeout = keep_alive_timeout
    config.read_timeout = None
    config.startup_timeout = lifespan_timeout
    config.shutdown_timeout = lifespan_timeout
    config.errorlog = logger if logger is not None else log
    config.accesslog = access_logger
    return config


async def serve_asgi(
    app: ASGIApp,
    host: str,
    port: int,
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    graceful_timeout: float = DEFAULT_GRACEFUL_TIMEOUT,
    backlog: int = DEFAULT_BACKLOG,
    keep_alive_timeout: float = DEFAULT_KEEP_ALIVE_TIMEOUT,
    lifespan_timeout: float = DEFAULT_LIFESPAN_TIMEOUT,
    logger: logging.Logger | None = None,
    access_logger: logging.Logger | None = None,
    unread_body_limit: int = DEFAULT_UNREAD_BODY_LIMIT,
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT,
) -> None:
    """Serve ``app`` over HTTP on ``host:port`` until shutdown or cancellation.

    Reports ``"http://HOST:PORT"`` through ``task_status.started`` once the app's lifespan
    startup completed and the socket listens (for port 0, the port the kernel chose; IPv6 hosts
    are bracketed). When ``shutdown_trigger()`` returns, new connections are refused, requests
    in flight get ``graceful_timeout`` seconds, the lifespan shutdown runs (bounded by
    ``lifespan_timeout``) and this function returns. Cancellation stops everything at once.
    Address loopback as ``127.0.0.1``, never ``localhost`` (no DNS; see DESIGN.md section 8).
    A response that starts before its request body ended first drains at most
    ``unread_body_limit`` bytes of it within ``drain_timeout`` seconds, or says
    ``Connection: close`` and closes (module doc).
    """
    config = make_config(
        host,
        port,
        graceful_timeout=graceful_timeout,
        backlog=backlog,
        keep_alive_timeout=keep_alive_timeout,
        lifespan_timeout=lifespan_timeout,
        logger=logger,
        access_logger=access_logger,
    )
    # Bind here rather than inside hypercorn: an address in use is then a plain OSError for the
    # caller, not one nested three exception groups deep (and hypercorn leaks the socket).
    # `worker_serve` is what `hypercorn.trio.serve` delegates to; it takes listening sockets.
    sock = _listen(host, port, backlog)
    sockets = Sockets(secure_sockets=[], insecure_sockets=[sock], quic_sockets=[])
    with sock:
        await worker_serve(
            wrap_app(
                cast(
                    ASGIFramework,
                    guard_unread_bodies(app, limit=unread_body_limit, timeout=drain_timeout),
                ),
                config.wsgi_max_body_size,
                "asgi",
            ),
            config,
            sockets=sockets,
            shutdown_trigger=shutdown_trigger,
            task_status=_FirstBind(task_status),
        )


def _listen(host: str, port: int, backlog: int) -> socket.socket:
    """A listening TCP socket set up as hypercorn sets up its own; closed again on failure."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class _FirstBind(trio.TaskStatus[list[str]]):
    """Turns hypercorn's list of bound URLs into the one URL we were asked to serve on.

    Passed straight through rather than starting hypercorn in a nursery of our own, which would
    wrap every failure in one more exception group.
    """

    def __init__(self, outer: trio.TaskStatus[str]) -> None:
        self._outer = outer

    def started(self, value: list[str] | None = None) -> None:
        if not value:
            raise RuntimeError("hypercorn reported no listening socket")
        self._outer.started(value[0])
