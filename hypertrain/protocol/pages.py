"""Reading a paged view whole, on the client side (the run view's rounds, the round view's
miners; the server side is :mod:`hypertrain.coordinator.flows.pages`).

The run's roster is its own paged view (``GET /v1/runs/{id}/roster``, by hotkey: read it with
:data:`ROSTER_LISTS`); the run view carries only its counts.

A paged answer carries ``page: {offset, limit, next_offset}``; :func:`read_all_pages` asks for
the first page, then for ``next_offset`` until it is null, and returns the first answer with
the named lists of every page appended in order. A list that grew at its head between two
pages (a round opened while the client paged the run view, newest first) repeats an item;
:func:`read_all_pages` keeps the first of each ``key`` when one is given. An answer without
``page`` (a server from before pages) is the whole view. A ``next_offset`` that does not move
forward is :class:`~hypertrain.protocol.errors.Malformed`, so a confused server cannot keep a
client paging forever.

No I/O of its own: ``get(offset)`` fetches one page.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

from hypertrain.protocol.errors import Malformed

__all__ = [
    "ROSTER_LISTS",
    "ROUND_VIEW_LISTS",
    "RUN_VIEW_LISTS",
    "Key",
    "next_offset",
    "read_all_pages",
    "round_key",
]

RUN_VIEW_LISTS: Final = ("rounds",)
"""What the run view pages (newest first: read with ``key=``:func:`round_key`)."""
ROSTER_LISTS: Final = ("roster",)
"""What the roster view pages (by hotkey)."""
ROUND_VIEW_LISTS: Final = ("miners", "assignment", "scoring_jobs")
"""What the round view pages (its miners and what is per miner)."""

Get = Callable[[int], Awaitable[Mapping[str, Any]]]
Key = Callable[[Any], Any]


def next_offset(answer: Mapping[str, Any], offset: int) -> int | None:
    """The offset of the page after ``answer`` (asked at ``offset``), or None at the end."""
    page = answer.get("page")
    if page is None:
        return None
    following = page.get("next_offset") if isinstance(page, Mapping) else offset
    if following is None:
        return None
    if type(following) is not int or following <= offset:
        raise Malformed(f"page.next_offset: expected an int above {offset}, got {following!r}")
    return following


async def read_all_pages(
    get: Get, lists: Sequence[str], *, key: Key | None = None
) -> dict[str, Any]:
    """The view with every page's items of ``lists`` (module doc)."""
    offset = 0
    first = dict(await get(offset))
    merged = {name: list(first.get(name) or ()) for name in lists}
    following = next_offset(first, offset)
    while following is not None:
        offset = following
        answer = await get(offset)
        for name in lists:
            merged[name].extend(answer.get(name) or ())
        following = next_offset(answer, offset)
    for name, items in merged.items():
        if first.get(name) is None and not items:
            continue  # a null list (the assignment before d_assign) stays null
        first[name] = items if key is None else _unique(items, key)
    return first


def round_key(item: Any) -> Any:
    """The run view's round item's ``w`` (the item itself when it has none)."""
    return item.get("w") if isinstance(item, Mapping) else repr(item)


def _unique(items: list[Any], key: Key) -> list[Any]:
    seen: set[Any] = set()
    out = []
    for item in items:
        k = key(item)
        if k not in seen:
            seen.add(k)
            out.append(item)
    return out
