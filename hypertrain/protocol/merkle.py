"""Binary Merkle trees of spec/protocol.md section 2.5, with promotion of an odd last node.

Layout (every hash is SHA-256, every input raw bytes)::

    leaf(x)    = sha256(0x00 || x)
    node(L, R) = sha256(0x01 || L || R)

Level 0 holds ``leaf(x)`` of each input in order. Each next level pairs neighbours
``(0, 1), (2, 3), ...``; when a level has an odd count its last node is **promoted unchanged**
(not duplicated, not rehashed). The root is the single node of the last level; for one input it
is ``leaf(x)``. A tree needs at least one leaf: an empty sequence raises :class:`Malformed`
(the number of leaves comes from peers, e.g. ``Commit.n_leaves``, so zero is bad input).

A proof of leaf ``index`` lists the sibling of the current node bottom-up and *skips* the levels
where the node is the promoted last one (it has no sibling there). Its length is therefore a
function of ``(index, n)`` alone, :func:`proof_length`, and the verifier demands exactly that.
The root alone does not bind ``n``: a proof also verifies for another ``n`` that gives the leaf
the same path shape (a 3-leaf proof of leaf 0 is a valid 4-leaf proof of leaf 0), so verifiers
take ``n`` from the signed commitment (``Commit.n_leaves``), never from the prover.

Uses: ``leaves_root`` (32-byte leaf digests), ``metrics_root`` (8-byte ``loss_f32||norm_f32``),
``stage_root`` (96-byte ``theta||m||v`` TH digests), the dataset ``merkle_root`` (raw sample
bytes), ``shard_sha256_root`` (32-byte shard digests).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from hypertrain.protocol.errors import Malformed

__all__ = [
    "MerkleTree",
    "leaf_hash",
    "merkle_proof",
    "merkle_root",
    "merkle_root_hex",
    "node_hash",
    "proof_length",
    "verify_proof",
]

_LEAF = b"\x00"
_NODE = b"\x01"
_DIGEST = 32
_sha256 = hashlib.sha256


def leaf_hash(data: bytes) -> bytes:
    """``sha256(0x00 || data)``."""
    return _sha256(_LEAF + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """``sha256(0x01 || left || right)``."""
    return _sha256(_NODE + left + right).digest()


def _next_level(level: list[bytes]) -> list[bytes]:
    """Pair neighbours; an odd last node is carried up unchanged."""
    sha, tag = _sha256, _NODE
    up = [sha(tag + level[i] + level[i + 1]).digest() for i in range(0, len(level) - 1, 2)]
    if len(level) % 2:
        up.append(level[-1])
    return up


def _leaf_level(leaves: Sequence[bytes]) -> list[bytes]:
    if len(leaves) == 0:
        raise Malformed("merkle: a tree needs at least one leaf")
    sha, tag = _sha256, _LEAF
    try:
        return [sha(tag + x).digest() for x in leaves]
    except TypeError:
        raise Malformed("merkle: leaves must be bytes") from None


def merkle_root(leaves: Sequence[bytes]) -> bytes:
    """The 32-byte root over ``leaves`` (>= 1, else Malformed); memory is one level at a time."""
    level = _leaf_level(leaves)
    while len(level) > 1:
        level = _next_level(level)
    return level[0]


def merkle_root_hex(leaves: Sequence[bytes]) -> str:
    """:func:`merkle_root` as 64 lowercase hex chars (the form bodies carry)."""
    return merkle_root(leaves).hex()


def _check_index(index: int, n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise Malformed(f"merkle: leaf count must be an int >= 1, got {n!r}")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n:
        raise Malformed(f"merkle: leaf index {index!r} is outside [0, {n})")


def proof_length(index: int, n: int) -> int:
    """How many siblings the proof of leaf ``index`` in a tree of ``n`` leaves holds.

    One per level below the root, except levels where the node is the promoted odd last node.
    Raises Malformed unless ``n >= 1`` and ``0 <= index < n``.
    """
    _check_index(index, n)
    length, width = 0, n
    while width > 1:
        if index ^ 1 < width:
            length += 1
        index >>= 1
        width = (width + 1) >> 1
    return length


class MerkleTree:
    """All levels of one tree, kept so many proofs can be cut from a single build."""

    __slots__ = ("_levels",)

    def __init__(self, levels: list[list[bytes]]) -> None:
        self._levels = levels

    @classmethod
    def from_leaves(cls, leaves: Sequence[bytes]) -> MerkleTree:
        """Build every level over ``leaves`` (>= 1, else Malformed)."""
        levels = [_leaf_level(leaves)]
        while len(levels[-1]) > 1:
            levels.append(_next_level(levels[-1]))
        return cls(levels)

    @property
    def n_leaves(self) -> int:
        return len(self._levels[0])

    @property
    def root(self) -> bytes:
        return self._levels[-1][0]

    def proof(self, index: int) -> list[bytes]:
        """Siblings of leaf ``index`` bottom-up, skipping levels where it had none."""
        _check_index(index, self.n_leaves)
        out: list[bytes] = []
        for level in self._levels[:-1]:
            sibling = index ^ 1
            if sibling < len(level):
                out.append(level[sibling])
            index >>= 1
        return out


def merkle_proof(leaves: Sequence[bytes], index: int) -> list[bytes]:
    """The inclusion proof of ``leaves[index]`` (see :meth:`MerkleTree.proof`)."""
    return MerkleTree.from_leaves(leaves).proof(index)


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_digest(x: object) -> bool:
    return isinstance(x, bytes | bytearray) and len(x) == _DIGEST


def verify_proof(leaf_data: bytes, index: int, n: int, proof: Sequence[bytes], root: bytes) -> bool:
    """True iff ``proof`` shows ``leaf_data`` is leaf ``index`` of an ``n``-leaf tree with ``root``.

    Checks ``n >= 1``, ``0 <= index < n``, ``len(proof) == proof_length(index, n)``, every
    sibling is 32 bytes, and the recomputed root equals ``root``. Never raises: any bad input
    (wrong types included) gives False.
    """
    try:
        if not (_is_int(n) and _is_int(index) and n >= 1 and 0 <= index < n):
            return False
        if not isinstance(leaf_data, bytes | bytearray | memoryview) or not _is_digest(root):
            return False
        siblings = list(proof)
        if len(siblings) != proof_length(index, n):
            return False
        h = leaf_hash(bytes(leaf_data))
        k, width, pos = index, n, 0
        while width > 1:
            if k ^ 1 < width:
                s = siblings[pos]
                pos += 1
                if not _is_digest(s):
                    return False
                h = node_hash(h, bytes(s)) if k % 2 == 0 else node_hash(bytes(s), h)
            k >>= 1
            width = (width + 1) >> 1
        return h == bytes(root)
    except Exception:  # verification of untrusted input answers, it never raises
        return False
