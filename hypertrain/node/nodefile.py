"""The node directory and ``node.json``: where a compute node keeps its one secret.

The directory is ``--dir``, else ``HYPERTRAIN_NODE_DIR``, else ``~/.hypertrain/node``; it is
created with mode 0700. ``node.json`` holds ``{key, node_id, handle, coordinator, saved_at}``
(a :class:`NodeRecord` through the one converter, so a file with another shape is refused):
written atomically with mode 0600 on every successful registration, read with the same checks
as a key file (a regular file of ours, not a link, no group/other permission bits), so another
user on the machine cannot read or swap the key. ``coordinator`` records the origin the key was
minted for: a saved key is only ever sent to that origin (``--url`` elsewhere refuses to start
unless ``--key`` is given explicitly).

A key is ``ht_`` followed by 32 base62 characters (DESIGN.md section 6), checked by the
coordinator's own :func:`hypertrain.compute.keys.is_node_key` (re-exported here); anything else
given with ``--key`` or found in node.json is refused before any request is made.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import attrs

from hypertrain.compute.keys import is_node_key
from hypertrain.node.errors import NodeFileError
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.errors import KeyfileError, SchemaError
from hypertrain.protocol.keys import read_private_file

__all__ = [
    "DIR_ENV",
    "NODE_FILE",
    "NodeRecord",
    "is_node_key",
    "load_record",
    "node_dir",
    "save_record",
]

DIR_ENV: Final = "HYPERTRAIN_NODE_DIR"
NODE_FILE: Final = "node.json"
_MAX_FILE: Final = 64 * 1024


def node_dir(flag: str | None, environ: Mapping[str, str]) -> Path:
    """The node directory (module doc), not yet created."""
    if flag:
        return Path(flag).expanduser()
    if environ.get(DIR_ENV, "").strip():
        return Path(environ[DIR_ENV].strip()).expanduser()
    return Path.home() / ".hypertrain" / "node"


@attrs.frozen
class NodeRecord:
    """The contents of node.json."""

    key: str
    node_id: str
    handle: str
    coordinator: str
    saved_at: int
    """Unix seconds."""


def load_record(directory: Path) -> NodeRecord | None:
    """The saved node.json, or None when there is none; :class:`NodeFileError` when it is
    unsafe (module doc, checked as key files are: :func:`~hypertrain.protocol.keys.
    read_private_file`) or not a valid record."""
    path = directory / NODE_FILE
    try:
        raw = read_private_file(path, _MAX_FILE, "node file")
    except FileNotFoundError:
        return None
    except KeyfileError as e:
        raise NodeFileError(e.detail) from e
    try:
        record = structure(NodeRecord, json.loads(raw))
    except (ValueError, SchemaError) as e:
        raise NodeFileError(f"{path}: not a node record ({e})") from e
    if not is_node_key(record.key):
        raise NodeFileError(f"{path}: the saved key is not a node key (ht_ + 32 base62)")
    return record


def save_record(directory: Path, record: NodeRecord) -> Path:
    """Write node.json atomically, mode 0600, creating the directory (0700) if needed."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as e:
        raise NodeFileError(f"{directory}: cannot create the node directory ({e.strerror})") from e
    path = directory / NODE_FILE
    tmp = directory / f".{NODE_FILE}.{os.getpid()}.tmp"
    data = json.dumps(unstructure(record), indent=2, sort_keys=True).encode() + b"\n"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(tmp, flags, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise NodeFileError(f"{path}: cannot write ({e.strerror})") from e
    return path
