"""Unwrapping exception groups that provably hold a single exception."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["single_exception_unwrapped"]


def _sole_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        if len(exc.exceptions) != 1:
            return None
        exc = exc.exceptions[0]
    return exc


@contextmanager
def single_exception_unwrapped() -> Iterator[None]:
    """Re-raise the one exception inside nested one-member groups; leave other groups alone.

    The test helpers that own a nursery use this so that an ``assert`` failing inside
    ``async with open_asgi_transport(...)`` surfaces as the `AssertionError` it is. Their own
    background tasks never raise (they report app errors to the client side), so a one-member
    group holds exactly what the block raised; a group with several members is passed on as is.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        leaf = _sole_leaf(group)
        if leaf is None:
            raise
        context = leaf.__context__
        try:
            raise leaf  # the group was only a wrapper
        finally:
            leaf.__context__ = context  # as trio's Nursery.start does: drop the group
            del leaf, context
