"""Compute nodes in the store: register, authenticate, profile (``compute_nodes``).

Plain functions of a ``sqlite3.Connection``, each the body of one ``db.write``/``db.read``.

- :func:`register_node`: without a key it mints one (returned once; only its hash is stored)
  and creates a node under the given handle (validated, 409 when taken, case-insensitive) or a
  generated one; with a key it attaches to that key's node (401 when unknown or malformed),
  renaming it when a different handle is given. Capabilities and hardware are replaced, and
  the node's network becomes ``network`` (the request's; None keeps it). A mint is refused
  with 429 when its network minted its limit in the last minute, and starts on probation when
  its network had a node disabled in the last day (:mod:`.sybils`). A new node is its own
  account, unless it is minted with ``account``, an existing node key (401 when unknown):
  then it joins that key's account, and no two copies of one job go to that account
  (:mod:`.pairing`); ``account`` with ``key`` is 400 (a node's account is set at its mint).
- :func:`authenticate`: 401 for a missing, malformed or unknown key (the stored digest is
  compared in constant time); refreshes ``last_seen_ms``. A disabled node authenticates (it
  may still post results of copies it holds); only leasing refuses it. :func:`node_of_key`
  is the same check without the write, :func:`mark_seen` the write.
- :func:`normalise_capabilities`: a JSON list of at most :data:`MAX_CAPABILITIES` ids of
  ``[a-z0-9][a-z0-9._-]{0,63}``, sorted and deduplicated (unknown ids are kept; routing ignores
  them). :func:`normalise_hardware`: lower-cased, each run of characters outside ``[a-z0-9]``
  becomes ``-``, trimmed of ``-``, cut to 64 characters; empty or null is ``cpu-generic``.
"""

from __future__ import annotations

import json
import re
import secrets
import sqlite3
from typing import Final

import attrs

from hypertrain.compute.keys import (
    check_handle,
    is_node_key,
    mint_key,
    new_handle,
    secret_hash,
    secret_matches,
)
from hypertrain.compute.model import DEFAULT_SETTINGS, ComputeSettings, Event, Node
from hypertrain.compute.sybils import check_mint, probation_at_mint
from hypertrain.protocol.errors import AuthError, Conflict, Malformed, NotFound

__all__ = [
    "DEFAULT_HARDWARE",
    "MAX_CAPABILITIES",
    "authenticate",
    "get_node",
    "node_of_key",
    "normalise_capabilities",
    "normalise_hardware",
    "online_nodes",
    "register_node",
    "set_profile",
]

DEFAULT_HARDWARE: Final = "cpu-generic"
MAX_CAPABILITIES: Final = 64
_CAPABILITY: Final = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_HARDWARE_RAW_LIMIT: Final = 256
_HARDWARE_LIMIT: Final = 64
_NODE_COLUMNS: Final = (
    "node_id, handle, capabilities, hardware, created_ms, last_seen_ms, jobs_done, credits,"
    " compute_credits, disabled_until_ms, account, network, probation"
)


def normalise_capabilities(value: object) -> tuple[str, ...]:
    """The stored capability list (module doc); ``Malformed`` otherwise."""
    if not isinstance(value, list | tuple):
        raise Malformed("capabilities: must be a list of challenge ids")
    if len(value) > MAX_CAPABILITIES:
        raise Malformed(f"capabilities: at most {MAX_CAPABILITIES} ids")
    for item in value:
        if not isinstance(item, str) or _CAPABILITY.fullmatch(item) is None:
            raise Malformed("capabilities: each id is [a-z0-9][a-z0-9._-]{0,63}")
    return tuple(sorted(set(value)))


def normalise_hardware(value: object) -> str:
    """The stored hardware class (module doc); ``Malformed`` for a non-string or a huge one."""
    if value is None:
        return DEFAULT_HARDWARE
    if not isinstance(value, str) or len(value) > _HARDWARE_RAW_LIMIT:
        raise Malformed(f"hardware: a string of at most {_HARDWARE_RAW_LIMIT} characters")
    text = re.sub(r"[^a-z0-9]+", "-", value.lower()).strip("-")
    text = text[:_HARDWARE_LIMIT].strip("-")
    return text or DEFAULT_HARDWARE


def _node(row: tuple[object, ...]) -> Node:
    (node_id, handle, caps, hardware, created, seen, done, credits, compute, disabled) = row[:10]
    (account, network, probation) = row[10:]
    return Node(
        node_id=str(node_id),
        handle=str(handle),
        capabilities=tuple(json.loads(str(caps))),
        hardware=str(hardware),
        created_ms=int(created),  # type: ignore[call-overload]
        last_seen_ms=int(seen),  # type: ignore[call-overload]
        jobs_done=int(done),  # type: ignore[call-overload]
        credits=int(credits),  # type: ignore[call-overload]
        compute_credits=int(compute),  # type: ignore[call-overload]
        disabled_until_ms=int(disabled),  # type: ignore[call-overload]
        account=str(account),
        network=None if network is None else str(network),
        probation=int(probation),  # type: ignore[call-overload]
    )


def get_node(conn: sqlite3.Connection, node_id: str) -> Node:
    """The node ``node_id``; ``NotFound`` when there is none."""
    row = conn.execute(
        f"SELECT {_NODE_COLUMNS} FROM compute_nodes WHERE node_id = ?", (node_id,)
    ).fetchone()
    if row is None:
        raise NotFound(f"no compute node {node_id}")
    return _node(row)


