"""Signed envelopes ``ht/1``: sealing and the intake check (spec/protocol.md section 2.3).

An envelope is ``{"v": "ht/1", "type", "run_id", "body", "signer", "exp_drand", "sig"}``; the
signer's ed25519 key signs ::

    b"hypertrain/1|" + type + b"|" + sha256_hex(JCS(body)) + b"|" + str(exp_drand) + b"|" + run_id

:func:`verify` checks a received envelope in the spec's intake order and raises the first
failure's error class: shape (:class:`Malformed`) -> run id (:class:`RunMismatch`) -> signature
(:class:`SignatureError`) -> expiry (:class:`Expired`) -> signer allow-list
(:class:`UnauthorizedSigner`) -> body schema (:class:`SchemaError`) -> canonical model form
(:class:`SchemaError`; ``JCS(unstructure(message)) == JCS(body)``, compared with
:func:`json_equal`) -> signer binding (:class:`UnauthorizedSigner`) -> replay key.

The replay key is derived here but recorded by the store. It is a 5-tuple of strings
``(run_id, w or "-", type, signer, subject)``; the store persists it as a JSON array.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any, Final

from attrs import frozen

from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.errors import (
    Expired,
    Malformed,
    RunMismatch,
    SchemaError,
    SignatureError,
    UnauthorizedSigner,
)
from hypertrain.protocol.jcs import MAX_SAFE_INT, body_digest, canonical_json
from hypertrain.protocol.keys import Keypair, verify_signature
from hypertrain.protocol.messages import MESSAGE_TYPES, SIGNER_BOUND_TYPES, Dispute, Message
from hypertrain.protocol.validators import is_hex64, is_sig_hex, ss58_public_key

__all__ = [
    "CLIENT_EXP",
    "ENVELOPE_KEYS",
    "ENVELOPE_VERSION",
    "NEVER",
    "Envelope",
    "ReplayKey",
    "SignerCheck",
    "Verified",
    "check_shape",
    "json_equal",
    "replay_key",
    "seal",
    "signed_bytes",
    "verify",
]

ENVELOPE_VERSION: Final = "ht/1"
ENVELOPE_KEYS: Final = frozenset({"v", "type", "run_id", "body", "signer", "exp_drand", "sig"})
NEVER: Final = MAX_SAFE_INT
"""``exp_drand`` of container-issued records that never expire (Receipt, AuditChallenge...)."""
CLIENT_EXP: Final = 2**40
"""``exp_drand`` of the envelopes a client signs with no deadline of their own (spec 2.3: the
miner client uses 2^40): StateServe, Dispute, Bisect, Resolution."""
_DOMAIN: Final = b"hypertrain/1|"

ReplayKey = tuple[str, str, str, str, str]
"""``(run_id, str(w) or "-", type, signer, subject)``: one accepted message per key."""

SignerCheck = Callable[[str, str], bool]
"""``(type, signer) -> allowed``: the per-type signer allow-list hook."""


@frozen
class Envelope:
    """A signed envelope; ``body`` is the JSON object exactly as signed."""

    v: str
    type: str
    run_id: str
    body: Mapping[str, Any]
    signer: str
    exp_drand: int
    sig: str

    def to_json(self) -> dict[str, Any]:
        """The envelope as a JSON-ready dict (the wire form)."""
        return {
            "v": self.v,
            "type": self.type,
            "run_id": self.run_id,
            "body": dict(self.body),
            "signer": self.signer,
            "exp_drand": self.exp_drand,
            "sig": self.sig,
        }

    def encode(self) -> bytes:
        """The envelope as canonical JSON bytes, ready to send."""
        return canonical_json(self.to_json())


@frozen
class Verified:
    """An envelope that passed :func:`verify`, its validated body and its replay key."""

    envelope: Envelope
    message: Message
    replay_key: ReplayKey
    body_digest: str


def json_equal(a: object, b: object) -> bool:
    """Equality of two JSON values as JCS sees it: ``JCS(a) == JCS(b)`` for canonicalisable values.

    Stricter than ``==`` (``True`` is not ``1``, ``1`` is not ``1.0``; lists and tuples are both
    arrays) and much cheaper than serialising both sides.
    """
    if isinstance(a, list | tuple):
        return (
            isinstance(b, list | tuple)
            and len(a) == len(b)
            and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, Mapping):
        return (
            isinstance(b, Mapping)
            and a.keys() == b.keys()
            and all(json_equal(a[k], b[k]) for k in a)
        )
    return type(a) is type(b) and a == b


def _digest_signed_bytes(type_name: str, digest: str, exp_drand: int, run_id: str) -> bytes:
    return b"|".join(
        (_DOMAIN + type_name.encode(), digest.encode(), str(exp_drand).encode(), run_id.encode())
    )


def signed_bytes(type_name: str, body: object, exp_drand: int, run_id: str) -> bytes:
    """The bytes an envelope's signature covers (spec section 2.3)."""
    return _digest_signed_bytes(type_name, body_digest(body), exp_drand, run_id)


def _exp_ok(value: object) -> bool:
    return type(value) is int and 1 <= value <= MAX_SAFE_INT


