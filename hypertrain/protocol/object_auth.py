"""Signed object-download headers: how a rostered miner authenticates ``GET /v1/objects/{sha}``.

A miner has no bearer token; it signs each download instead, with its hotkey's ed25519 key::

    X-HT-Run:    run_id            (64 lowercase hex)
    X-HT-Hotkey: ss58 of the miner
    X-HT-Exp:    drand round       (decimal int >= 1; valid while D <= exp)
    X-HT-Sig:    hex128            ed25519 over signed_bytes(sha256, exp, run_id)

    signed_bytes = b"hypertrain/1|GetObject|" + sha256 + b"|" + str(exp) + b"|" + run_id

The domain prefix keeps these signatures apart from envelope signatures (an envelope's type is
never ``GetObject``). :func:`sign_headers` builds the headers (miner client);
:func:`verify_headers` checks them (coordinator) and returns who signed; whether that hotkey is
rostered in the run is the caller's check.
"""

from __future__ import annotations

from typing import Final, Protocol

from attrs import frozen

from hypertrain.protocol.errors import Expired, Malformed, SignatureError
from hypertrain.protocol.jcs import MAX_SAFE_INT
from hypertrain.protocol.keys import Keypair, verify_signature
from hypertrain.protocol.validators import (
    int_param,
    is_hex64,
    is_sig_hex,
    is_ss58_address,
    pos_int,
    ss58_public_key,
)

__all__ = [
    "HEADER_EXP",
    "HEADER_HOTKEY",
    "HEADER_RUN",
    "HEADER_SIG",
    "Headers",
    "ObjectSigner",
    "has_signed_headers",
    "sign_headers",
    "signed_bytes",
    "verify_headers",
]

HEADER_RUN: Final = "X-HT-Run"
HEADER_HOTKEY: Final = "X-HT-Hotkey"
HEADER_EXP: Final = "X-HT-Exp"
HEADER_SIG: Final = "X-HT-Sig"
_DOMAIN: Final = b"hypertrain/1|GetObject|"
_ALL: Final = (HEADER_RUN, HEADER_HOTKEY, HEADER_EXP, HEADER_SIG)


class Headers(Protocol):
    """What the checks read of request headers (a dict, werkzeug/Quart ``Headers``...)."""

    def get(self, key: str, /) -> str | None:
        """The header's value, or None."""


@frozen
class ObjectSigner:
    """Who signed a verified download: the run and the miner's hotkey."""

    run_id: str
    hotkey: str
    exp: int


def signed_bytes(sha256: str, exp: int, run_id: str) -> bytes:
    """The bytes the ``X-HT-Sig`` signature covers (module doc)."""
    return _DOMAIN + sha256.encode() + b"|" + str(exp).encode() + b"|" + run_id.encode()


def sign_headers(keypair: Keypair, run_id: str, sha256: str, exp: int) -> dict[str, str]:
    """The four headers authorising ``keypair`` to download object ``sha256`` until ``exp``."""
    if not is_hex64(run_id) or not is_hex64(sha256):
        raise Malformed("object auth: run_id and sha256 must be 64 lowercase hex chars")
    if type(exp) is not int or not 1 <= exp <= MAX_SAFE_INT:
        raise Malformed("object auth: exp must be an int in [1, 2^53-1]")
    sig = keypair.sign(signed_bytes(sha256, exp, run_id))
    return {
        HEADER_RUN: run_id,
        HEADER_HOTKEY: keypair.ss58,
        HEADER_EXP: str(exp),
        HEADER_SIG: sig.hex(),
    }


def has_signed_headers(headers: Headers) -> bool:
    """Whether any of the four headers is present (the request chose signed auth)."""
    return any(headers.get(name) is not None for name in _ALL)


def _exp(value: str) -> int:
    # No leading zero: the signature covers str(exp), so the header must be that text.
    if value.startswith("0"):
        raise Malformed(f"object auth: {HEADER_EXP} must be a decimal drand round")
    try:
        return int_param(HEADER_EXP, value, pos_int)
    except Malformed as e:
        raise Malformed(f"object auth: {e.detail}") from None


def verify_headers(
    headers: Headers,
    sha256: str,
    *,
    now_round: int,
) -> ObjectSigner:
    """Check the four headers for object ``sha256`` at D = ``now_round``.

    Malformed or missing headers 400 (:class:`Malformed`), bad signature 401
    (:class:`SignatureError`), ``now_round > exp`` 400 (:class:`Expired`, as for envelopes).
    """
    values = {name: headers.get(name) for name in _ALL}
    missing = [name for name, value in values.items() if value is None]
    if missing:
        raise Malformed(f"object auth: missing header(s) {', '.join(missing)}")
    run_id, hotkey = str(values[HEADER_RUN]), str(values[HEADER_HOTKEY])
    exp_text, sig = str(values[HEADER_EXP]), str(values[HEADER_SIG])
    if not is_hex64(run_id):
        raise Malformed(f"object auth: {HEADER_RUN} must be 64 lowercase hex chars")
    if not is_ss58_address(hotkey):
        raise Malformed(f"object auth: {HEADER_HOTKEY} is not an SS58 address")
    exp = _exp(exp_text)
    if not is_sig_hex(sig):
        raise Malformed(f"object auth: {HEADER_SIG} must be 128 lowercase hex chars")
    message = signed_bytes(sha256, exp, run_id)
    if not verify_signature(ss58_public_key(hotkey), message, bytes.fromhex(sig)):
        raise SignatureError("object auth: signature does not verify")
    if now_round > exp:
        raise Expired(f"object auth: expired at round {exp} (now {now_round})")
    return ObjectSigner(run_id=run_id, hotkey=hotkey, exp=exp)
