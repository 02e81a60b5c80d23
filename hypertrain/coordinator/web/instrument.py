"""The app's outermost ASGI layer: request metrics, access lines and ``GET /metrics``.

:func:`instrument` wraps the app's whole ASGI callable, outside the answer front
(:mod:`.front`) and the lease path (:mod:`.leasepath`), so it sees every HTTP request however
it is answered. For each one, when it ends (answered, failed or its client gone):

- :meth:`~hypertrain.coordinator.metrics.Metrics.on_request` with the method, the route, the
  status of the answer (``None`` when none started; 500 when the app raised before answering,
  as hypercorn then answers) and the seconds from its arrival to its end (Trio clock). The
  route is the template of the URL rule the path matches (``/v1/runs/<run_id>``), found by
  :class:`RouteTemplates`, or :data:`~hypertrain.coordinator.metrics.UNMATCHED`: never the
  raw path, so the labels stay bounded whatever paths clients send;
- with an ``access_log`` logger, one INFO line: ``GET /v1/runs/abc 200 1.2ms route=... ``
  whose record also carries ``fields`` (method, path, route, status, duration_ms, client) that
  ``--log-format json`` writes as the line's keys (:mod:`hypertrain.daemon.logs`). The query
  string is never logged (it can carry lease tokens).

With ``serve_metrics`` the layer answers ``GET`` (and ``HEAD``) :data:`METRICS_PATH` itself,
unauthenticated, with :meth:`~hypertrain.coordinator.metrics.Metrics.render`'s text; without,
that path goes to the app like any other (which answers 404): the daemon then serves it on a
listener of its own (``--metrics-bind``) with :func:`metrics_app`.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import trio
from werkzeug.exceptions import HTTPException
from werkzeug.routing import BaseConverter, Map, Rule

from hypertrain.coordinator.computehub import WORK
from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.metrics import CONTENT_TYPE, UNMATCHED, Metrics
from hypertrain.coordinator.web.answers import encode_json
from hypertrain.coordinator.web.http import JSON_CONTENT_TYPE
from nurseries import ASGIApp

__all__ = ["METRICS_PATH", "RouteTemplates", "coordinator_metrics", "instrument", "metrics_app"]

METRICS_PATH: Final = "/metrics"
_METRICS_METHODS: Final = ("GET", "HEAD")


def coordinator_metrics(ctx: Coordinator) -> Metrics:
    """New metrics whose live gauges read ``ctx`` at each scrape: the lease polls the compute
    hub holds, the open event streams, and the beacon rounds due but not ingested."""
    metrics = Metrics()
    beacon = ctx.beacon
    metrics.watch(
        long_polls=lambda: ctx.compute.waiter.waiting(WORK),
        event_streams=lambda: ctx.events.statistics().subscribers,
        beacon_lag=lambda: max(0, beacon.now_round() - beacon.latest),
    )
    return metrics


class RouteTemplates:
    """The URL rule template a path matches in ``url_map``, whatever the method.

    Matching runs over a copy of the map's rules with no methods and with every converter's
    ``to_python`` made a no-op: the same patterns in the same order, but a path whose segment
    a converter refuses (a 400) still names its rule. The copy is made at the first lookup,
    once every route was added."""

    def __init__(self, url_map: Map) -> None:
        self._source = url_map
        self._adapter: Any = None

    def _bind(self) -> Any:
        converters = {
            name: type(f"Lax{cls.__name__}", (cls,), {"to_python": _as_is})
            for name, cls in self._source.converters.items()
        }
        templates = sorted({rule.rule for rule in self._source.iter_rules()})
        lax = Map(
            [Rule(template, endpoint=template) for template in templates],
            converters=converters,
            strict_slashes=self._source.strict_slashes,
            merge_slashes=self._source.merge_slashes,
        )
        return lax.bind("coordinator")

    def __call__(self, path: str) -> str:
        """``path``'s rule template, or :data:`UNMATCHED`."""
        if self._adapter is None:
            self._adapter = self._bind()
        try:
            template, _ = self._adapter.match(path, "GET")
        except HTTPException:  # not found, or a redirect to the path with a slash
            return UNMATCHED
        return str(template)


def _as_is(_converter: BaseConverter, value: str) -> str:
    return value


async def _send(send: Any, status: int, content_type: str, body: bytes, *, head: bool) -> None:
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    if status == 405:
        headers.append((b"allow", ", ".join(_METRICS_METHODS).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else body})


async def _answer_metrics(metrics: Metrics, method: str, path: str, send: Any) -> None:
    """The metrics text for ``GET``/``HEAD``; 405 ``{"detail"}`` for any other method."""
    if method in _METRICS_METHODS:
        await _send(send, 200, CONTENT_TYPE, metrics.render(), head=method == "HEAD")
        return
    detail = encode_json({"detail": f"method {method} not allowed on {path}"})
    await _send(send, 405, JSON_CONTENT_TYPE, detail, head=False)


def _access_line(
    log: logging.Logger, scope: Any, route: str, status: int | None, seconds: float
) -> None:
    method, path = scope["method"], scope["path"]
    client = scope.get("client")
    ms = round(seconds * 1000, 3)
    fields = {
        "method": method,
        "path": path,
        "route": route,
        "status": status,
        "duration_ms": ms,
        "client": None if client is None else f"{client[0]}:{client[1]}",
    }
    shown = "-" if status is None else status
    log.info("%s %s %s %.1fms route=%s", method, path, shown, ms, route, extra={"fields": fields})


def instrument(
    app: ASGIApp,
    metrics: Metrics,
    routes: RouteTemplates,
    *,
    serve_metrics: bool,
    access_log: logging.Logger | None = None,
) -> ASGIApp:
    """``app`` inside the metrics and access-log layer (module doc)."""

    async def layer(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        own = serve_metrics and path == METRICS_PATH
        started = trio.current_time()
        status: int | None = None
        failed = False

        async def watched_send(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            if own:
                await _answer_metrics(metrics, method, path, watched_send)
            else:
                await app(scope, receive, watched_send)
        except Exception:
            failed = True
            raise
        finally:
            seconds = trio.current_time() - started
            if status is None and failed:
                status = 500
            route = METRICS_PATH if own else routes(path)
            metrics.on_request(method, route, status, seconds)
            if access_log is not None:
                _access_line(access_log, scope, route, status, seconds)

    return layer


def metrics_app(metrics: Metrics) -> ASGIApp:
    """An ASGI app that serves only :data:`METRICS_PATH` (404 ``{"detail"}`` elsewhere), for
    a listener of its own."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        if path == METRICS_PATH:
            await _answer_metrics(metrics, method, path, send)
            return
        detail = encode_json({"detail": f"not found: {method} {path}"})
        await _send(send, 404, JSON_CONTENT_TYPE, detail, head=method == "HEAD")

    return app
