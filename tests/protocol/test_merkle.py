"""Merkle trees with odd-node promotion, proofs and their verification (spec 2.5)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypertrain.protocol.errors import Malformed
from hypertrain.protocol.merkle import (
    MerkleTree,
    merkle_proof,
    merkle_root,
    merkle_root_hex,
    proof_length,
    verify_proof,
)


def h_leaf(x: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + x).digest()


def h_node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def leaves_of(n: int) -> list[bytes]:
    return [f"leaf-{i}".encode() for i in range(n)]


def flip(b: bytes, bit: int = 0) -> bytes:
    return bytes([b[0] ^ (1 << bit)]) + b[1:]


# --- roots -----------------------------------------------------------------------------------


def test_single_leaf_root_is_its_leaf_hash() -> None:
    assert merkle_root([b"x"]) == h_leaf(b"x")
    assert merkle_proof([b"x"], 0) == []
    assert proof_length(0, 1) == 0


def test_two_leaves() -> None:
    assert merkle_root([b"a", b"b"]) == h_node(h_leaf(b"a"), h_leaf(b"b"))


def test_three_leaves_promote_the_odd_last_node_unchanged() -> None:
    a, b, c = h_leaf(b"a"), h_leaf(b"b"), h_leaf(b"c")
    root = h_node(h_node(a, b), c)
    assert merkle_root([b"a", b"b", b"c"]) == root
    # Not the duplicate-last-node convention, and not a rehash of the promoted node.
    assert root != h_node(h_node(a, b), h_node(c, c))
    assert root != h_node(h_node(a, b), h_leaf(c))
    assert merkle_proof([b"a", b"b", b"c"], 2) == [h_node(a, b)]
    assert merkle_proof([b"a", b"b", b"c"], 0) == [b, c]


def test_five_leaves_promote_twice() -> None:
    hs = [h_leaf(x) for x in (b"0", b"1", b"2", b"3", b"4")]
    n01, n23 = h_node(hs[0], hs[1]), h_node(hs[2], hs[3])
    n0123 = h_node(n01, n23)
    root = h_node(n0123, hs[4])
    data = [b"0", b"1", b"2", b"3", b"4"]
    assert merkle_root(data) == root
    assert merkle_root_hex(data) == root.hex()
    # Leaf 4 has no sibling on levels 0 and 1: its proof is one node long.
    assert merkle_proof(data, 4) == [n0123]
    assert proof_length(4, 5) == 1
    assert merkle_proof(data, 1) == [hs[0], n23, hs[4]]
    assert verify_proof(b"4", 4, 5, [n0123], root)
    assert verify_proof(b"1", 1, 5, [hs[0], n23, hs[4]], root)


def test_empty_tree_is_refused() -> None:
    with pytest.raises(Malformed):
        merkle_root([])
    with pytest.raises(Malformed):
        merkle_proof([], 0)
    with pytest.raises(Malformed):
        MerkleTree.from_leaves([])


def test_non_bytes_leaves_are_refused() -> None:
    with pytest.raises(Malformed):
        merkle_root(["text"])  # type: ignore[list-item]


def test_bytes_like_leaves_hash_like_bytes() -> None:
    data = [b"ab", b"cd", b"ef"]
    as_bytearrays: list[Any] = [bytearray(x) for x in data]
    as_views: list[Any] = [memoryview(x) for x in data]
    assert merkle_root(as_bytearrays) == merkle_root(data)
    assert merkle_root(as_views) == merkle_root(data)


def test_proof_index_out_of_range_is_refused() -> None:
    with pytest.raises(Malformed):
        merkle_proof(leaves_of(3), 3)
    with pytest.raises(Malformed):
        merkle_proof(leaves_of(3), -1)
    for index, n in ((0, 0), (3, 3), (-1, 3), (True, 3)):
        with pytest.raises(Malformed):
            proof_length(index, n)


# --- every n in 1..65, every index, every tampering ------------------------------------------


def reference_root(data: list[bytes]) -> bytes:
    """Independent recursive definition: split at the largest power of two below n."""
    if len(data) == 1:
        return h_leaf(data[0])
    split = 1
    while split * 2 < len(data):
        split *= 2
    return h_node(reference_root(data[:split]), reference_root(data[split:]))


def sibling_levels(index: int, n: int) -> tuple[int, ...]:
    """The levels below the root on which ``index``'s node has a sibling."""
    sizes = [n]
    while sizes[-1] > 1:
        sizes.append((sizes[-1] + 1) // 2)
    return tuple(level for level, size in enumerate(sizes[:-1]) if (index >> level) ^ 1 < size)


def reference_proof_length(index: int, n: int) -> int:
    return len(sibling_levels(index, n))


@pytest.mark.parametrize("n", range(1, 66))
def test_every_proof_verifies_and_every_tampering_fails(n: int) -> None:
    data = leaves_of(n)
    tree = MerkleTree.from_leaves(data)
    root = merkle_root(data)
    assert tree.root == root == reference_root(data)
    assert tree.n_leaves == n
    for index in range(n):
        proof = tree.proof(index)
        assert proof == merkle_proof(data, index)
        assert len(proof) == proof_length(index, n) == reference_proof_length(index, n)
        assert verify_proof(data[index], index, n, proof, root)
        # Each proof element flipped (first and last bit of the element).
        for k in range(len(proof)):
            for bit in (0, 7):
                bad = [*proof]
                bad[k] = flip(bad[k], bit)
                assert not verify_proof(data[index], index, n, bad, root)
        # Wrong index, wrong n.
        for other in range(n):
            if other != index:
                assert not verify_proof(data[index], other, n, proof, root)
        # A wrong n is refused unless it gives the leaf the very same path shape, in which case
        # the proof is the same computation (n is bound by Commit.n_leaves, not by the root).
        for other_n in range(index + 1, 2 * n + 2):
            if other_n != n:
                same_shape = sibling_levels(index, other_n) == sibling_levels(index, n)
                assert verify_proof(data[index], index, other_n, proof, root) is same_shape
        assert not verify_proof(data[index], index, 0, proof, root)
        assert not verify_proof(data[index], -1, n, proof, root)
        assert not verify_proof(data[index], n, n, proof, root)
        # Truncated and extended proofs.
        if proof:
            assert not verify_proof(data[index], index, n, proof[:-1], root)
            assert not verify_proof(data[index], index, n, proof[1:], root)
        assert not verify_proof(data[index], index, n, [*proof, proof[0] if proof else root], root)
        assert not verify_proof(data[index], index, n, [root, *proof], root)
        # Wrong leaf data, wrong root.
        assert not verify_proof(data[index] + b"!", index, n, proof, root)
        assert not verify_proof(flip(data[index]), index, n, proof, root)
        assert not verify_proof(data[index], index, n, proof, flip(root))
        assert not verify_proof(data[index], index, n, proof, flip(root, 7))


def test_a_leaf_digest_is_not_a_valid_leaf() -> None:
    # Second-preimage guard: an inner node cannot be passed off as a leaf.
    data = leaves_of(4)
    root = merkle_root(data)
    inner = h_node(h_leaf(data[0]), h_leaf(data[1]))
    right = h_node(h_leaf(data[2]), h_leaf(data[3]))
    assert not verify_proof(inner, 0, 2, [right], root)


@pytest.mark.parametrize(
    "args",
    [
        (b"x", 0, 1, [], b"\x00" * 31),  # short root
        (b"x", 0, 1, [], "00" * 32),  # root as text
        ("x", 0, 1, [], bytes(32)),  # leaf as text
        (b"x", True, 2, [bytes(32)], bytes(32)),  # bool index
        (b"x", 0, 1.0, [], bytes(32)),  # float n
        (b"x", 0, 0, [], bytes(32)),  # empty tree
        (b"x", 0, 2, [b"short"], bytes(32)),  # short sibling
        (b"x", 0, 2, ["00" * 32], bytes(32)),  # sibling as text
        (b"x", 0, 2, None, bytes(32)),  # proof not a sequence
        (None, None, None, None, None),
    ],
)
def test_verify_never_raises_on_bad_input(args: tuple[object, ...]) -> None:
    assert verify_proof(*args) is False  # type: ignore[arg-type]


# --- properties --------------------------------------------------------------------------------


@given(
    data=st.lists(st.binary(max_size=40), min_size=1, max_size=300),
    pick=st.integers(min_value=0),
)
def test_random_trees_prove_every_picked_leaf(data: list[bytes], pick: int) -> None:
    index = pick % len(data)
    root = merkle_root(data)
    assert root == reference_root(data)
    proof = merkle_proof(data, index)
    assert verify_proof(data[index], index, len(data), proof, root)


@given(
    data=st.lists(st.binary(max_size=16), min_size=1, max_size=100, unique=True),
    pick=st.integers(min_value=0),
    other=st.binary(max_size=16),
)
def test_random_trees_refuse_a_foreign_leaf(data: list[bytes], pick: int, other: bytes) -> None:
    index = pick % len(data)
    if other == data[index]:
        return
    root = merkle_root(data)
    assert not verify_proof(other, index, len(data), merkle_proof(data, index), root)


@given(data=st.lists(st.binary(max_size=8), min_size=1, max_size=64), extra=st.binary(max_size=8))
def test_appending_a_leaf_changes_the_root(data: list[bytes], extra: bytes) -> None:
    assert merkle_root([*data, extra]) != merkle_root(data)


@given(st.integers(min_value=1, max_value=10**6), st.integers(min_value=0))
def test_proof_length_matches_reference(n: int, pick: int) -> None:
    index = pick % n
    assert proof_length(index, n) == reference_proof_length(index, n)
    assert proof_length(index, n) <= max(1, (n - 1).bit_length())
