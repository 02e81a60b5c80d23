"""Every domain-separated hash and signed-bytes layout of spec/protocol.md section 2.5.

Notation: ``||`` concatenates bytes; ``u64le(x)`` / ``u64be(x)`` are 8-byte unsigned integers,
``u8(x)`` one byte; ``run_id(32)`` is the raw 32-byte run id (``bytes.fromhex`` of the hex64 on
the wire) and ``run_id_hex`` its 64 lowercase hex chars. Each function documents its exact
layout and refuses (``Malformed``) raw inputs of the wrong length, integers out of range and bools
passed as integers. Functions whose result goes into a body return hex; those whose result is
hashed or compared further return raw bytes, as named.

    leaf_digest         sha256(b"ht-leaf-v1" || run_id(32) || u64le(w) || u64le(t) ||
                               stage_root(32) || batch_ids_sha256(32) || u64le(rng_ctr) ||
                               loss_f32(4) || norm_f32(4))
    tensor_root         sha256_hex(TH(theta)(32) || TH(m)(32) || TH(v)(32) || u64le(step))
    assignment_hash     sha256_hex(b"ht-assignment-v1" || run_id(32) || u64be(w) || u64be(slot)
                                   || u64le(sample)*)
    audit_selection     sha256(b"ht-audit" || run_id(32) || u64be(w) || drand_sig(48) || hotkey)
    segments_seed       b"ht-segments|" + f"{run_id_hex}|{w}|{beacon_sig_sha256}|{target}"
    uniform_draw        int_be(sha256(seed || u64le(ctr))), rejection sampled into [0, n)
    assign_key          sha256(b"ht-assign" || run_id(32) || u64be(w) || drand_sig(48))
    epoch_key           sha256(b"ht-epoch" || run_id(32) || u64be(epoch))
    feistel_round       int_be(sha256(b"ht-feistel-v1" || u64be(n) || key(32) || u8(r) ||
                               u64be(x))[:8]) & (2^half - 1)
    rng_ctr             int_le(sha256(b"ht-rng|" + run_id_ascii + pack("<QQq", w, step,
                               layer))[:8]) & (2^53 - 1)
    honeypot_commit     sha256_hex(JCS([{hotkey, mode}] sorted by hotkey) || salt(>=16))
    holdout_commit      sha256_hex(holdout_merkle_root(32) || salt(>=16))
    rerun_claim_bytes   f"hypertrain/1|Rerun|{run_id_hex}|{w}|{hotkey}|{leaves_root}" (UTF-8)
    join_request_bytes  b"hypertrain/1|Join|" + JCS({run_id, hotkey, hardware})
    event_tape_signed   b"hypertrain/1|EventTape|" + sha256_hex(JCS(body)) + b"|" + run_id_hex
    checkpoint_signed   b"hypertrain/1|Checkpoint|" + sha256_hex(JCS(body))
    roster_hash         sha256_hex(JCS(roster list))
    ZERO_STATE          sha256_hex(b"ht-zero-outer-state")
    NO_HONEYPOT         sha256_hex(b"ht-no-honeypot")
"""

from __future__ import annotations

import hashlib
import math
import re
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any, Final

from hypertrain.protocol.errors import Malformed
from hypertrain.protocol.f32 import f32_from_hex
from hypertrain.protocol.jcs import body_digest, canonical_json
from hypertrain.protocol.merkle import merkle_root

__all__ = [
    "DRAND_SIG_BYTES",
    "FEISTEL_ROUNDS",
    "HONEYPOT_MODES",
    "MIN_SALT_BYTES",
    "NO_HONEYPOT",
    "RNG_CTR_MASK",
    "ZERO_STATE",
    "assign_key",
    "assignment_hash",
    "audit_selected",
    "audit_selection_hash",
    "batch_ids_sha256",
    "checkpoint_signed_bytes",
    "epoch_key",
    "event_tape_signed_bytes",
    "feistel_half",
    "feistel_round",
    "feistel_round_fn",
    "holdout_commit",
    "honeypot_commit",
    "join_request_bytes",
    "leaf_digest",
    "metrics_leaf",
    "parse_hex32",
    "rerun_claim_bytes",
    "rng_ctr",
    "roster_hash",
    "segments_seed",
    "sha256_hex",
    "stage_root",
    "tensor_root",
    "uniform_draw",
]