def seal(keypair: Keypair, type_name: str, run_id: str, body: object, exp_drand: int) -> Envelope:
    """Validate ``body`` (a message instance or its JSON dict) as ``type_name`` and sign it.

    The sealed body is the message's canonical model form, so it always passes :func:`verify`.
    Raises :class:`Malformed` for a bad type, run id or expiry and :class:`SchemaError` for a body
    that is not a valid ``type_name``.
    """
    cls = MESSAGE_TYPES.get(type_name)
    if cls is None:
        raise Malformed(f"envelope: unknown message type {type_name!r}")
    if not is_hex64(run_id):
        raise Malformed("envelope: run_id must be 64 lowercase hex chars")
    if not _exp_ok(exp_drand):
        raise Malformed("envelope: exp_drand must be an int in [1, 2^53-1]")
    if isinstance(body, Mapping):
        message = structure(cls, dict(body))
    elif type(body) is cls:
        message = body
    else:
        raise SchemaError(f"envelope: a {type(body).__name__} is not a {type_name} body")
    wire_body = unstructure(message)
    sig = keypair.sign(signed_bytes(type_name, wire_body, exp_drand, run_id))
    return Envelope(
        ENVELOPE_VERSION, type_name, run_id, wire_body, keypair.ss58, exp_drand, sig.hex()
    )


def check_shape(raw: object) -> Envelope:
    """The envelope's shape check (first step of :func:`verify`); Malformed names the problem."""
    if not isinstance(raw, Mapping):
        raise Malformed("envelope: expected a JSON object")
    keys = set(raw)
    if keys != ENVELOPE_KEYS:
        problems = []
        if missing := sorted(ENVELOPE_KEYS - keys):
            problems.append(f"missing key(s) {', '.join(missing)}")
        if extra := sorted(map(str, keys - ENVELOPE_KEYS)):
            problems.append(f"unknown key(s) {', '.join(extra)}")
        raise Malformed(f"envelope: {'; '.join(problems)}")
    v, type_name, run_id, body = raw["v"], raw["type"], raw["run_id"], raw["body"]
    signer, exp_drand, sig = raw["signer"], raw["exp_drand"], raw["sig"]
    if v != ENVELOPE_VERSION or type(v) is not str:
        raise Malformed(f"envelope: v must be {ENVELOPE_VERSION!r}")
    if type(type_name) is not str or type_name not in MESSAGE_TYPES:
        raise Malformed("envelope: type is not one of the 15 message types")
    if not is_hex64(run_id):
        raise Malformed("envelope: run_id must be 64 lowercase hex chars")
    if not isinstance(body, Mapping):
        raise Malformed("envelope: body must be a JSON object")
    if type(signer) is not str:
        raise Malformed("envelope: signer must be an SS58 address")
    ss58_public_key(signer)
    if not _exp_ok(exp_drand):
        raise Malformed("envelope: exp_drand must be an int in [1, 2^53-1]")
    if not is_sig_hex(sig):
        raise Malformed("envelope: sig must be 128 lowercase hex chars")
    return Envelope(v, type_name, run_id, body, signer, exp_drand, sig)


def replay_key(envelope: Envelope, message: Message, body_digest: str) -> ReplayKey:
    """The replay key of a validated message (spec section 2.3 "Replay key")."""
    run_id, type_name, signer = envelope.run_id, envelope.type, envelope.signer
    if isinstance(message, Dispute):
        return (run_id, "-", type_name, signer, message.verdict_hash)
    w = getattr(message, "w", None)
    if type(w) is int:
        subject = ""
        for name in ("hotkey", "target", "commit_hash"):
            value = getattr(message, name, None)
            if isinstance(value, str):
                subject = value
                break
        return (run_id, str(w), type_name, signer, subject)
    return (run_id, "-", type_name, signer, body_digest)


def verify(
    raw: object,
    *,
    expected_run_id: str | None = None,
    now_round: int | None = None,
    signer_allowed: SignerCheck | None = None,
) -> Verified:
    """Check a received envelope in intake order; raise the first failure (module docstring).

    ``expected_run_id`` None skips the run check (the signature still binds the run id);
    ``now_round`` None skips the expiry check; ``signer_allowed`` None allows any signer.
    """
    envelope = check_shape(raw)
    body_bytes = canonical_json(envelope.body)
    if expected_run_id is not None and envelope.run_id != expected_run_id:
        raise RunMismatch("envelope: signed for another run")
    digest = hashlib.sha256(body_bytes).hexdigest()
    message_bytes = _digest_signed_bytes(envelope.type, digest, envelope.exp_drand, envelope.run_id)
    public_key = ss58_public_key(envelope.signer)
    if not verify_signature(public_key, message_bytes, bytes.fromhex(envelope.sig)):
        raise SignatureError("envelope: signature does not verify")
    if now_round is not None and now_round > envelope.exp_drand:
        raise Expired(f"envelope: expired at round {envelope.exp_drand} (now {now_round})")
    if signer_allowed is not None and not signer_allowed(envelope.type, envelope.signer):
        raise UnauthorizedSigner(f"envelope: {envelope.signer} may not sign {envelope.type}")
    cls = MESSAGE_TYPES[envelope.type]
    message: Message = structure(cls, envelope.body)
    if not json_equal(unstructure(message), envelope.body):
        raise SchemaError(f"{envelope.type} body: not in canonical model form")
    if cls in SIGNER_BOUND_TYPES and getattr(message, "hotkey", None) != envelope.signer:
        raise UnauthorizedSigner(f"{envelope.type}: body hotkey is not the signer")
    return Verified(envelope, message, replay_key(envelope, message, digest), digest)