def online_nodes(conn: sqlite3.Connection, since_ms: int) -> list[Node]:
    """Every node seen at or after ``since_ms``, by id (one query)."""
    rows = conn.execute(
        f"SELECT {_NODE_COLUMNS} FROM compute_nodes WHERE last_seen_ms >= ? ORDER BY node_id",
        (since_ms,),
    ).fetchall()
    return [_node(row) for row in rows]


def node_of_key(conn: sqlite3.Connection, key: object) -> Node:
    """The node of ``key`` (401 missing, malformed or unknown), read only."""
    if key is None or key == "":
        raise AuthError("a node key is required")
    if not is_node_key(key):
        raise AuthError("malformed node key")
    assert isinstance(key, str)
    digest = secret_hash(key)
    row = conn.execute(
        f"SELECT key_hash, {_NODE_COLUMNS} FROM compute_nodes WHERE key_hash = ?", (digest,)
    ).fetchone()
    if row is None or not secret_matches(key, str(row[0])):
        raise AuthError("unknown node key")
    return _node(row[1:])


def _account_of(conn: sqlite3.Connection, key: str) -> str:
    """The account of the node of ``key`` (401 naming the field when it is not a node's)."""
    try:
        return node_of_key(conn, key).account
    except AuthError as e:
        raise AuthError(f"account: {e.detail}") from e


def _handle_taken(conn: sqlite3.Connection, handle: str, node_id: str | None) -> bool:
    row = conn.execute("SELECT node_id FROM compute_nodes WHERE handle = ?", (handle,)).fetchone()
    return row is not None and row[0] != node_id


def set_profile(
    conn: sqlite3.Connection,
    node_id: str,
    capabilities: tuple[str, ...],
    hardware: str,
    now_ms: int,
    network: str | None = None,
) -> None:
    """Replace a node's capabilities and hardware, mark it seen at ``now_ms`` from
    ``network`` (None: the stored network stands)."""
    conn.execute(
        "UPDATE compute_nodes SET capabilities = ?, hardware = ?, last_seen_ms = ?,"
        " network = coalesce(?, network) WHERE node_id = ?",
        (json.dumps(list(capabilities)), hardware, now_ms, network, node_id),
    )


def register_node(
    conn: sqlite3.Connection,
    *,
    key: str | None,
    handle: str | None,
    capabilities: object,
    hardware: object,
    now_ms: int,
    network: str | None = None,
    account: str | None = None,
    settings: ComputeSettings = DEFAULT_SETTINGS,
) -> tuple[Node, str | None, list[Event]]:
    """Register or attach a node (module doc): ``(node, minted key or None, events)``;
    ``network`` is the request's, ``account`` a key of the account a new node joins."""
    caps = normalise_capabilities(capabilities)
    hw = normalise_hardware(hardware)
    wanted = None if handle is None or handle == "" else check_handle(handle)
    minted: str | None = None
    keyed = key is not None and key != ""
    if keyed and account is not None:
        raise Malformed("account: only when minting a new key (a node's account is set once)")
    if keyed:
        node = node_of_key(conn, key)
        if wanted is not None and wanted != node.handle:
            if _handle_taken(conn, wanted, node.node_id):
                raise Conflict(f"handle {wanted!r} is taken")
            conn.execute(
                "UPDATE compute_nodes SET handle = ? WHERE node_id = ?", (wanted, node.node_id)
            )
        node_id = node.node_id
    else:
        joins = None if account is None else _account_of(conn, account)
        if wanted is not None and _handle_taken(conn, wanted, None):
            raise Conflict(f"handle {wanted!r} is taken")
        check_mint(conn, network, now_ms, settings)
        chosen = wanted
        while chosen is None or _handle_taken(conn, chosen, None):
            chosen = new_handle()
        minted = mint_key()
        node_id = "n" + secrets.token_hex(8)
        conn.execute(
            "INSERT INTO compute_nodes (node_id, key_hash, handle, capabilities, hardware,"
            " created_ms, last_seen_ms, account, mint_network, probation)"
            " VALUES (?, ?, ?, '[]', ?, ?, ?, ?, ?, ?)",
            (
                node_id,
                secret_hash(minted),
                chosen,
                hw,
                now_ms,
                now_ms,
                joins or node_id,
                network,
                probation_at_mint(conn, network, now_ms, settings),
            ),
        )
    set_profile(conn, node_id, caps, hw, now_ms, network)
    node = get_node(conn, node_id)
    event: Event = (
        "register",
        {
            "node": node.node_id,
            "handle": node.handle,
            "capabilities": list(node.capabilities),
            "hardware": node.hardware,
            "attached": minted is None,
            "probation": node.probation,
        },
    )
    return node, minted, [event]


def authenticate(conn: sqlite3.Connection, key: object, now_ms: int) -> Node:
    """The node of ``key`` (401 otherwise), marked seen at ``now_ms``."""
    return mark_seen(conn, node_of_key(conn, key), now_ms)


def mark_seen(conn: sqlite3.Connection, node: Node, now_ms: int) -> Node:
    """``node`` marked seen at ``now_ms`` (stored and returned)."""
    conn.execute(
        "UPDATE compute_nodes SET last_seen_ms = ? WHERE node_id = ?", (now_ms, node.node_id)
    )
    return attrs.evolve(node, last_seen_ms=now_ms)
