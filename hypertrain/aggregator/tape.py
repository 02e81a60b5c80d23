"""The signed event tape ``ht-tape-v1`` of one global merge (spec/protocol.md section 7).

A tape records everything needed to recompute round ``w``'s merge from stored artifacts. Its
JSON shape, with reals as f32 hex and every list in the order given::

    {"body": {"v": "ht-tape-v1", "run_id": hex64, "kind": "global", "w": int,
              "region": "", "k": 0,
              "params": {"opt", "lr", "momentum", "preclip_norm", "cclip_tau", "cclip_iters"},
              "prev_state": hex64 (store key), "prev_theta_hash": hex64,
              "inputs": [{"id": ss58, "source": "delta", "object": delta_hash, "weight": f32}],
              "excluded": [ss58, ...],
              "screens": {"preclipped": [ss58, ...],
                          "copy_flags": [{"a": ss58, "b": ss58, "overlap": f32,
                                          "cosine": f32}],
                          "raise_q": [ss58, ...]},
              "out_state": hex64 (store key), "theta_hash": hex64,
              "outer_state_hash": hex64, "center_hash": hex64},
     "signer": ss58, "sig": hex128}

``sig`` is the signer's ed25519 signature over
``b"hypertrain/1|EventTape|" + sha256_hex(JCS(body)) + b"|" + run_id`` and
``tape_key = sha256_hex(JCS(signed tape))`` is its object-store key.

Decisions where the spec is open: ``inputs`` are strictly sorted by id (the merge's order) and
``excluded``, ``preclipped`` and ``raise_q`` are strictly sorted sets; an id is never both an
input and excluded; copy flags name two distinct ids. A copy flag's ``overlap`` is what the copy
screen reports (:class:`~hypertrain.aggregator.copyscreen.CopyFlag`: the fraction of shared
top-k indices, ``|topk(a) & topk(b)| / k``), carried as f32 like every real. Only
``kind == "global"`` is accepted (regional tapes and ``regional_tapes`` are not implemented).
:mod:`.tape_replay` recomputes a tape; this module only builds, seals, parses and verifies.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal, Protocol

from attrs import field, frozen

from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.errors import (
    Malformed,
    SchemaError,
    SignatureError,
    UnauthorizedSigner,
)
from hypertrain.protocol.f32 import f32_hex, is_f32_hex
from hypertrain.protocol.hashes import event_tape_signed_bytes
from hypertrain.protocol.jcs import canonical_json, parse_json
from hypertrain.protocol.keys import Keypair, verify_signature
from hypertrain.protocol.manifest import OuterOpt
from hypertrain.protocol.validators import (
    FieldError,
    f32,
    hex64,
    instance_of,
    list_of,
    one_of_literal,
    pos_int,
    sig_hex,
    ss58,
    ss58_public_key,
    u_int,
)

__all__ = [
    "TAPE_VERSION",
    "CopyFlagEntry",
    "MergeResultLike",
    "ParamsLike",
    "Screens",
    "SignedTape",
    "TapeBody",
    "TapeInput",
    "TapeParams",
    "build_tape_body",
    "parse_signed_tape",
    "seal_tape",
    "tape_bytes",
    "tape_key",
    "verify_tape",
]

TAPE_VERSION: Final = "ht-tape-v1"

_ids = list_of(ss58, strictly_sorted=True)


class ParamsLike(Protocol):
    """What :func:`build_tape_body` reads of ``merge.Params`` (reals as floats or f32 hex)."""

    @property
    def opt(self) -> str: ...
    @property
    def lr(self) -> object: ...
    @property
    def momentum(self) -> object: ...
    @property
    def preclip_norm(self) -> object: ...
    @property
    def cclip_tau(self) -> object: ...
    @property
    def cclip_iters(self) -> int: ...


class _CopyFlagLike(Protocol):
    @property
    def a(self) -> str: ...
    @property
    def b(self) -> str: ...
    @property
    def overlap(self) -> object: ...
    @property
    def cosine(self) -> object: ...


class _StateLike(Protocol):
    def theta_hash(self) -> str: ...
    def outer_state_hash(self) -> str: ...
    def center_hash(self) -> str: ...


class MergeResultLike(Protocol):
    """What :func:`build_tape_body` reads of ``merge.MergeResult``."""

    @property
    def state_out(self) -> _StateLike: ...
    @property
    def inputs(self) -> Sequence[tuple[str, str]]: ...
    @property
    def preclipped(self) -> Sequence[str]: ...
    @property
    def copy_flags(self) -> Sequence[_CopyFlagLike]: ...
    @property
    def raise_q(self) -> Sequence[str]: ...


@frozen
class TapeParams:
    """The outer-step parameters the merge ran with (the manifest's ``outer`` subset)."""

    opt: OuterOpt = field(validator=one_of_literal(OuterOpt))
    lr: str = field(validator=f32)
    momentum: str = field(validator=f32)
    preclip_norm: str = field(validator=f32)
    cclip_tau: str = field(validator=f32)
    cclip_iters: int = field(validator=pos_int)

    @classmethod
    def from_params(cls, params: ParamsLike) -> TapeParams:
        """The wire form of ``merge.Params`` (or a manifest ``OuterSpec``)."""
        opt: Any = params.opt
        return cls(
            opt=opt,
            lr=_real(params.lr, "lr"),
            momentum=_real(params.momentum, "momentum"),
            preclip_norm=_real(params.preclip_norm, "preclip_norm"),
            cclip_tau=_real(params.cclip_tau, "cclip_tau"),
            cclip_iters=params.cclip_iters,
        )


@frozen
class TapeInput:
    """One merged contribution: a miner's delta payload, named by its delta hash."""

    id: str = field(validator=ss58)
    source: Literal["delta"] = field(validator=one_of_literal(Literal["delta"]))
    object: str = field(validator=hex64)
    weight: str = field(validator=f32)


@frozen
class CopyFlagEntry:
    """A pair flagged by the copy screen (top-k overlap fraction and cosine, f32)."""

    a: str = field(validator=ss58)
    b: str = field(validator=ss58)
    overlap: str = field(validator=f32)
    cosine: str = field(validator=f32)

    def __attrs_post_init__(self) -> None:
        if self.a == self.b:
            raise FieldError("b", "a copy flag pairs two distinct ids")


@frozen
class Screens:
    """Soft screens: who was pre-clipped, flagged pairs, whose audit rate is raised."""

    preclipped: tuple[str, ...] = field(validator=_ids)
    copy_flags: tuple[CopyFlagEntry, ...] = field(validator=list_of(instance_of(CopyFlagEntry)))
    raise_q: tuple[str, ...] = field(validator=_ids)


@frozen
class TapeBody:
    """The signed body of an ``ht-tape-v1`` event tape (module docstring for the layout)."""

    v: Literal["ht-tape-v1"] = field(validator=one_of_literal(Literal["ht-tape-v1"]))
    run_id: str = field(validator=hex64)
    kind: Literal["global"] = field(validator=one_of_literal(Literal["global"]))
    w: int = field(validator=u_int)
    region: Literal[""] = field(validator=one_of_literal(Literal[""]))
    k: Literal[0] = field(validator=one_of_literal(Literal[0]))
    params: TapeParams = field(validator=instance_of(TapeParams))
    prev_state: str = field(validator=hex64)
    prev_theta_hash: str = field(validator=hex64)
    inputs: tuple[TapeInput, ...] = field(validator=list_of(instance_of(TapeInput)))
    excluded: tuple[str, ...] = field(validator=_ids)
    screens: Screens = field(validator=instance_of(Screens))
    out_state: str = field(validator=hex64)
    theta_hash: str = field(validator=hex64)
    outer_state_hash: str = field(validator=hex64)
    center_hash: str = field(validator=hex64)

    def __attrs_post_init__(self) -> None:
        ids = [item.id for item in self.inputs]
        if any(a >= b for a, b in itertools.pairwise(ids)):
            raise FieldError("inputs", "ids must be sorted ascending and distinct")
        both = sorted(set(ids) & set(self.excluded))
        if both:
            raise FieldError("excluded", f"{both[0]} is also an input")


@frozen
class SignedTape:
    """``{body, signer, sig}``; ``sig`` is hex of the 64-byte ed25519 signature."""

    body: TapeBody = field(validator=instance_of(TapeBody))
    signer: str = field(validator=ss58)
    sig: str = field(validator=sig_hex)


def _real(value: object, what: str) -> str:
    """f32 hex of a real given as f32 hex, an int, a float or a numpy float32 (never a bool)."""
    if isinstance(value, bool):
        raise Malformed(f"tape: {what} is a bool, not a real")
    if isinstance(value, str):
        if not is_f32_hex(value):
            raise Malformed(f"tape: {what} {value!r:.40} is not f32 hex")
        return value
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as e:
        raise Malformed(f"tape: {what} is not a real number: {value!r:.40}") from e
    return f32_hex(number)


def build_tape_body(
    run_id: str,
    w: int,
    params: ParamsLike,
    prev_state_key: str,
    prev_state: _StateLike,
    result: MergeResultLike,
    out_state_key: str,
    delta_hashes: Mapping[str, str],
    excluded: Iterable[str],
) -> TapeBody:
    """The tape body of one global merge ``prev_state -> result.state_out`` of round ``w``.

    ``delta_hashes`` maps every input id to the delta hash (object key) of its payload;
    ``out_state_key`` is ``state_key(pack_outer(result.state_out))``, computed by the caller
    that stored it. Sets are sorted here; inputs keep the merge's (sorted) order. Raises
    Malformed when an input has no delta hash, SchemaError (a Malformed) when a field is refused.
    """
    missing = [hotkey for hotkey, _ in result.inputs if hotkey not in delta_hashes]
    if missing:
        raise Malformed(f"tape: input {missing[0]} has no delta hash")
    try:
        inputs = [
            TapeInput(id=hotkey, source="delta", object=delta_hashes[hotkey], weight=weight)
            for hotkey, weight in result.inputs
        ]
        flags = tuple(
            CopyFlagEntry(
                a=flag.a,
                b=flag.b,
                overlap=_real(flag.overlap, "copy flag overlap"),
                cosine=_real(flag.cosine, "copy flag cosine"),
            )
            for flag in result.copy_flags
        )
    except FieldError as e:
        raise SchemaError(f"TapeBody: {e}") from e
    state = result.state_out
    try:
        return TapeBody(
            v=TAPE_VERSION,
            run_id=run_id,
            kind="global",
            w=w,
            region="",
            k=0,
            params=TapeParams.from_params(params),
            prev_state=prev_state_key,
            prev_theta_hash=prev_state.theta_hash(),
            inputs=tuple(inputs),
            excluded=tuple(sorted(set(excluded))),
            screens=Screens(
                preclipped=tuple(sorted(set(result.preclipped))),
                copy_flags=flags,
                raise_q=tuple(sorted(set(result.raise_q))),
            ),
            out_state=out_state_key,
            theta_hash=state.theta_hash(),
            outer_state_hash=state.outer_state_hash(),
            center_hash=state.center_hash(),
        )
    except FieldError as e:
        raise SchemaError(f"TapeBody: {e}") from e


def seal_tape(keypair: Keypair, body: TapeBody) -> SignedTape:
    """Sign ``body`` over its EventTape bytes (module docstring)."""
    message = event_tape_signed_bytes(unstructure(body), body.run_id)
    return SignedTape(body=body, signer=keypair.ss58, sig=keypair.sign(message).hex())


def tape_key(signed: SignedTape) -> str:
    """``sha256_hex(JCS(signed tape))``: the tape's object-store key."""
    return hashlib.sha256(tape_bytes(signed)).hexdigest()


def tape_bytes(signed: SignedTape) -> bytes:
    """``JCS(signed tape)``: the bytes stored under :func:`tape_key`."""
    return canonical_json(unstructure(signed))


def parse_signed_tape(data: bytes | str | Mapping[str, Any]) -> SignedTape:
    """A signed tape from JSON text or parsed JSON; Malformed (SchemaError) names a bad field.

    Unknown and missing keys are refused at every level. The signature is not checked here
    (see :func:`verify_tape`).
    """
    value = parse_json(data) if isinstance(data, bytes | str) else data
    return structure(SignedTape, value)


def verify_tape(signed: SignedTape, *, coord_ss58: str) -> None:
    """Check that ``signed`` is signed by ``coord_ss58`` and the signature verifies.

    UnauthorizedSigner for another signer, SignatureError for a bad signature.
    """
    if signed.signer != coord_ss58:
        raise UnauthorizedSigner(
            f"tape: signed by {signed.signer}, only the coordinator {coord_ss58} may seal tapes"
        )
    message = event_tape_signed_bytes(unstructure(signed.body), signed.body.run_id)
    if not verify_signature(ss58_public_key(signed.signer), message, bytes.fromhex(signed.sig)):
        raise SignatureError(f"tape: signature by {signed.signer} does not verify")
