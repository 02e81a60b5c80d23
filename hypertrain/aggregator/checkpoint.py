"""Checkpoints ``ht-ckpt-v1``: the files of one and their K_coord-signed manifest (spec 7).

A checkpoint directory holds exactly three files::

    model.safetensors  theta(w_end + 1), float32, written by the safetensors library; its one
                       metadata key "hypertrain" holds JCS {v: "ht-model-v1", run_id, w, model}
                       (w = w_end, model = the run manifest's ModelSpec), so the file alone
                       says what network it is (``hypertrain sample``, ``hypertrain export``)
    lineage.json       JCS {"tapes": [signed global tapes of rounds w_start..w_end, in order],
                            "regional": {}}
    MANIFEST.json      JCS {body, signer, sig}; sig is ed25519 over
                       b"hypertrain/1|Checkpoint|" + sha256_hex(JCS(body))

and the body::

    {"v": "ht-ckpt-v1", "status": "provisional" | "final", "run_id": hex64,
     "rounds": [w_start, w_end], "theta_hash": TH(model), "included": [ss58, ...],
     "license": str, "dataset": {"name", "license", "attribution", "merkle_root"},
     "files": {"lineage.json": sha256, "model.safetensors": sha256}}

``included`` is the sorted set of every tape's input ids (spec 7: "region:*" ids excluded;
only global tapes exist here). ``status`` is ``final`` only when every round in range is final.

Every file is a pure function of its inputs: safetensors writes tensors in a fixed order and
a single metadata key (it orders several keys by a per-process hash seed), JCS is canonical and
ed25519 deterministic, so the same rounds always give the same bytes. :func:`build_checkpoint`
makes the files; :mod:`.checkpoint_verify` checks them (and replays them).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import struct
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import attrs
import numpy as np
from attrs import field, frozen
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from hypertrain.aggregator.tape import SignedTape
from hypertrain.protocol.converter import structure, unstructure
from hypertrain.protocol.errors import Malformed, SignatureError, UnauthorizedSigner
from hypertrain.protocol.hashes import checkpoint_signed_bytes
from hypertrain.protocol.jcs import canonical_json, parse_json
from hypertrain.protocol.keys import Keypair, verify_signature
from hypertrain.protocol.manifest import ModelSpec
from hypertrain.protocol.tensorhash import th_hex
from hypertrain.protocol.validators import (
    LABEL_MAX,
    Check,
    FieldError,
    Validator,
    hex64,
    instance_of,
    is_label,
    list_of,
    one_of_literal,
    sig_hex,
    ss58,
    ss58_public_key,
    u_int,
)
from hypertrain.trainer.codec import F32Array
from hypertrain.trainer.params import param_shapes

__all__ = [
    "CKPT_VERSION",
    "FILES",
    "LINEAGE_FILE",
    "MANIFEST_FILE",
    "MODEL_FILE",
    "MODEL_VERSION",
    "CheckpointBody",
    "CheckpointInfo",
    "DatasetInfo",
    "Lineage",
    "ModelFile",
    "SignedCheckpoint",
    "Status",
    "build_checkpoint",
    "file_hashes",
    "included_of",
    "lineage_bytes",
    "manifest_bytes",
    "model_bytes",
    "object_keys",
    "parse_lineage",
    "parse_manifest",
    "read_model",
    "seal_checkpoint",
    "verify_manifest_signature",
]

CKPT_VERSION: Final = "ht-ckpt-v1"
MODEL_VERSION: Final = "ht-model-v1"
MODEL_FILE: Final = "model.safetensors"
LINEAGE_FILE: Final = "lineage.json"
MANIFEST_FILE: Final = "MANIFEST.json"
FILES: Final = (MANIFEST_FILE, LINEAGE_FILE, MODEL_FILE)
"""The exact file set of a checkpoint directory, sorted."""
HASHED_FILES: Final = (LINEAGE_FILE, MODEL_FILE)
"""The files the manifest's ``files`` names (the manifest cannot name itself)."""
_META_KEY: Final = "hypertrain"

Status = Literal["provisional", "final"]


label: Final = Check(is_label, f"must be non-empty printable text of <= {LABEL_MAX} chars")