DRAND_SIG_BYTES: Final = 48  # a drand quicknet (bls-unchained-g1) signature
FEISTEL_ROUNDS: Final = 8
RNG_CTR_MASK: Final = 2**53 - 1
MIN_SALT_BYTES: Final = 16
HONEYPOT_MODES: Final = frozenset({"honest", "fabricate", "last_step", "noise"})
_U64_MAX = 2**64 - 1
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_HEX64 = re.compile(r"[0-9a-f]{64}")


def sha256_hex(data: bytes) -> str:
    """``hashlib.sha256(data).hexdigest()``."""
    return hashlib.sha256(data).hexdigest()


ZERO_STATE: Final = sha256_hex(b"ht-zero-outer-state")
NO_HONEYPOT: Final = sha256_hex(b"ht-no-honeypot")


# --- argument checks ---------------------------------------------------------------------------


def _int(x: object, lo: int, hi: int, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or not lo <= x <= hi:
        raise Malformed(f"{what} must be an int in [{lo}, {hi}], got {x!r:.80}")
    return x


def _u64(x: object, what: str) -> int:
    return _int(x, 0, _U64_MAX, what)


def _raw(x: object, size: int, what: str) -> bytes:
    if not isinstance(x, bytes | bytearray) or len(x) != size:
        shown = len(x) if isinstance(x, bytes | bytearray) else type(x).__name__
        raise Malformed(f"{what} must be {size} raw bytes, got {shown}")
    return bytes(x)


def _hex64(x: object, what: str) -> str:
    if not isinstance(x, str) or _HEX64.fullmatch(x) is None:
        raise Malformed(f"{what} must be 64 lowercase hex chars, got {x!r:.80}")
    return x


def _field(x: object, what: str) -> str:
    """A free-text field of a ``|``-separated layout: non-empty, no ``|``."""
    if not isinstance(x, str) or not x or "|" in x:
        raise Malformed(f"{what} must be a non-empty string without '|', got {x!r:.80}")
    return x


def _salt(x: object) -> bytes:
    if not isinstance(x, bytes | bytearray) or len(x) < MIN_SALT_BYTES:
        raise Malformed(f"salt must be at least {MIN_SALT_BYTES} raw bytes")
    return bytes(x)


def _pack_u64s(values: Sequence[int], what: str) -> bytes:
    """``u64le(v)*``; refuses bools, non-ints and values outside [0, 2^64)."""
    if any(isinstance(v, bool) for v in values):
        raise Malformed(f"{what}: bools are not integers")
    try:
        return struct.pack(f"<{len(values)}Q", *values)
    except struct.error:
        raise Malformed(f"{what} must all be ints in [0, 2^64)") from None


def parse_hex32(value: str, what: str = "hash") -> bytes:
    """The 32 raw bytes of a 64-lowercase-hex-char digest (``run_id``, roots); else Malformed."""
    return bytes.fromhex(_hex64(value, what))


# --- leaves ------------------------------------------------------------------------------------


def leaf_digest(
    *,
    run_id: bytes,
    w: int,
    t: int,
    stage_root: bytes,
    batch_ids_sha256: bytes,
    rng_ctr: int,
    loss_f32: bytes,
    norm_f32: bytes,
) -> bytes:
    """The 32-byte ``ht-leaf-v1`` digest of a leaf preimage (fixed width, 138-byte preimage)::

        b"ht-leaf-v1" || run_id(32) || u64le(w) || u64le(t) || stage_root(32) ||
        batch_ids_sha256(32) || u64le(rng_ctr) || loss_f32(4) || norm_f32(4)

    ``loss_f32`` / ``norm_f32`` are the 4 raw little-endian float32 bytes, i.e.
    ``bytes.fromhex(preimage.loss_f32)``; ``stage_root`` is :func:`stage_root` of the stages.
    """
    return hashlib.sha256(
        b"ht-leaf-v1"
        + _raw(run_id, 32, "run_id")
        + struct.pack("<QQ", _u64(w, "w"), _u64(t, "t"))
        + _raw(stage_root, 32, "stage_root")
        + _raw(batch_ids_sha256, 32, "batch_ids_sha256")
        + struct.pack("<Q", _u64(rng_ctr, "rng_ctr"))
        + _raw(loss_f32, 4, "loss_f32")
        + _raw(norm_f32, 4, "norm_f32")
    ).digest()


def stage_root(stages: Sequence[tuple[bytes, bytes, bytes]]) -> bytes:
    """Merkle root (32 bytes) over one 96-byte leaf ``TH(theta) || TH(m) || TH(v)`` per stage.

    Each TH is 32 raw bytes; at least one stage is required.
    """
    if len(stages) == 0:
        raise Malformed("stages: at least one pipeline stage is required")
    leaves = [
        _raw(theta, 32, "stage theta") + _raw(m, 32, "stage m") + _raw(v, 32, "stage v")
        for theta, m, v in stages
    ]
    return merkle_root(leaves)


def metrics_leaf(loss_f32: bytes, norm_f32: bytes) -> bytes:
    """The 8-byte ``metrics_root`` leaf ``loss_f32(4) || norm_f32(4)`` (raw LE float32)."""
    return _raw(loss_f32, 4, "loss_f32") + _raw(norm_f32, 4, "norm_f32")


def batch_ids_sha256(ids: Sequence[int]) -> bytes:
    """``sha256(u64le(id)*)`` over the sample ids of a leaf's J steps (empty input at t = 0)."""
    return hashlib.sha256(_pack_u64s(ids, "batch ids")).digest()


def tensor_root(theta_th: bytes, m_th: bytes, v_th: bytes, step: int) -> str:
    """``sha256_hex(TH(theta)(32) || TH(m)(32) || TH(v)(32) || u64le(step))`` (StateServe,
    bisection step points); the TH arguments are raw, see ``tensorhash.th_bytes``."""
    return sha256_hex(
        _raw(theta_th, 32, "TH(theta)")
        + _raw(m_th, 32, "TH(m)")
        + _raw(v_th, 32, "TH(v)")
        + struct.pack("<Q", _u64(step, "step"))
    )


# --- assignment and audit selection ------------------------------------------------------------


def assignment_hash(run_id: bytes, w: int, slot: int, samples: Sequence[int]) -> str:
    """``sha256_hex(b"ht-assignment-v1" || run_id(32) || u64be(w) || u64be(slot) ||
    u64le(sample)*)``: big-endian round and slot, little-endian sample ids in assigned order."""
    return sha256_hex(
        b"ht-assignment-v1"
        + _raw(run_id, 32, "run_id")
        + struct.pack(">QQ", _u64(w, "w"), _u64(slot, "slot"))
        + _pack_u64s(samples, "samples")
    )


def audit_selection_hash(run_id: bytes, w: int, drand_sig: bytes, hotkey: str) -> bytes:
    """``sha256(b"ht-audit" || run_id(32) || u64be(w) || drand_sig[d_audit](48) ||
    hotkey_utf8)`` as 32 raw bytes, for :func:`audit_selected`."""
    if not isinstance(hotkey, str) or not hotkey:
        raise Malformed(f"hotkey must be a non-empty string, got {hotkey!r}")
    return hashlib.sha256(
        b"ht-audit"
        + _raw(run_id, 32, "run_id")
        + struct.pack(">Q", _u64(w, "w"))
        + _raw(drand_sig, DRAND_SIG_BYTES, "drand_sig")
        + hotkey.encode("utf-8")
    ).digest()


def audit_selected(selection_hash: bytes, q_f32: str) -> bool:
    """``int_be(selection_hash) < q * 2^256`` exactly, with ``q`` the f32 value of ``q_f32``.

    Computed as ``int_be(h) * q.denominator < q.numerator * 2^256`` over ``Fraction(q)``, so
    ``q = 0`` never selects and ``q = 1`` always does. ``q_f32`` is the roster's f32 hex; a value
    outside [0, 1] (or NaN/infinity) is Malformed.
    """
    h = int.from_bytes(_raw(selection_hash, 32, "selection hash"), "big")
    q_value = f32_from_hex(q_f32)
    if not (math.isfinite(q_value) and 0.0 <= q_value <= 1.0):
        raise Malformed(f"q_i {q_f32!r} is not a probability in [0, 1]")
    q = Fraction(q_value)
    return h * q.denominator < q.numerator * 2**256


def segments_seed(run_id: str, w: int, beacon_sig_sha256: str, target: str) -> bytes:
    """``b"ht-segments|" + f"{run_id}|{w}|{beacon_sig_sha256}|{target}".encode()`` (ASCII).

    ``run_id`` and ``beacon_sig_sha256`` are 64 lowercase hex chars, ``w`` is written in decimal
    and ``target`` is the audited hotkey.
    """
    text = "|".join(
        (
            _hex64(run_id, "run_id"),
            str(_u64(w, "w")),
            _hex64(beacon_sig_sha256, "beacon_sig_sha256"),
            _field(target, "target"),
        )
    )
    return b"ht-segments|" + text.encode("utf-8")


def uniform_draw(seed: bytes, n: int, ctr: int = 0) -> tuple[int, int]:
    """One uniform draw in ``[0, n)`` and the counter to continue from.

    Try ``x = int_be(sha256(seed || u64le(ctr)))``, ``ctr += 1``; reject while
    ``x >= 2^256 - (2^256 mod n)``; return ``(x mod n, ctr)``. Successive draws of one seed
    (Fisher-Yates) pass the returned counter on. ``1 <= n <= 2^256``.
    """
    if not isinstance(seed, bytes | bytearray):
        raise Malformed("seed must be bytes")
    n = _int(n, 1, 2**256, "n")
    ctr = _u64(ctr, "ctr")
    limit = 2**256 - 2**256 % n
    prefix = hashlib.sha256(bytes(seed))
    while True:
        h = prefix.copy()
        h.update(struct.pack("<Q", ctr))
        x = int.from_bytes(h.digest(), "big")
        ctr += 1
        if x < limit:
            return x % n, ctr


# --- Feistel PRP keys and round function -------------------------------------------------------


def assign_key(run_id: bytes, w: int, drand_sig: bytes) -> bytes:
    """``sha256(b"ht-assign" || run_id(32) || u64be(w) || drand_sig[d_assign](48))``, raw."""
    return hashlib.sha256(
        b"ht-assign"
        + _raw(run_id, 32, "run_id")
        + struct.pack(">Q", _u64(w, "w"))
        + _raw(drand_sig, DRAND_SIG_BYTES, "drand_sig")
    ).digest()


def epoch_key(run_id: bytes, epoch: int) -> bytes:
    """``sha256(b"ht-epoch" || run_id(32) || u64be(epoch))``, raw 32 bytes."""
    return hashlib.sha256(
        b"ht-epoch" + _raw(run_id, 32, "run_id") + struct.pack(">Q", _u64(epoch, "epoch"))
    ).digest()


def feistel_half(n: int) -> int:
    """Half-width in bits of the balanced Feistel network on ``[0, n)``.

    ``bits = max(2, bitlen(n - 1))`` rounded up to even; ``half = bits / 2``.
    """
    n = _int(n, 1, _U64_MAX, "n")
    bits = max(2, (n - 1).bit_length())
    return (bits + (bits & 1)) // 2


def feistel_round(n: int, key: bytes, r: int, x: int, half: int) -> int:
    """The round function ``F(r, x)`` of the Feistel PRP on ``[0, n)``::

        int_be(sha256(b"ht-feistel-v1" || u64be(n) || key(32) || u8(r) || u64be(x))[:8])
            & (2^half - 1)

    One round maps ``(L, R) -> (R, L xor F(r, R))`` for ``r = 0..7``, with ``L = x >> half``,
    ``R = x & mask`` and output ``(L << half) | R``; outputs ``>= n`` are re-encrypted (cycle
    walk).
    """
    digest = hashlib.sha256(
        b"ht-feistel-v1"
        + struct.pack(">Q", _int(n, 1, _U64_MAX, "n"))
        + _raw(key, 32, "key")
        + struct.pack(">BQ", _int(r, 0, 255, "r"), _u64(x, "x"))
    ).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << _int(half, 1, 32, "half")) - 1)


