"""The run dashboard's routes: HTML pages over the public read views (auth none).

=====================================  ===========================================================
``GET /``                              the runs (:func:`~.dashpages.runs_page`)
``GET /runs/{id}``                     one run (:func:`~.dashpages.run_page`), ``?offset=&limit=``
                                       pages its rounds, newest first (default
                                       :data:`ROUNDS_SHOWN`, at most :data:`ROUNDS_MAX`)
=====================================  ===========================================================

Each page is one read transaction of the pure read functions the JSON views use
(:func:`~hypertrain.coordinator.flows.runview.runs_list`,
:func:`~hypertrain.coordinator.flows.dashboard.run_board`), plus, for the miners shown, the
ledger's balances when the daemon holds a ledger. Rendering is :mod:`.dashpages` (pure). An
unknown run is a 404 naming it; a bad ``offset`` or ``limit`` a 400 naming the parameter (the
JSON views' :func:`~hypertrain.coordinator.flows.pages.page_of` rules, with a smaller
``limit``): an HTML page for a client that prefers ``text/html`` (browsers), else the house's
JSON ``{"detail": ...}`` like every other route. The pages keep themselves live over
``/v1/events`` with their inline script (:mod:`.livescript`), fetching the page again at most
once per beacon period.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Final

from quart import Response, request
from quart_trio import QuartTrio

from hypertrain.coordinator.context import Coordinator
from hypertrain.coordinator.flows.auditstats import EpochClock
from hypertrain.coordinator.flows.dashboard import run_board
from hypertrain.coordinator.flows.pages import Page, page_of
from hypertrain.coordinator.flows.runview import runs_list
from hypertrain.coordinator.web.dashpages import error_page, run_page, runs_page
from hypertrain.coordinator.web.routedoc import Doc, Media, add_route, errors
from hypertrain.coordinator.web.runs import PAGE_PARAMS
from hypertrain.ledger import HotkeyAccount
from hypertrain.protocol.errors import Malformed, ProtocolError

if TYPE_CHECKING:
    from hypertrain.coordinator.web.app import AppParts

__all__ = ["ROUNDS_MAX", "ROUNDS_SHOWN", "register"]

ROUNDS_SHOWN: Final = 25
"""Rounds on a page when the query names no ``limit``."""
ROUNDS_MAX: Final = 200
"""The largest ``limit`` a page may ask for."""
_HTML: Final = "text/html; charset=utf-8"


def _page() -> Page:
    page = page_of(request.args)
    if "limit" not in request.args:
        return Page(offset=page.offset, limit=ROUNDS_SHOWN)
    if page.limit > ROUNDS_MAX:
        raise Malformed(f"limit: expected an integer from 1 to {ROUNDS_MAX}, got {page.limit}")
    return page


def _wants_html() -> bool:
    """Whether the client prefers HTML to JSON (a browser's ``Accept``; ``*/*`` does not)."""
    best = request.accept_mimetypes.best_match(["application/json", "text/html"])
    return bool(best == "text/html")


def _html(text: str, status: int = 200) -> Response:
    return Response(text, status=status, content_type=_HTML, headers={"Cache-Control": "no-cache"})


def register(app: QuartTrio, ctx: Coordinator, parts: AppParts) -> None:
    """Add ``GET /`` and ``GET /runs/{id}`` to ``app``."""
    period_ms = ctx.chain.period_ms

    def balances(hotkeys: list[str]) -> dict[str, HotkeyAccount] | None:
        feed = ctx.ledger
        if feed is None:
            return None
        return {hotkey: feed.ledger.balance(hotkey) for hotkey in hotkeys}

    async def index() -> Response:
        runs = await ctx.db.read(runs_list)
        return _html(runs_page(runs.runs, now_round=ctx.beacon.latest, period_ms=period_ms))

    async def run(run_id: str) -> Response:
        try:
            page = _page()
            clock = EpochClock.of(ctx.settings, ctx.chain)
            board = await ctx.db.read(
                partial(run_board, chain=ctx.chain, clock=clock), run_id, page
            )
        except ProtocolError as e:
            if not _wants_html():
                raise  # the house's JSON {detail} answer (web.http)
            return _html(error_page(e.status, e.detail), e.status)
        miners = [str(m["hotkey"]) for m in (board.newest or {}).get("miners") or []]
        return _html(run_page(board, balances(miners), period_ms=period_ms))

    html = {200: Media("text/html")}
    add_route(app, "/", "dashboard.index", index, "GET", Doc(summary="the runs", answers=html))
    add_route(
        app,
        "/runs/<run_id>",
        "dashboard.run",
        run,
        "GET",
        Doc(
            summary="one run's dashboard (HTML; a 4xx is JSON unless the client prefers HTML)",
            params=PAGE_PARAMS,
            answers=html,
            errors=errors(404),
        ),
    )
