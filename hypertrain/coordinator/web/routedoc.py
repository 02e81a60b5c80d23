"""What a route takes and answers, declared where the route is added: the OpenAPI source.

A route module adds each route with :func:`add_route` (``app.add_url_rule`` plus a
:class:`Doc`), which keeps the declaration in the app's registry (:func:`docs_of`, by
endpoint); :mod:`.openapi` builds ``GET /openapi.json`` from the URL map and that registry
alone, so the document lists exactly the routes the app serves, and every body and answer in
it is the schema of the attrs class the route reads or answers through the one converter
(:mod:`hypertrain.protocol.jsonschema`). A route that answers something else names its media
type (:class:`Media`: an HTML page, an object's bytes, an event stream).

Errors are declared by status (:attr:`Doc.errors`): each answers the project's error body
``{"detail": str}`` (:mod:`.http`), or a class of its own where a route says more (a repeated
commit's 409 carries its receipt). The generic ones are added by :mod:`.openapi` from the rest
of the declaration: 431 on every route (the request head's bound), 400 and 413 where a body is
read, 400 where a path or query parameter is checked, 401 and 503 where a token is required.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Literal

import attrs
from quart_trio import QuartTrio

__all__ = [
    "AUTHS",
    "OCTETS",
    "Auth",
    "Doc",
    "Media",
    "Param",
    "add_route",
    "docs_of",
    "errors",
]

Auth = Literal["none", "admin", "worker", "internal", "node"]
"""The bearer a route requires (spec 9): none, the admin/worker/internal token, a node key."""
AUTHS: Final[tuple[Auth, ...]] = ("none", "admin", "worker", "internal", "node")

_REGISTRY: Final = "hypertrain.routedocs"


@attrs.frozen
class Media:
    """A body or an answer that is not JSON: its media type (``text/html``...)."""

    media_type: str


@attrs.frozen(kw_only=True)
class Param:
    """A query parameter or request header a route reads (path parameters come from the rule:
    ``<u53:w>`` is an integer in [0, 2^53-1], others strings unless :attr:`Doc.path` says)."""

    name: str
    schema: Mapping[str, Any] = attrs.field(factory=lambda: {"type": "string"}, eq=False)
    where: Literal["query", "header"] = "query"
    required: bool = False
    description: str = ""


OCTETS: Final = "application/octet-stream"
"""An object's bytes."""


@attrs.frozen(kw_only=True)
class Doc:
    """One route's declaration (module doc)."""

    summary: str
    auth: Auth = "none"
    body: object = None
    """The request body's type (JSON through the converter), a :class:`Media`, or None: no
    body read."""
    body_required: bool = True
    path: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict, eq=False)
    """Schemas of path parameters that are checked (a hex64 id...)."""
    params: tuple[Param, ...] = ()
    answers: Mapping[int, object] = attrs.field(eq=False)
    """Each status's answer: a type the converter writes (an attrs class, a union of them),
    a :class:`Media`, or None: no body."""
    errors: Mapping[int, object] = attrs.field(factory=dict, eq=False)
    """Error statuses besides the generic ones (module doc): a class, or None for the
    error body ``{"detail"}``."""
    description: str = ""


def docs_of(app: QuartTrio) -> dict[str, Doc]:
    """The app's declarations by endpoint (filled by :func:`add_route`)."""
    docs: dict[str, Doc] = app.extensions.setdefault(_REGISTRY, {})
    return docs


def add_route(
    app: QuartTrio,
    rule: str,
    endpoint: str,
    view: Callable[..., Awaitable[Any]],
    method: str,
    doc: Doc,
) -> None:
    """``app.add_url_rule`` for one method, with the route's declaration kept (module doc)."""
    app.add_url_rule(rule, endpoint, view, methods=[method])
    docs_of(app)[endpoint] = doc


def errors(*statuses: int) -> dict[int, object]:
    """``{status: None}`` for statuses answered with the plain error body."""
    return dict.fromkeys(statuses)
