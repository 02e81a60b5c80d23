"""The held-out loss functions on their own: the holdout gate, what is owed, write-once rows."""

from __future__ import annotations

import math
import shutil
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import numpy as np
import pytest

from hypertrain.coordinator.flows.heldout import (
    LossRow,
    Pending,
    get_loss,
    get_loss_row,
    heldout_loss,
    pending,
    read_holdout,
    record_loss,
)
from hypertrain.coordinator.tables.runs import insert_run
from hypertrain.datasets import BuildOptions, SourceRoot, build
from hypertrain.datasets.errors import DatasetError
from hypertrain.datasets.tokenizer import VOCAB
from hypertrain.protocol.hashes import sha256_hex
from hypertrain.protocol.manifest import ModelSpec
from hypertrain.protocol.testmode import decoder_param_count
from hypertrain.store import Database, open_database
from hypertrain.trainer.params import init_params
from nurseries import FixedClock
from tests.coordinator.lifecycle_support import sealed
from tests.trainer.helpers import TINY_DIMS, tiny_manifest

SEQ_LEN = 16
RUN, OTHER = "ab" * 32, "cd" * 32
TEXT = "".join(f"line {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(400))


def _build(root: Path, salt: bytes) -> Path:
    root.mkdir()
    source = root / "corpus.txt"
    source.write_text(TEXT, encoding="utf-8")
    out = root / "data"
    build(
        BuildOptions(
            sources=(SourceRoot(source, "corpus"),),
            out=out,
            seq_len=SEQ_LEN,
            samples_per_shard=64,
            salt=salt,
        )
    )
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory.mktemp("heldout") / "a", b"s" * 32)


def _copy(built: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    return copy


def _sha(directory: Path) -> str:
    return sha256_hex((directory / "manifest.json").read_bytes())


def _model() -> ModelSpec:
    base = tiny_manifest().model
    return attrs.evolve(
        base,
        vocab=VOCAB,
        seq_len=SEQ_LEN,
        param_count=decoder_param_count(vocab=VOCAB, **TINY_DIMS),
    )


def test_the_registered_holdout_opens(built: Path) -> None:
    rows = read_holdout(built, _sha(built), SEQ_LEN, 8)
    assert rows.shape == (8, SEQ_LEN + 1)
    assert rows.dtype == np.uint16
    everything = read_holdout(built, _sha(built), SEQ_LEN, 10**6)
    assert 8 < len(everything) < 10**6  # at most the whole split


def test_a_directory_of_another_dataset_is_refused(built: Path, tmp_path: Path) -> None:
    other = _build(tmp_path / "b", b"t" * 32)  # a different salt: a different manifest
    with pytest.raises(DatasetError, match="registered dataset is " + _sha(built)):
        read_holdout(other, _sha(built), SEQ_LEN, 8)
    with pytest.raises(DatasetError, match="cannot read"):
        read_holdout(tmp_path / "nowhere", _sha(built), SEQ_LEN, 8)


def test_a_tampered_holdout_shard_is_refused(built: Path, tmp_path: Path) -> None:
    copy = _copy(built, tmp_path)
    shard = sorted(copy.glob("holdout-*.u16"))[0]
    data = bytearray(shard.read_bytes())
    data[0] ^= 1
    shard.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match="holdout"):
        read_holdout(copy, _sha(built), SEQ_LEN, 8)


def test_a_holdout_without_its_salt_or_of_another_seq_len_is_refused(
    built: Path, tmp_path: Path
) -> None:
    with pytest.raises(DatasetError, match="seq_len 16 is not the model's 32"):
        read_holdout(built, _sha(built), 32, 8)
    copy = _copy(built, tmp_path)
    (copy / "holdout.salt").unlink()
    with pytest.raises(DatasetError, match="commitment"):
        read_holdout(copy, _sha(built), SEQ_LEN, 8)


def test_init_params_are_near_uniform_on_the_holdout(built: Path, configured: None) -> None:
    model = _model()
    rows = read_holdout(built, _sha(built), SEQ_LEN, 64)
    theta = init_params(model)
    value = heldout_loss(model, theta, rows, 16)
    assert isinstance(value, float)
    assert abs(value - math.log(VOCAB)) < 0.5  # ln 259 = 5.56
    # Micro-batching does not change the mean beyond float32 noise.
    assert heldout_loss(model, theta, rows, 5) == pytest.approx(value, rel=1e-5)
    assert heldout_loss(model, theta, rows, 16) == value  # deterministic
    with pytest.raises(ValueError, match="batch"):
        heldout_loss(model, theta, rows, 0)


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    async with open_database(tmp_path / "state.db", wall_clock=FixedClock(0.0)) as database:
        yield database


def _setup(conn: sqlite3.Connection) -> None:
    insert_run(conn, RUN, str(sealed()), 1, 0)
    conn.execute(  # a second run (one state directory holds one run through the routes)
        "INSERT INTO runs (run_id, manifest_envelope, status, created_round, created_at)"
        " VALUES (?, '{}', 'created', 1, 0)",
        (OTHER,),
    )
    conn.execute("INSERT INTO run_datasets VALUES (?, ?, 0)", (RUN, "ee" * 32))
    for w in (0, 1):
        for run_id in (RUN, OTHER):
            conn.execute(
                "INSERT INTO aggregations VALUES (?, ?, 'tape', 'out', ?, ?, 1.0, 0, 9, '[]')",
                (run_id, w, f"{w + 1:064x}", f"th{w + 1}"),
            )


async def test_pending_lists_each_theta_of_a_run_with_a_dataset_until_recorded(
    db: Database,
) -> None:
    await db.write(_setup)
    expected = [
        Pending(RUN, 0, "ee" * 32, None, None),
        Pending(RUN, 1, "ee" * 32, f"{1:064x}", "th1"),
        Pending(RUN, 2, "ee" * 32, f"{2:064x}", "th2"),  # after the last merge too
    ]
    assert await db.read(pending) == expected  # OTHER has no dataset
    row = LossRow("th1", 4.5, 64, 12)
    assert await db.write(record_loss, RUN, 1, row)
    assert not await db.write(record_loss, RUN, 1, attrs.evolve(row, loss=1.0))  # write-once
    assert await db.read(get_loss_row, RUN, 1) == row
    assert await db.read(get_loss, RUN, 1) == 4.5
    assert await db.read(get_loss, RUN, 2) is None
    assert await db.read(pending) == [expected[0], expected[2]]
