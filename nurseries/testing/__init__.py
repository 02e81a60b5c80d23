"""Test helpers: in-process HTTP in virtual time, host-routed clients, service starters.

* `ASGIStreamTransport` / `open_asgi_transport`: an httpx transport that runs an ASGI app in
  a trio task and streams its responses (SSE and long polls work under the autojump clock).
* `mounted_client` / `open_mounted_client`: one `httpx.AsyncClient` with a transport per host
  and a `RefuseNetworkTransport` catch-all raising `NetworkRefusedError`.
* `start_service` / `open_service`: ``nursery.start`` with a bounded startup, for fixtures.
"""

from nurseries.testing._groups import single_exception_unwrapped
from nurseries.testing._lifespan import LifespanError
from nurseries.testing._mounts import (
    NetworkRefusedError,
    RefuseNetworkTransport,
    mounted_client,
    open_mounted_client,
)
from nurseries.testing._services import (
    DEFAULT_STARTUP_TIMEOUT,
    ServiceStartTimeout,
    open_service,
    start_service,
)
from nurseries.testing._transport import (
    DEFAULT_LIFESPAN_TIMEOUT,
    ASGIStreamTransport,
    open_asgi_transport,
)

__all__ = [
    "DEFAULT_LIFESPAN_TIMEOUT",
    "DEFAULT_STARTUP_TIMEOUT",
    "ASGIStreamTransport",
    "LifespanError",
    "NetworkRefusedError",
    "RefuseNetworkTransport",
    "ServiceStartTimeout",
    "mounted_client",
    "open_asgi_transport",
    "open_mounted_client",
    "open_service",
    "single_exception_unwrapped",
    "start_service",
]