def feistel_round_fn(n: int, key: bytes, half: int) -> Callable[[int, int], int]:
    """:func:`feistel_round` for one ``(n, key, half)``, as a fast ``F(r, x)``.

    Same bytes and result; the constant prefix is hashed once and the arguments of the PRP are
    checked once, so a permutation that evaluates ``F`` thousands of times pays only for the
    last 9 bytes of each message.
    """
    prefix = hashlib.sha256(
        b"ht-feistel-v1" + struct.pack(">Q", _int(n, 1, _U64_MAX, "n")) + _raw(key, 32, "key")
    )
    mask = (1 << _int(half, 1, 32, "half")) - 1
    pack = struct.Struct(">BQ").pack

    def f(r: int, x: int) -> int:
        h = prefix.copy()
        h.update(pack(r, x))
        return int.from_bytes(h.digest()[:8], "big") & mask

    return f


def rng_ctr(run_id: str, w: int, step: int, layer: int) -> int:
    """The 53-bit Philox key of ``(run_id, w, step, layer)``::

        int_le(sha256(b"ht-rng|" + run_id_utf8 + pack("<QQq", w, step, layer))[:8]) & (2^53-1)

    ``run_id`` is text (the run's hex id, or e.g. ``"init:0"`` for initialisation); ``layer``
    is signed (``-1`` for a leaf's own counter).
    """
    if not isinstance(run_id, str):
        raise Malformed(f"rng_ctr: run_id must be a string, got {type(run_id).__name__}")
    packed = struct.pack(
        "<QQq", _u64(w, "w"), _u64(step, "step"), _int(layer, _I64_MIN, _I64_MAX, "layer")
    )
    digest = hashlib.sha256(b"ht-rng|" + run_id.encode("utf-8") + packed).digest()
    return int.from_bytes(digest[:8], "little") & RNG_CTR_MASK


