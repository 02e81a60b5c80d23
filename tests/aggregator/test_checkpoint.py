"""The checkpoint files (aggregator/checkpoint.py): what they hold, that the same rounds give
the same bytes, and what the parsers refuse."""

from __future__ import annotations

import hashlib
import json
import struct

import numpy as np
import pytest
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from hypertrain.aggregator.checkpoint import (
    FILES,
    LINEAGE_FILE,
    MANIFEST_FILE,
    MODEL_FILE,
    build_checkpoint,
    included_of,
    object_keys,
    parse_lineage,
    parse_manifest,
    read_model,
    verify_manifest_signature,
)
from hypertrain.protocol.errors import Malformed, SignatureError, UnauthorizedSigner
from hypertrain.protocol.tensorhash import th_hex
from tests.aggregator.chain import COORD, INFO_OF, MINERS, OTHER, Chain, make_chain


@pytest.fixture(scope="module")
def chain() -> Chain:
    return make_chain(rounds=3)


def test_files_hold_the_rounds_and_theta(chain: Chain) -> None:
    files = chain.checkpoint()
    assert sorted(files) == list(FILES)
    signed = parse_manifest(files[MANIFEST_FILE])
    verify_manifest_signature(signed, signer=COORD.ss58)
    body = signed.body
    assert (body.v, body.status, body.run_id) == ("ht-ckpt-v1", "final", chain.manifest.run_id())
    assert body.rounds == (0, 2)
    assert body.theta_hash == chain.steps[-1].theta_hash
    assert body.included == tuple(sorted(MINERS))
    assert body.files == {
        name: hashlib.sha256(files[name]).hexdigest() for name in (LINEAGE_FILE, MODEL_FILE)
    }
    lineage = parse_lineage(files[LINEAGE_FILE])
    assert [t.body.w for t in lineage.tapes] == [0, 1, 2]
    assert included_of(lineage.tapes) == body.included
    model = read_model(files[MODEL_FILE])
    assert (model.run_id, model.w, model.model) == (body.run_id, 2, chain.manifest.model)
    assert model.theta_hash() == body.theta_hash == th_hex(chain.theta())
    keys = object_keys(lineage.tapes)
    assert all(key in chain.store for key in keys)
    assert {chain.steps[0].out_state, chain.steps[2].out_state} <= set(keys)


def test_the_same_rounds_give_the_same_bytes(chain: Chain) -> None:
    assert chain.checkpoint() == make_chain(rounds=3).checkpoint()
    provisional = chain.checkpoint("provisional")
    assert provisional[MODEL_FILE] == chain.checkpoint()[MODEL_FILE]
    assert parse_manifest(provisional[MANIFEST_FILE]).body.status == "provisional"


def test_model_file_loads_with_safetensors_alone(chain: Chain) -> None:
    arrays = st_load(chain.checkpoint()[MODEL_FILE])
    assert th_hex(arrays) == chain.steps[-1].theta_hash


def test_manifest_signature_and_signer(chain: Chain) -> None:
    other = parse_manifest(chain.checkpoint(key=OTHER)[MANIFEST_FILE])
    verify_manifest_signature(other)
    with pytest.raises(UnauthorizedSigner):
        verify_manifest_signature(other, signer=COORD.ss58)
    raw = json.loads(chain.checkpoint()[MANIFEST_FILE])
    raw["body"]["license"] = "MIT"
    with pytest.raises(SignatureError):
        verify_manifest_signature(parse_manifest(json.dumps(raw).encode()))


def test_build_refuses_tapes_that_do_not_follow(chain: Chain) -> None:
    tapes = chain.tapes()
    with pytest.raises(Malformed, match="consecutive"):
        build_checkpoint(
            COORD,
            status="final",
            tapes=[tapes[0], tapes[2]],
            theta=chain.theta(),
            model=chain.manifest.model,
            info=INFO_OF(chain.manifest),
        )
    with pytest.raises(Malformed, match="theta_hash"):
        build_checkpoint(
            COORD,
            status="final",
            tapes=tapes[:2],
            theta=chain.theta(),
            model=chain.manifest.model,
            info=INFO_OF(chain.manifest),
        )


def _with_metadata(arrays: dict[str, np.ndarray], meta: dict[str, str] | None) -> bytes:
    data: bytes = st_save(arrays, metadata=meta)
    return data


def test_read_model_refuses(chain: Chain) -> None:
    good = chain.checkpoint()[MODEL_FILE]
    arrays = st_load(good)
    (size,) = struct.unpack("<Q", good[:8])
    meta = json.loads(good[8 : 8 + size])["__metadata__"]
    cases = {
        "metadata must be exactly": _with_metadata(arrays, None),
        "metadata must be exactly ": _with_metadata(arrays, {**meta, "format": "pt"}),
        "not the model's": _with_metadata(
            {k: v for k, v in arrays.items() if k != "norm.weight"}, meta
        ),
        "float64": _with_metadata(
            {**arrays, "norm.weight": arrays["norm.weight"].astype(np.float64)}, meta
        ),
        "header": b"\x00" * 4,
        "runs past": struct.pack("<Q", 1 << 40) + b"{}",
    }
    for expected, data in cases.items():
        with pytest.raises(Malformed, match=expected.strip()):
            read_model(data)
