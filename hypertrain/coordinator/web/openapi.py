"""``GET /openapi.json``: the OpenAPI 3.1 document of every route the app serves.

Built once, at the first request (every route module has registered by then), from the app's
URL map and the declarations its routes were added with (:mod:`.routedoc`): one path per rule,
one operation per method (``HEAD`` and ``OPTIONS``, which werkzeug adds, are left out), the
request body and answers as the schemas of their attrs classes
(:class:`~hypertrain.protocol.jsonschema.SchemaBook`), the errors as spec 9's ``{"detail"}``
body with the statuses the route declares plus the generic ones (:mod:`.routedoc`). A rule
added without a declaration still appears, marked ``x-undocumented`` (the tests refuse one).
Bearer credentials are four security schemes: ``AdminToken``, ``WorkerToken``,
``InternalToken`` (with its ``X-Platform-Challenge-Slug`` header) and ``NodeKey``. Signed
envelopes are bodies (the signature is inside); nothing else authenticates.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Final

from quart import Response
from quart_trio import QuartTrio

from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.web.answers import encode_json
from hypertrain.coordinator.web.http import JSON_CONTENT_TYPE
from hypertrain.coordinator.web.routedoc import Auth, Doc, Media, Param, add_route, docs_of
from hypertrain.coordinator.web.system import VERSION
from hypertrain.protocol.errors import ErrorBody
from hypertrain.protocol.jsonschema import SchemaBook
from hypertrain.protocol.validators import U53_SCHEMA

if TYPE_CHECKING:
    from hypertrain.coordinator.web.app import AppParts

__all__ = ["OPENAPI_PATH", "SCHEMES", "build_document", "openapi_path_of", "register"]

OPENAPI_PATH: Final = "/openapi.json"
SCHEMES: Final[dict[Auth, str]] = {
    "admin": "AdminToken",
    "worker": "WorkerToken",
    "internal": "InternalToken",
    "node": "NodeKey",
}
"""The security scheme of each bearer a route may require."""
_SLUG_HEADER: Final = "X-Platform-Challenge-Slug"
_ARGUMENT: Final = re.compile(r"<(?:(\w+):)?(\w+)>")
_AUTOMATIC: Final = frozenset({"HEAD", "OPTIONS"})
_REASONS: Final = {
    200: "OK",
    201: "created",
    204: "nothing to answer",
    400: "malformed: the detail names the field or parameter",
    401: "a missing or wrong credential or signature",
    403: "a caller or signer this route does not allow",
    404: "unknown run, round, job or object",
    409: "wrong state, window closed, lease not current",
    410: "too late: counted for nothing",
    413: "body over the size limit",
    422: "well-formed but contradicts the run's contract",
    431: "request headers over the size limit",
    503: "not configured, or shutting down",
}


def openapi_path_of(rule: str) -> str:
    """A werkzeug rule as an OpenAPI path (``/v1/runs/<run_id>/rounds/<u53:w>`` ->
    ``/v1/runs/{run_id}/rounds/{w}``)."""
    return _ARGUMENT.sub(r"{\2}", rule)


def _content(book: SchemaBook, body: object) -> dict[str, Any]:
    if isinstance(body, tuple):  # one of several media types
        return {k: v for one in body for k, v in _content(book, one).items()}
    if isinstance(body, Media):
        schema: dict[str, Any] = {"type": "object"} if body.media_type == JSON_CONTENT_TYPE else {}
        return {body.media_type: {"schema": schema}}
    return {JSON_CONTENT_TYPE: {"schema": book.of(body)}}


def _answer(book: SchemaBook, status: int, answer: object) -> dict[str, Any]:
    described: dict[str, Any] = {"description": _REASONS.get(status, f"status {status}")}
    if answer is not None:
        described["content"] = _content(book, answer)
    return described


def _slug_header(slug: str) -> Param:
    """The header the internal routes require, naming this daemon's slug (403 otherwise)."""
    return Param(
        name=_SLUG_HEADER,
        schema={"enum": [slug]},
        where="header",
        required=True,
        description="the challenge's slug (403 when another)",
    )