def _rounds(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    ok = (
        isinstance(value, tuple)
        and len(value) == 2
        and all(type(v) is int for v in value)
        and u_int.test(value[0])
        and u_int.test(value[1])
        and value[0] <= value[1]
    )
    if not ok:
        raise FieldError(attribute.name, "must be [w_start, w_end] with 0 <= w_start <= w_end")


def file_hashes(names: Sequence[str]) -> Validator:
    """A ``{name: sha256}`` dict naming exactly ``names`` (the manifest's ``files``, and the
    daemon's listing of a checkpoint, which names all three)."""
    wanted = sorted(names)

    def validate(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not isinstance(value, dict) or sorted(value) != wanted:
            raise FieldError(attribute.name, f"must name exactly {', '.join(wanted)}")
        for name, digest in value.items():
            hex64.check(f"{attribute.name}.{name}", digest)

    return validate


def _no_regional(_inst: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value != {}:
        raise FieldError(attribute.name, "must be {} (regional merges are not implemented)")


@frozen
class DatasetInfo:
    """What the model was trained on: a name, its license and attribution, its Merkle root."""

    name: str = field(validator=label)
    license: str = field(validator=label)
    attribution: str = field(validator=label)
    merkle_root: str = field(validator=hex64)


@frozen
class CheckpointBody:
    """The signed body of ``MANIFEST.json`` (module docstring)."""

    v: Literal["ht-ckpt-v1"] = field(validator=one_of_literal(Literal["ht-ckpt-v1"]))
    status: Status = field(validator=one_of_literal(Status))
    run_id: str = field(validator=hex64)
    rounds: tuple[int, int] = field(validator=_rounds)
    theta_hash: str = field(validator=hex64)
    included: tuple[str, ...] = field(validator=list_of(ss58, strictly_sorted=True))
    license: str = field(validator=label)
    dataset: DatasetInfo = field(validator=instance_of(DatasetInfo))
    files: dict[str, str] = field(validator=file_hashes(HASHED_FILES))


@frozen
class SignedCheckpoint:
    """``MANIFEST.json``: ``{body, signer, sig}``."""

    body: CheckpointBody = field(validator=instance_of(CheckpointBody))
    signer: str = field(validator=ss58)
    sig: str = field(validator=sig_hex)


@frozen
class Lineage:
    """``lineage.json``: the signed global tapes in round order (and no regional tapes)."""

    tapes: tuple[SignedTape, ...] = field(validator=list_of(instance_of(SignedTape), min_len=1))
    regional: dict[str, Any] = field(validator=_no_regional)


@frozen
class CheckpointInfo:
    """What a checkpoint is of, besides its tapes: the terms it is published under."""

    license: str
    dataset: DatasetInfo


@frozen(eq=False)
class ModelFile:
    """A parsed ``model.safetensors``: theta and what the metadata says it is."""

    theta: dict[str, F32Array]
    model: ModelSpec
    run_id: str
    w: int

    def theta_hash(self) -> str:
        """``TH(theta)``."""
        return th_hex(self.theta)


def model_bytes(theta: Mapping[str, Any], model: ModelSpec, run_id: str, w: int) -> bytes:
    """``model.safetensors`` of ``theta`` (float32, the model's names and shapes)."""
    shapes = param_shapes(model)
    if {n: tuple(np.shape(a)) for n, a in theta.items()} != shapes:
        raise Malformed("model: theta's names or shapes are not the model's")
    arrays = {n: np.ascontiguousarray(theta[n], dtype="<f4") for n in shapes}
    meta = {"v": MODEL_VERSION, "run_id": run_id, "w": w, "model": unstructure(model)}
    data: bytes = st_save(arrays, metadata={_META_KEY: canonical_json(meta).decode("ascii")})
    return data


def _header(data: bytes) -> dict[str, Any]:
    if len(data) < 8:
        raise Malformed("model.safetensors: shorter than its header length")
    (size,) = struct.unpack("<Q", data[:8])
    if size > len(data) - 8:
        raise Malformed("model.safetensors: header runs past the end of the file")
    try:
        header = json.loads(data[8 : 8 + size])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise Malformed(f"model.safetensors: header is not JSON ({e})") from e
    if not isinstance(header, dict):
        raise Malformed("model.safetensors: header is not a JSON object")
    return header


def read_model(data: bytes) -> ModelFile:
    """Parse ``model.safetensors`` strictly; Malformed names what is wrong.

    The metadata must be exactly ``{"hypertrain": JCS {v, run_id, w, model}}`` and the tensors
    exactly the model's names and shapes, every one float32.
    """
    meta = _header(data).get("__metadata__")
    if not isinstance(meta, dict) or sorted(meta) != [_META_KEY]:
        raise Malformed(f'model.safetensors: metadata must be exactly {{"{_META_KEY}": ...}}')
    try:
        info = parse_json(meta[_META_KEY])
    except Malformed as e:
        raise Malformed(f"model.safetensors: metadata is not JSON: {e.detail}") from e
    if not isinstance(info, dict) or sorted(info) != ["model", "run_id", "v", "w"]:
        raise Malformed("model.safetensors: metadata must hold exactly v, run_id, w and model")
    if info["v"] != MODEL_VERSION or not hex64.test(info["run_id"]) or not u_int.test(info["w"]):
        raise Malformed("model.safetensors: metadata v, run_id or w is not valid")
    model = structure(ModelSpec, info["model"])
    try:
        arrays = st_load(data)
    except Exception as e:  # the library raises its own SafetensorError for any bad file
        raise Malformed(f"model.safetensors: not a safetensors file ({e})") from e
    shapes = param_shapes(model)
    got = {n: tuple(a.shape) for n, a in arrays.items()}
    if got != shapes:
        missing = sorted(set(shapes) - set(got)) or sorted(set(got) - set(shapes))
        bad = missing[0] if missing else next(n for n in shapes if got[n] != shapes[n])
        raise Malformed(f"model.safetensors: tensor {bad!r} is not the model's")
    for name, array in arrays.items():
        if array.dtype != np.dtype("<f4"):
            raise Malformed(f"model.safetensors: tensor {name!r} is {array.dtype}, not float32")
    theta = {n: np.array(arrays[n], dtype=np.float32) for n in shapes}
    return ModelFile(theta=theta, model=model, run_id=info["run_id"], w=info["w"])


def included_of(tapes: Sequence[SignedTape]) -> tuple[str, ...]:
    """The sorted set of every tape's input ids."""
    return tuple(sorted({item.id for tape in tapes for item in tape.body.inputs}))


def object_keys(tapes: Sequence[SignedTape]) -> tuple[str, ...]:
    """Every store object a replay of ``tapes`` reads or checks, sorted: each tape's
    ``prev_state`` and ``out_state`` and every input delta."""
    keys = set()
    for tape in tapes:
        keys |= {tape.body.prev_state, tape.body.out_state}
        keys |= {item.object for item in tape.body.inputs}
    return tuple(sorted(keys))


def lineage_bytes(tapes: Sequence[SignedTape]) -> bytes:
    """``lineage.json`` of ``tapes``."""
    return canonical_json(unstructure(Lineage(tapes=tuple(tapes), regional={})))


def parse_lineage(data: bytes) -> Lineage:
    """``lineage.json``; Malformed (SchemaError) names the field."""
    return structure(Lineage, parse_json(data))


def seal_checkpoint(keypair: Keypair, body: CheckpointBody) -> SignedCheckpoint:
    """Sign ``body`` (module docstring)."""
    message = checkpoint_signed_bytes(unstructure(body))
    return SignedCheckpoint(body=body, signer=keypair.ss58, sig=keypair.sign(message).hex())


def manifest_bytes(signed: SignedCheckpoint) -> bytes:
    """``MANIFEST.json``: JCS of the signed manifest."""
    return canonical_json(unstructure(signed))


def parse_manifest(data: bytes) -> SignedCheckpoint:
    """``MANIFEST.json``; Malformed (SchemaError) names the field. The signature is not
    checked here (:func:`verify_manifest_signature`)."""
    return structure(SignedCheckpoint, parse_json(data))


def verify_manifest_signature(signed: SignedCheckpoint, *, signer: str | None = None) -> None:
    """SignatureError unless ``sig`` verifies for ``signed.signer``; UnauthorizedSigner when
    ``signer`` is given and is someone else."""
    if signer is not None and signed.signer != signer:
        raise UnauthorizedSigner(f"manifest: signed by {signed.signer}, expected {signer}")
    message = checkpoint_signed_bytes(unstructure(signed.body))
    if not verify_signature(ss58_public_key(signed.signer), message, bytes.fromhex(signed.sig)):
        raise SignatureError(f"manifest: signature by {signed.signer} does not verify")


def build_checkpoint(
    keypair: Keypair,
    *,
    status: Status,
    tapes: Sequence[SignedTape],
    theta: Mapping[str, Any],
    model: ModelSpec,
    info: CheckpointInfo,
) -> dict[str, bytes]:
    """The three files of the checkpoint over ``tapes`` (consecutive rounds of one run, the
    last one's output being ``theta``), by file name.

    Malformed when the tapes are not consecutive rounds of one run or ``TH(theta)`` is not the
    last tape's ``theta_hash``.
    """
    if not tapes:
        raise Malformed("checkpoint: no tapes")
    first = tapes[0].body
    for before, after in itertools.pairwise(tapes):
        if (after.body.run_id, after.body.w) != (first.run_id, before.body.w + 1):
            raise Malformed("checkpoint: tapes are not consecutive rounds of one run")
    last = tapes[-1].body
    model_file = model_bytes(theta, model, first.run_id, last.w)
    if th_hex(theta) != last.theta_hash:
        raise Malformed("checkpoint: TH(theta) is not the last tape's theta_hash")
    lineage = lineage_bytes(tapes)
    body = CheckpointBody(
        v=CKPT_VERSION,
        status=status,
        run_id=first.run_id,
        rounds=(first.w, last.w),
        theta_hash=last.theta_hash,
        included=included_of(tapes),
        license=info.license,
        dataset=info.dataset,
        files={
            LINEAGE_FILE: hashlib.sha256(lineage).hexdigest(),
            MODEL_FILE: hashlib.sha256(model_file).hexdigest(),
        },
    )
    manifest = manifest_bytes(seal_checkpoint(keypair, body))
    return {LINEAGE_FILE: lineage, MANIFEST_FILE: manifest, MODEL_FILE: model_file}
