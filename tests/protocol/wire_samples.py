"""Shared sample keys and bodies for the wire-format tests (a plain module, not a conftest)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from hypertrain.protocol.converter import unstructure
from hypertrain.protocol.example import example_bodies, example_leaf_preimage, example_manifest
from hypertrain.protocol.keys import Keypair

MINER = Keypair.from_seed(bytes([7]) * 32)
AUDITOR = Keypair.from_seed(bytes([8]) * 32)
COORD = Keypair.from_seed(bytes(range(32)))
OTHER = Keypair.from_seed(bytes([9]) * 32)

MANIFEST = example_manifest()
RUN_ID = MANIFEST.run_id()
OTHER_RUN_ID = "ab" * 32


def bodies() -> dict[str, dict[str, Any]]:
    """A fresh, valid JSON body for each of the 15 types and for LeafPreimage."""
    result = {
        name: copy.deepcopy(dict(body))
        for name, body in example_bodies(MINER.ss58, AUDITOR.ss58).items()
    }
    result["RunManifest"] = unstructure(MANIFEST)
    result["LeafPreimage"] = unstructure(example_leaf_preimage(RUN_ID))
    return result


def leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every (path, scalar) in a JSON value; a path is a tuple of keys and indices."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from leaves(item, (*path, index))
    else:
        yield path, value


def replaced(body: dict[str, Any], path: tuple[Any, ...], new: Any) -> dict[str, Any]:
    """A deep copy of ``body`` with the item at ``path`` set to ``new``."""
    result = copy.deepcopy(body)
    target: Any = result
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = new
    return result


def json_path(path: tuple[Any, ...]) -> str:
    """The ``$.a[0].b`` spelling of a path, as SchemaError details name fields."""
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
