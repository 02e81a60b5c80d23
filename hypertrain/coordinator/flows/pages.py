"""Pages of the public views: ``?offset=&limit=&full=`` read once, checked at the edge.

The run view (``GET /v1/runs/{id}``) pages its rounds, newest first; the round view
(``GET /v1/runs/{id}/rounds/{w}``) pages its miners, by hotkey. Both take the same query:

- ``offset``: how many items of the list to skip (default 0, an int in [0, 2^53-1]);
- ``limit``: how many to answer at most (default :data:`DEFAULT_LIMIT`, an int in
  [1, :data:`MAX_LIMIT`]);
- ``full``: ``1`` adds the per-item envelopes (the round view's Commit, Receipt, DeltaManifest
  and ReplayVerdict of each miner); ``0`` (the default) leaves them out.

Anything else in one of these parameters (``-1``, ``1.5``, ``abc``, 40 digits, ``limit=0``,
``limit=5000``, ``full=yes``) is :class:`~hypertrain.protocol.errors.Malformed`, a 400 naming
the parameter, raised by :func:`page_of` before any read. Each answer says where it stands in
``page``: ``{offset, limit, next_offset}``, ``next_offset`` null on the last page, so a client
reads every item exactly once by following ``next_offset`` (a list that grows at its head while
it pages, as the run view's rounds do, can only repeat an item, never skip one).

Pure: no quart here; the route passes ``request.args``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeVar

from attrs import frozen

from hypertrain.protocol.errors import Malformed
from hypertrain.protocol.validators import int_in, int_param, u_int

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "Page", "PageAt", "page_of"]

DEFAULT_LIMIT: Final = 256
"""Items in a page when the query names no ``limit``."""
MAX_LIMIT: Final = 1024
"""The largest ``limit`` a client may ask for."""

_FLAGS: Final = {"0": False, "1": True}

T = TypeVar("T")


@frozen
class PageAt:
    """Where a page stands, the answers' ``page`` (:meth:`Page.cut`): ``next_offset`` null on
    the last page."""

    offset: int
    limit: int
    next_offset: int | None


@frozen
class Page:
    """One page of a view's list: skip ``offset`` items, answer at most ``limit``; ``full``
    asks for the per-item envelopes too."""

    offset: int = 0
    limit: int = DEFAULT_LIMIT
    full: bool = False

    @property
    def fetch(self) -> int:
        """Rows to read: one beyond the page, which says whether a next page exists."""
        return self.limit + 1

    def cut(self, fetched: Sequence[T]) -> tuple[list[T], dict[str, Any]]:
        """The page's items of ``fetched`` (up to :attr:`fetch` rows read from ``offset`` on)
        and the answer's ``page`` object."""
        more = len(fetched) > self.limit
        return list(fetched[: self.limit]), {
            "offset": self.offset,
            "limit": self.limit,
            "next_offset": self.offset + self.limit if more else None,
        }


def page_of(args: Mapping[str, str]) -> Page:
    """The page a query asks for (module doc; 400 naming the parameter)."""
    offset = args.get("offset")
    limit = args.get("limit")
    full = args.get("full", "0")
    if full not in _FLAGS:
        raise Malformed(f"full: expected 1 or 0, got {full[:40]!r}")
    return Page(
        offset=0 if offset is None else int_param("offset", offset, u_int),
        limit=DEFAULT_LIMIT if limit is None else int_param("limit", limit, int_in(1, MAX_LIMIT)),
        full=_FLAGS[full],
    )
