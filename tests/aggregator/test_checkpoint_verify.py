"""Verifying and replaying a checkpoint (aggregator/checkpoint_verify.py): a good one passes,
and each way of damaging one fails the check that names it (and only a replay catches what
only a replay can)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np
import pytest
from safetensors.numpy import load as st_load

from hypertrain.aggregator.checkpoint import (
    LINEAGE_FILE,
    MANIFEST_FILE,
    MODEL_FILE,
    CheckpointBody,
    build_checkpoint,
    lineage_bytes,
    manifest_bytes,
    model_bytes,
    parse_lineage,
    parse_manifest,
    read_model,
    seal_checkpoint,
)
from hypertrain.aggregator.checkpoint_verify import (
    CheckpointInvalid,
    check_checkpoint,
    replay_checkpoint,
    verify_checkpoint,
)
from hypertrain.aggregator.outerstate import unpack_outer
from hypertrain.aggregator.step import MergeInputs, merge_blobs
from hypertrain.aggregator.tape import (
    SignedTape,
    TapeInput,
    parse_signed_tape,
    seal_tape,
    tape_bytes,
)
from hypertrain.protocol.errors import NotFound
from tests.aggregator.chain import COORD, INFO_OF, OTHER, Chain, key_of, make_chain

Files = dict[str, bytes]


@pytest.fixture(scope="module")
def chain() -> Chain:
    return make_chain(rounds=3)


def failed(files: Files, load: Callable[[str], bytes] | None = None, **kw: object) -> list[str]:
    with pytest.raises(CheckpointInvalid) as info:
        verify_checkpoint(files, load_object=load, **kw)  # type: ignore[arg-type]
    return info.value.failed


def resealed(files: Files, **changes: Any) -> Files:
    """``files`` with their manifest's body changed and re-signed by COORD, and ``files``
    hashes made to match the files (so the hash checks alone cannot catch a change)."""
    signed = parse_manifest(files[MANIFEST_FILE])
    hashes = {n: hashlib.sha256(files[n]).hexdigest() for n in (LINEAGE_FILE, MODEL_FILE)}
    body: CheckpointBody = attrs.evolve(signed.body, files=hashes, **changes)
    return {**files, MANIFEST_FILE: manifest_bytes(seal_checkpoint(COORD, body))}


def with_tapes(files: Files, tapes: list[SignedTape]) -> Files:
    return resealed({**files, LINEAGE_FILE: lineage_bytes(tapes)})


def test_a_good_checkpoint_verifies_with_and_without_replay(chain: Chain) -> None:
    files = chain.checkpoint()
    report = verify_checkpoint(files, signer=COORD.ss58)
    assert (report.replayed, report.replayed_rounds) == (False, 0)
    out = report.to_json()
    assert out["result"] == "VERIFIED"
    assert (out["rounds"], out["status"], out["signer"]) == ([0, 2], "final", COORD.ss58)
    assert out["theta_hash"] == chain.steps[-1].theta_hash
    assert out["dataset"]["name"] == "stdlib"
    replayed = verify_checkpoint(files, signer=COORD.ss58, load_object=chain.store.__getitem__)
    assert (replayed.replayed, replayed.replayed_rounds, replayed.genesis) == (True, 3, True)


def test_replay_reads_only_what_the_tapes_need(chain: Chain) -> None:
    asked: list[str] = []

    def load(key: str) -> bytes:
        asked.append(key)
        return chain.store[key]

    verify_checkpoint(chain.checkpoint(), load_object=load)
    tapes = chain.tapes()
    deltas = {item.object for tape in tapes for item in tape.body.inputs}
    assert sorted(asked) == sorted({tapes[0].body.prev_state} | deltas)


def test_a_provisional_checkpoint_fails_status(chain: Chain) -> None:
    with pytest.raises(CheckpointInvalid) as info:
        verify_checkpoint(chain.checkpoint("provisional"))
    assert info.value.failed == ["status"]
    assert "provisional" in info.value.failures[0].detail


def test_an_extra_or_missing_file_fails_files(chain: Chain) -> None:
    files = chain.checkpoint()
    assert failed({**files, "notes.txt": b"hi"}) == ["files"]
    assert failed(files, others={"sub": "a directory"}) == ["files"]
    without = {n: b for n, b in files.items() if n != MODEL_FILE}
    assert failed(without) == ["files"]
    checked = check_checkpoint({**files, "x": b""})
    assert "extra x" in checked.failures[0].detail


def test_a_changed_file_fails_its_hash(chain: Chain) -> None:
    files = chain.checkpoint()
    model = bytearray(files[MODEL_FILE])
    model[-1] ^= 1
    assert "hash:model.safetensors" in failed({**files, MODEL_FILE: bytes(model)})


def _one_weight_changed(files: Files) -> bytes:
    parsed = read_model(files[MODEL_FILE])
    theta = {n: a.copy() for n, a in st_load(files[MODEL_FILE]).items()}
    name = sorted(theta)[0]
    theta[name].reshape(-1)[0] += np.float32(1e-3)
    return model_bytes(theta, parsed.model, parsed.run_id, parsed.w)


def test_one_weight_changed_and_resealed_fails_model_and_replay(chain: Chain) -> None:
    files = resealed({**chain.checkpoint(), MODEL_FILE: _one_weight_changed(chain.checkpoint())})
    assert failed(files) == ["model"]
    assert failed(files, chain.store.__getitem__) == ["model", "replay.model"]


def test_a_model_file_resealed_with_its_theta_hash_fails_replay_model(chain: Chain) -> None:
    """(``theta_hash`` catches it too, against the last tape; the replay compares the file.)"""
    files = chain.checkpoint()
    changed = _one_weight_changed(files)
    files = resealed({**files, MODEL_FILE: changed}, theta_hash=read_model(changed).theta_hash())
    assert "replay.model" in failed(files, chain.store.__getitem__)
    assert "replay.model" not in failed(files)


def test_a_tape_removed_from_the_lineage(chain: Chain) -> None:
    files, tapes = chain.checkpoint(), chain.tapes()
    middle = failed(with_tapes(files, [tapes[0], tapes[2]]))
    assert {"lineage.rounds", "lineage.chain"} <= set(middle)
    assert "hash:lineage.json" not in middle
    assert "rounds" in failed(with_tapes(files, tapes[1:]))
    last = failed(with_tapes(files, tapes[:2]))
    assert {"rounds", "theta_hash"} <= set(last)


def test_a_reordered_lineage(chain: Chain) -> None:
    tapes = chain.tapes()
    got = failed(with_tapes(chain.checkpoint(), [tapes[1], tapes[0], tapes[2]]))
    assert {"lineage.rounds", "lineage.chain", "rounds"} <= set(got)


def test_a_manifest_signed_by_another_key(chain: Chain) -> None:
    files = chain.checkpoint(key=OTHER)
    assert failed(files, signer=COORD.ss58) == ["signer", "lineage.signature"]
    assert failed(files) == ["lineage.signature"]
    assert failed(files, chain.store.__getitem__) == ["lineage.signature"]


def test_a_bad_manifest_signature(chain: Chain) -> None:
    files = chain.checkpoint()
    signed = parse_manifest(files[MANIFEST_FILE])
    forged = attrs.evolve(signed, body=attrs.evolve(signed.body, license="MIT"))
    assert failed({**files, MANIFEST_FILE: manifest_bytes(forged)}) == ["signature"]


def test_a_bad_manifest_skips_what_depends_on_it(chain: Chain) -> None:
    files = chain.checkpoint()
    assert failed({**files, MANIFEST_FILE: b"{}"}) == ["manifest"]
    raw = files[MANIFEST_FILE].replace(b'"license":"Apache-2.0"', b'"license":""')
    assert failed({**files, MANIFEST_FILE: raw}) == ["manifest", "license"]
    assert failed({**files, LINEAGE_FILE: b"[]"}) == ["hash:lineage.json", "lineage"]


def test_included_must_be_the_tapes_inputs(chain: Chain) -> None:
    files = chain.checkpoint()
    body = parse_manifest(files[MANIFEST_FILE]).body
    assert failed(resealed(files, included=body.included[1:])) == ["included"]


def _changed_delta(chain: Chain, w: int) -> tuple[str, bytes]:
    key = chain.tapes()[w].body.inputs[0].object
    blob = bytearray(chain.store[key])
    blob[-1] ^= 0x01
    return key, bytes(blob)


def test_a_changed_stored_delta_fails_its_object(chain: Chain) -> None:
    key, blob = _changed_delta(chain, 1)
    store = {**chain.store, key: blob}
    got = failed(chain.checkpoint(), store.__getitem__)
    assert got == [f"object:{key}"]
    missing = {k: v for k, v in chain.store.items() if k != key}
    assert failed(chain.checkpoint(), missing.__getitem__) == [f"object:{key}"]

    def not_found(k: str) -> bytes:
        if k == key:
            raise NotFound(f"object {k} is not stored")
        return chain.store[k]

    checked = replay_checkpoint(check_checkpoint(chain.checkpoint()), not_found)
    assert checked.replayed_rounds == 1
    assert "tape w=1 inputs[0].object" in checked.failures[0].detail


def test_a_rekeyed_delta_fails_only_the_replay(chain: Chain) -> None:
    """The tape is re-signed naming the changed delta's own hash: every signature and hash
    holds, only recomputing the merge shows the tape's outputs are not its inputs'."""
    _, blob = _changed_delta(chain, 1)
    store = {**chain.store, key_of(blob): blob}
    tapes = chain.tapes()
    body = tapes[1].body
    moved = attrs.evolve(body.inputs[0], object=key_of(blob))
    assert isinstance(moved, TapeInput)
    tapes[1] = seal_tape(COORD, attrs.evolve(body, inputs=(moved, *body.inputs[1:])))
    files = with_tapes(chain.checkpoint(), tapes)
    assert parse_lineage(files[LINEAGE_FILE]).tapes[1] == tapes[1]
    assert key_of(tape_bytes(tapes[1])) != key_of(tape_bytes(chain.tapes()[1]))
    verify_checkpoint(files)  # structurally sound
    checked = replay_checkpoint(check_checkpoint(files), store.__getitem__)
    assert [f.check for f in checked.failures] == ["replay[w=1]"]
    assert checked.failures[0].detail.startswith(("out_state", "theta_hash", "outer_state_hash"))
    assert checked.replayed_rounds == 1


def test_round_0_from_a_state_that_is_not_genesis_fails_genesis(chain: Chain) -> None:
    """Round 0 merged on top of round 0's own output (u and center not zero): every tape and
    hash holds, the merge replays, only the genesis check sees it."""
    later = chain.steps[0]
    uploads = sorted(
        (hk, chain.store[o]) for hk, o in ((i.id, i.object) for i in chain.tapes()[0].body.inputs)
    )
    step = merge_blobs(
        MergeInputs(
            chain.manifest.run_id(),
            0,
            chain.manifest,
            later.theta_hash,
            later.out_state,
            tuple((hk, key_of(blob)) for hk, blob in uploads),
        ),
        chain.store[later.out_state],
        uploads,
        COORD,
    )
    store = {**chain.store, **{key_of(blob): blob for blob in step.objects}}
    tape = parse_signed_tape(store[step.tape_key])
    files = build_checkpoint(
        COORD,
        status="final",
        tapes=[tape],
        theta=unpack_outer(store[step.out_state]).theta,
        model=chain.manifest.model,
        info=INFO_OF(chain.manifest),
    )
    verify_checkpoint(files)
    assert failed(files, store.__getitem__) == ["genesis"]
    good = replay_checkpoint(check_checkpoint(chain.checkpoint()), chain.store.__getitem__)
    assert good.genesis
