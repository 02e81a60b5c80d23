"""Shielded, bounded cleanup.

Cleanup that must block (release a lease, close a connection politely, flush a record) has to
run even when the surrounding code is being cancelled, and must not hang shutdown. The idiom is
``trio.move_on_after(seconds, shield=True)``; `cleanup_scope` is that idiom with a name, a log
line when the bound cuts the cleanup short, and argument checks::

    try:
        ...
    finally:
        with cleanup_scope(cfg.release_timeout, what="lease release"):
            await release()
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager

import trio

__all__ = ["cleanup_scope"]

logger = logging.getLogger(__name__)


@contextmanager
def cleanup_scope(seconds: float, *, what: str = "cleanup") -> Iterator[trio.CancelScope]:
    """Run the block shielded from outside cancellation, for at most ``seconds`` of Trio time.

    Outside cancellation (an enclosing scope being cancelled, or its deadline passing) does not
    reach the block; the block's own deadline, ``seconds`` after entering, does, and is then
    absorbed like ``move_on_after``: execution continues after the ``with``. The yielded scope
    tells the caller whether that happened (``cancelled_caught``); it is also logged as a
    warning naming ``what``. Exceptions raised by the block propagate unchanged.
    """
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"a cleanup bound must be finite and >= 0, got {seconds!r}")
    with trio.move_on_after(seconds, shield=True) as scope:
        yield scope
    if scope.cancelled_caught:
        logger.warning("%s did not finish within %.3f s and was abandoned", what, seconds)
