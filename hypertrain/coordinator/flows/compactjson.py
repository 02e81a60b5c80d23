"""The compact JSON of every answer and event, with parts encoded once and spliced in.

:data:`COMPACT_JSON` is the one encoder (``json.dumps`` with ``separators=(",", ":")`` and
``allow_nan=False``, built once). :func:`encode_json` encodes a value with it, as bytes.

A view may carry a part whose JSON text was encoded earlier and kept (:class:`Encoded`): the
round view's ``assignment``, a pure function of the run, the round and a beacon signature, is
encoded once per miner and reused by every later render of the view. :func:`encode_json`
splices an :class:`Encoded` that is a value of the top-level object as it is, and the bytes are
exactly those of encoding the value it was encoded from in its place: compact JSON of an object
is ``{`` + the ``"key":value`` items joined by ``,`` + ``}``, and of a list ``[`` + the items
joined by ``,`` + ``]`` (:func:`encoded_list`), each item encoded on its own by the same
encoder. An :class:`Encoded` anywhere else is a ``TypeError`` (as any value JSON cannot
encode). Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Final

from attrs import frozen

__all__ = ["COMPACT_JSON", "Encoded", "encode_json", "encoded_list"]

COMPACT_JSON: Final = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
"""The compact JSON of events and answers (``json.dumps`` with these options, without building
an encoder for every call: a request publishes several events and sends one answer)."""


@frozen
class Encoded:
    """JSON text encoded by :data:`COMPACT_JSON` earlier, spliced in as it is."""

    json: bytes


def encoded_list(items: Iterable[bytes]) -> Encoded:
    """The list of the values whose compact JSON ``items`` are, in order."""
    return Encoded(b"[" + b",".join(items) + b"]")


def _encode(value: Any) -> bytes:
    return COMPACT_JSON.encode(value).encode()


def encode_json(value: Any) -> bytes:
    """``value`` as compact JSON bytes; an :class:`Encoded` value of a top-level object (whose
    keys are then strings) is spliced in (module doc)."""
    if not isinstance(value, dict) or not any(isinstance(v, Encoded) for v in value.values()):
        return _encode(value)
    items = []
    for key, item in value.items():
        if not isinstance(key, str):
            raise TypeError(f"keys of an object with encoded parts must be str, not {key!r}")
        items.append(
            _encode(key) + b":" + (item.json if isinstance(item, Encoded) else _encode(item))
        )
    return b"{" + b",".join(items) + b"}"