# --- commitments -------------------------------------------------------------------------------


def honeypot_commit(members: Iterable[tuple[str, str]], salt: bytes) -> str:
    """``sha256_hex(JCS([{"hotkey": h, "mode": m}, ...] sorted by hotkey) || salt)``.

    ``members`` are ``(hotkey, mode)`` pairs (e.g. ``dict.items()``), hotkeys unique, modes in
    :data:`HONEYPOT_MODES`; ``salt`` is raw, at least 16 bytes (routes carry 32 as hex).
    """
    entries: dict[str, str] = {}
    for hotkey, mode in members:
        if not isinstance(hotkey, str) or not hotkey:
            raise Malformed(f"honeypot: hotkey must be a non-empty string, got {hotkey!r}")
        if mode not in HONEYPOT_MODES:
            raise Malformed(f"honeypot: unknown mode {mode!r} for {hotkey}")
        if hotkey in entries:
            raise Malformed(f"honeypot: {hotkey} listed twice")
        entries[hotkey] = mode
    listing = [{"hotkey": h, "mode": entries[h]} for h in sorted(entries)]
    return sha256_hex(canonical_json(listing) + _salt(salt))


def holdout_commit(holdout_root: bytes, salt: bytes) -> str:
    """``sha256_hex(holdout_merkle_root(32) || salt)``, salt raw, at least 16 bytes."""
    return sha256_hex(_raw(holdout_root, 32, "holdout root") + _salt(salt))


