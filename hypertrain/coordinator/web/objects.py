"""Object routes: downloads, granted delta uploads and the admin start-state publish (spec 9).

=================================================  ===============================================
``GET /v1/objects/{sha256}``                        raw bytes; worker/admin token or signed headers
``PUT /v1/uploads/{grant}``                         raw bytes of a granted delta
``PUT /v1/aggregator/objects/{sha256}``             admin: raw bytes of any object
``PUT /v1/aggregator/runs/{id}/rounds/{w}/state``   admin: publish round ``w``'s start state
=================================================  ===============================================

Downloads: 400 for a bad key, 404 for an unknown object. A request with an ``Authorization``
header (or without any ``X-HT-*`` header) needs the worker token or the admin token (an
external aggregator reads deltas with the admin token); when it is neither, the answer is the
worker token's refusal (401/503). Otherwise the four signed headers of
:mod:`hypertrain.protocol.object_auth` (400 malformed or expired, 401 bad signature) of a
hotkey on the run's roster, neither removed nor blacklisted (403). The body is streamed from
the store, which verifies the hash before the first chunk and again at the end. A private
object (a hidden scoring trace, :mod:`hypertrain.coordinator.services.scorefeed`) is served to
the admin token only and is 404 to anyone else, as if it did not exist.

Uploads: the grant (from ``POST .../uploads``) names the object's sha256 and size; unknown grant
404, expired (``D >= d_upload``) 409. The body is streamed into
:meth:`~hypertrain.store.ObjectStore.put_stream` with both declared, so a wrong hash or size is
422 (a longer body too) and stores nothing; an object already stored answers 200 without
reading the body (``serve_asgi`` drains it or closes the connection). These bodies are
megabytes: this module defines the request class (:class:`UploadAwareRequest`, installed by
``create_app``) that lifts the app's 1 MiB ``MAX_CONTENT_LENGTH`` to
:data:`~hypertrain.coordinator.flows.miner.MAX_UPLOAD_BYTES` for paths under ``/v1/uploads/``
and ``/v1/aggregator/objects/`` only (for a grant, its exact size is the real bound).

Admin uploads (``hypertrain aggregate`` on another machine stores a merge's OuterState blobs,
start state and tape this way): 400 bad key, 401/503 admin token (checked before the body is
read), then the body is streamed into ``put_stream`` with the key as the expected sha256 and
``MAX_UPLOAD_BYTES`` as the cap (the request class lifts the body limit under
:data:`ADMIN_UPLOAD_PREFIX` too): a wrong hash is 422 and stores nothing, over the cap 413.
Answers 200 ``{sha256, size}``; idempotent (an object already stored answers 200 without
storing again). Stored objects are recorded in the ``objects`` catalog like granted uploads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import trio
from quart import Response, request
from quart_trio import QuartTrio
from quart_trio.wrappers import TrioRequest

from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.flows.miner import MAX_UPLOAD_BYTES, upload_grant
from hypertrain.coordinator.flows.startstate import (
    StatePublished,
    StateRequest,
    check_state_blob,
    publish_state,
    state_target,
)
from hypertrain.coordinator.tables.miners import is_active_member
from hypertrain.coordinator.tables.private import is_private
from hypertrain.coordinator.web.auth import require_admin, require_worker
from hypertrain.coordinator.web.http import json_response, object_response, read_json
from hypertrain.coordinator.web.routedoc import OCTETS, Doc, Media, add_route, errors
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.errors import (
    AuthError,
    Conflict,
    ContractMismatch,
    Malformed,
    NotConfigured,
    NotFound,
    PayloadTooLarge,
    UnauthorizedSigner,
)
from hypertrain.protocol.object_auth import has_signed_headers, verify_headers
from hypertrain.protocol.validators import HEX64_RE, pattern
from hypertrain.store.catalog import record_object
from hypertrain.store.keys import ObjectInfo
from hypertrain.store.objects import check_key

if TYPE_CHECKING:
    from hypertrain.coordinator.web.app import AppParts

__all__ = [
    "ADMIN_UPLOAD_PREFIX",
    "UPLOAD_PREFIX",
    "UPLOAD_TIMEOUT",
    "UploadAwareRequest",
    "register",
]

UPLOAD_PREFIX: Final = "/v1/uploads/"
ADMIN_UPLOAD_PREFIX: Final = "/v1/aggregator/objects/"
UPLOAD_TIMEOUT: Final = 600.0
"""Seconds (Trio clock) a client may take to send one delta upload."""


class UploadAwareRequest(TrioRequest):
    """quart-trio's request, with the upload paths' body limit raised (module doc)."""

    def __init__(self, method: str, scheme: str, path: str, *args: Any, **kwargs: Any) -> None:
        if path.startswith((UPLOAD_PREFIX, ADMIN_UPLOAD_PREFIX)):
            kwargs["max_content_length"] = MAX_UPLOAD_BYTES
        super().__init__(method, scheme, path, *args, **kwargs)


def register(app: QuartTrio, ctx: Coordinator, parts: AppParts) -> None:
    """Add the object routes to ``app`` (whose request class must be
    :class:`UploadAwareRequest`, as ``create_app`` sets it)."""

    async def authorize(sha256: str) -> None:
        headers = request.headers
        if await ctx.db.read(is_private, sha256):
            # A hidden trace: the admin only (nodes get it through a compute lease).
            try:
                require_admin(ctx)
            except (AuthError, NotConfigured):
                raise NotFound(f"object {sha256} not found") from None
            return
        if headers.get("Authorization") is not None or not has_signed_headers(headers):
            try:
                require_worker(ctx)
            except (AuthError, NotConfigured) as refused:
                try:
                    require_admin(ctx)
                except (AuthError, NotConfigured):
                    raise refused from None
            return
        signer = verify_headers(headers, sha256, now_round=ctx.beacon.latest)
        if not await ctx.db.read(is_active_member, signer.run_id, signer.hotkey):
            raise UnauthorizedSigner(f"{signer.hotkey} is not rostered in run {signer.run_id}")

    async def get_object(sha256: str) -> Response:
        check_key(sha256)
        await authorize(sha256)
        return object_response(ctx.objects, sha256)

    async def put_upload(grant_id: str) -> Response:
        grant = await ctx.db.read(upload_grant, grant_id)
        if not ctx.objects.exists(grant.sha256):
            try:
                with trio.fail_after(UPLOAD_TIMEOUT):
                    info = await ctx.objects.put_stream(
                        request.body,
                        expected_sha256=grant.sha256,
                        size_cap=grant.size,
                        expected_size=grant.size,
                    )
            except trio.TooSlowError:
                raise Malformed(f"upload not received within {UPLOAD_TIMEOUT:g} s") from None
            except PayloadTooLarge:
                raise ContractMismatch(
                    f"object is longer than the committed delta_bytes {grant.size}"
                ) from None
            await ctx.db.write(record_object, info, int(ctx.wall.now()))
        return json_response(unstructure(ObjectInfo(grant.sha256, grant.size)))

    async def put_admin_object(sha256: str) -> Response:
        check_key(sha256)
        require_admin(ctx)
        if ctx.objects.exists(sha256):
            return json_response(unstructure(ObjectInfo(sha256, ctx.objects.size_of(sha256))))
        try:
            with trio.fail_after(UPLOAD_TIMEOUT):
                info = await ctx.objects.put_stream(
                    request.body, expected_sha256=sha256, size_cap=MAX_UPLOAD_BYTES
                )
        except trio.TooSlowError:
            raise Malformed(f"upload not received within {UPLOAD_TIMEOUT:g} s") from None
        await ctx.db.write(record_object, info, int(ctx.wall.now()))
        return json_response(unstructure(info))

    async def put_state(run_id: str, w: int) -> Response:
        require_admin(ctx)
        wanted = structure(StateRequest, await read_json(ctx))
        theta_hash, published = await ctx.db.read(state_target, run_id, w, wanted.row)
        if not published:
            for what, sha in (("theta_start", wanted.theta_start_sha256), ("v0", wanted.v0_sha256)):
                if sha is not None and not ctx.objects.exists(sha):
                    raise Conflict(f"{what} object {sha} is not in the object store")
            check_state_blob(await ctx.objects.get(wanted.theta_start_sha256), theta_hash)
            await ctx.db.write(publish_state, run_id, w, wanted.row)
        answer = StatePublished(run_id, w, wanted.theta_start_sha256, wanted.v0_sha256)
        return json_response(unstructure(answer))

    sha = {"sha256": pattern(HEX64_RE)}
    add_route(
        app,
        "/v1/objects/<sha256>",
        "objects.get",
        get_object,
        "GET",
        Doc(
            summary="a stored object's bytes",
            auth="worker",
            path=sha,
            answers={200: Media(OCTETS)},
            errors=errors(403, 503),
            description="The worker or admin token, or a rostered miner's signed headers.",
        ),
    )
    add_route(
        app,
        f"{UPLOAD_PREFIX}<grant_id>",
        "objects.upload",
        put_upload,
        "PUT",
        Doc(
            summary="upload a granted object (the grant's URL is the credential)",
            body=Media(OCTETS),
            answers={200: ObjectInfo},
            errors=errors(422),
        ),
    )
    add_route(
        app,
        f"{ADMIN_UPLOAD_PREFIX}<sha256>",
        "objects.admin_put",
        put_admin_object,
        "PUT",
        Doc(
            summary="store an object under its sha256",
            auth="admin",
            path=sha,
            body=Media(OCTETS),
            answers={200: ObjectInfo},
            errors=errors(422),
        ),
    )
    add_route(
        app,
        "/v1/aggregator/runs/<run_id>/rounds/<u53:w>/state",
        "objects.state",
        put_state,
        "PUT",
        Doc(
            summary="publish a round's start state (write-once)",
            auth="admin",
            body=StateRequest,
            answers={200: StatePublished},
            errors=errors(409, 422),
        ),
    )