def _parameters(rule: str, doc: Doc, slug: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for converter, name in _ARGUMENT.findall(rule):
        schema = U53_SCHEMA if converter == "u53" else doc.path.get(name, {"type": "string"})
        out.append({"name": name, "in": "path", "required": True, "schema": dict(schema)})
    params = (*doc.params, _slug_header(slug)) if doc.auth == "internal" else doc.params
    for param in params:
        described: dict[str, Any] = {"name": param.name, "in": param.where}
        described["required"] = param.required
        described["schema"] = dict(param.schema)
        if param.description:
            described["description"] = param.description
        out.append(described)
    return out


def _error_statuses(rule: str, doc: Doc) -> dict[int, object]:
    """The route's error statuses: the generic ones (:mod:`.routedoc`) and its own."""
    found: dict[int, object] = {431: None}
    if doc.body is not None:
        found |= {400: None, 413: None}
    if _ARGUMENT.search(rule) or doc.params:
        found[400] = None
    if _ARGUMENT.search(rule):
        found[404] = None
    if doc.auth != "none":
        found[401] = None
    if doc.auth in ("admin", "worker", "internal"):
        found[503] = None
    if doc.auth == "internal":
        found[403] = None
    return found | dict(doc.errors)


def _operation(book: SchemaBook, rule: str, endpoint: str, doc: Doc, slug: str) -> dict[str, Any]:
    operation: dict[str, Any] = {"operationId": endpoint, "summary": doc.summary}
    if doc.description:
        operation["description"] = doc.description
    parameters = _parameters(rule, doc, slug)
    if parameters:
        operation["parameters"] = parameters
    if doc.auth != "none":
        operation["security"] = [{SCHEMES[doc.auth]: []}]
    if doc.body is not None:
        operation["requestBody"] = {
            "required": doc.body_required,
            "content": _content(book, doc.body),
        }
    responses = {str(s): _answer(book, s, a) for s, a in sorted(doc.answers.items())}
    for status, error in sorted(_error_statuses(rule, doc).items()):
        if str(status) not in responses:
            responses[str(status)] = _answer(book, status, error or ErrorBody)
    operation["responses"] = responses
    return operation


def build_document(app: QuartTrio, slug: str) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``app``'s URL map and declarations (module doc) for the
    daemon of challenge ``slug``."""
    book = SchemaBook()
    docs = docs_of(app)
    paths: dict[str, dict[str, Any]] = {}
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: (r.rule, r.endpoint)):
        doc = docs.get(rule.endpoint)
        item = paths.setdefault(openapi_path_of(rule.rule), {})
        for method in sorted((rule.methods or set()) - _AUTOMATIC):
            if doc is None:
                item[method.lower()] = {
                    "operationId": rule.endpoint,
                    "x-undocumented": True,
                    "responses": {"default": {"description": "undocumented"}},
                }
            else:
                item[method.lower()] = _operation(book, rule.rule, rule.endpoint, doc, slug)
    bearer = {"type": "http", "scheme": "bearer"}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "hypertrain coordinator",
            "version": VERSION,
            "description": "Every route of the coordinator daemon (spec/protocol.md section 9).",
        },
        "paths": paths,
        "components": {
            "schemas": dict(sorted(book.schemas.items())),
            "securitySchemes": {name: dict(bearer) for name in SCHEMES.values()},
        },
    }


def register(app: QuartTrio, ctx: Coordinator, parts: AppParts) -> None:
    """Add ``GET /openapi.json`` (and the declaration of Quart's static route) to ``app``."""
    built: list[bytes] = []

    async def document() -> Response:
        if not built:
            built.append(encode_json(build_document(app, ctx.settings.slug)))
        return Response(built[0], content_type=JSON_CONTENT_TYPE)

    add_route(
        app,
        OPENAPI_PATH,
        "openapi.document",
        document,
        "GET",
        Doc(summary="this document", answers={200: Media(JSON_CONTENT_TYPE)}),
    )
    docs_of(app)["static"] = Doc(
        summary="a static file of the app",
        answers={200: Media("application/octet-stream")},
    )