def roster_hash(roster: Sequence[Mapping[str, Any]]) -> str:
    """``sha256_hex(JCS(roster))`` over the RoundOpen roster list as given (not a Merkle tree)."""
    if not isinstance(roster, list | tuple):
        raise Malformed(f"roster must be a list, got {type(roster).__name__}")
    return sha256_hex(canonical_json(list(roster)))


# --- signed bytes without an envelope ----------------------------------------------------------


def rerun_claim_bytes(run_id: str, w: int, hotkey: str, leaves_root: str) -> bytes:
    """``f"hypertrain/1|Rerun|{run_id}|{w}|{hotkey}|{leaves_root}"`` UTF-8, the miner signs it
    over its rerun leaves root (hex64 ids, decimal ``w``)."""
    text = "|".join(
        (
            "hypertrain/1",
            "Rerun",
            _hex64(run_id, "run_id"),
            str(_u64(w, "w")),
            _field(hotkey, "hotkey"),
            _hex64(leaves_root, "leaves_root"),
        )
    )
    return text.encode("utf-8")


def join_request_bytes(run_id: str, hotkey: str, hardware: Mapping[str, Any]) -> bytes:
    """``b"hypertrain/1|Join|" + JCS({"run_id", "hotkey", "hardware"})`` (the CLI join request)."""
    if not isinstance(hardware, Mapping):
        raise Malformed(f"hardware must be an object, got {type(hardware).__name__}")
    request = {
        "run_id": _hex64(run_id, "run_id"),
        "hotkey": _field(hotkey, "hotkey"),
        "hardware": dict(hardware),
    }
    return b"hypertrain/1|Join|" + canonical_json(request)


def event_tape_signed_bytes(body: Mapping[str, Any], run_id: str) -> bytes:
    """``b"hypertrain/1|EventTape|" + sha256_hex(JCS(body)) + b"|" + run_id_hex``."""
    digest = body_digest(body)
    return (
        b"hypertrain/1|EventTape|"
        + digest.encode("ascii")
        + b"|"
        + _hex64(run_id, "run_id").encode("ascii")
    )


def checkpoint_signed_bytes(body: Mapping[str, Any]) -> bytes:
    """``b"hypertrain/1|Checkpoint|" + sha256_hex(JCS(body))`` (checkpoint MANIFEST.json)."""
    return b"hypertrain/1|Checkpoint|" + body_digest(body).encode("ascii")
