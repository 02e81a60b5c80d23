"""One httpx client for many in-process hosts, and nothing for the real network."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx

from nurseries._serve import ASGIApp
from nurseries.testing._groups import single_exception_unwrapped
from nurseries.testing._transport import DEFAULT_LIFESPAN_TIMEOUT, open_asgi_transport

__all__ = [
    "NetworkRefusedError",
    "RefuseNetworkTransport",
    "mounted_client",
    "open_mounted_client",
]

CATCH_ALL = "all://"


class NetworkRefusedError(RuntimeError):
    """A request went to a host that has no in-process transport mounted.

    Deliberately not an `httpx.TransportError`: client code that retries transport errors must
    not turn a mistyped host in a test into a silent retry loop.
    """


class RefuseNetworkTransport(httpx.AsyncBaseTransport):
    """A transport that raises `NetworkRefusedError` for every request it is given."""

    def __init__(self, mounted: Iterable[str] = ()) -> None:
        self._mounted = sorted(mounted)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raise NetworkRefusedError(
            f"{request.method} {request.url}: no in-process transport is mounted for "
            f"{request.url.scheme}://{request.url.netloc.decode('ascii')} "
            f"(mounted: {', '.join(self._mounted) or 'none'}); tests never use the network"
        )


def mounted_client(
    mounts: Mapping[str, httpx.AsyncBaseTransport], **options: Any
) -> httpx.AsyncClient:
    """An `httpx.AsyncClient` routing ``mounts`` (e.g. ``{"http://coord": transport}``).

    Keys are httpx mount patterns: ``"http://coord"`` matches host ``coord`` on any port.
    Every other URL reaches a `RefuseNetworkTransport` (mounted on ``"all://"`` and used as the
    default transport). ``trust_env`` is off, so proxy variables cannot add mounts that route
    around it. ``options`` go to `httpx.AsyncClient` (``timeout``, ``headers``, ...).
    """
    if CATCH_ALL in mounts:
        raise ValueError(f"{CATCH_ALL!r} is reserved for the refusing catch-all transport")
    refuse = RefuseNetworkTransport(mounts)
    return httpx.AsyncClient(
        mounts={**mounts, CATCH_ALL: refuse}, transport=refuse, trust_env=False, **options
    )


@asynccontextmanager
async def open_mounted_client(
    apps: Mapping[str, ASGIApp],
    *,
    lifespan: bool = True,
    lifespan_timeout: float = DEFAULT_LIFESPAN_TIMEOUT,
    **options: Any,
) -> AsyncIterator[httpx.AsyncClient]:
    """`mounted_client` over one `open_asgi_transport` per app, all closed on exit.

    Apps start (lifespan included) in the order given and stop in reverse; the client is
    closed before any app stops.
    """
    with single_exception_unwrapped():
        async with AsyncExitStack() as stack:
            transports: dict[str, httpx.AsyncBaseTransport] = {}
            for pattern, app in apps.items():
                transports[pattern] = await stack.enter_async_context(
                    open_asgi_transport(app, lifespan=lifespan, lifespan_timeout=lifespan_timeout)
                )
            client = await stack.enter_async_context(mounted_client(transports, **options))
            yield client
