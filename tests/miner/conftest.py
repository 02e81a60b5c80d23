"""Miner fixtures: a tiny dataset, a manifest over it and keys (the process is configured for
bitwise CPU training by the suite-wide ``configured`` fixture of tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from hypertrain.datasets import BuildOptions, DatasetManifest, SourceRoot, build
from hypertrain.datasets.tokenizer import VOCAB
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from hypertrain.protocol.testmode import decoder_param_count
from hypertrain.trainer.params import init_state_hash
from tests.trainer.helpers import TINY_DIMS, in_process_env, tiny_manifest

SEQ_LEN = 16
TEXT = "".join(f"line {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(400))


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny built dataset (byte tokens, seq_len 16, 64 samples a shard)."""
    root = tmp_path_factory.mktemp("miner-data")
    source = root / "corpus.txt"
    source.write_text(TEXT, encoding="utf-8")
    out = root / "data"
    build(
        BuildOptions(
            sources=(SourceRoot(source, "corpus"),),
            out=out,
            seq_len=SEQ_LEN,
            samples_per_shard=64,
            salt=b"s" * 32,
        )
    )
    return out


@pytest.fixture(scope="session")
def coord() -> Keypair:
    return Keypair.from_seed(b"\x01" * 32)


@pytest.fixture(scope="session")
def owner() -> Keypair:
    return Keypair.from_seed(b"\x02" * 32)


@pytest.fixture(scope="session")
def miner_key() -> Keypair:
    return Keypair.from_seed(b"\x03" * 32)


@pytest.fixture(scope="session")
def run_manifest(data_dir: Path, coord: Keypair) -> RunManifest:
    """The tiny carry manifest over ``data_dir`` (vocab 259), K_coord = ``coord``."""
    from hypertrain.datasets.manifest import MANIFEST_FILE, load_record

    record = load_record(DatasetManifest, data_dir / MANIFEST_FILE)
    base = tiny_manifest(env=in_process_env())
    model = attrs.evolve(
        base.model, vocab=VOCAB, seq_len=SEQ_LEN, param_count=decoder_param_count(
            vocab=VOCAB, **TINY_DIMS
        )
    )  # fmt: skip
    return attrs.evolve(
        base,
        model=model,
        dataset=record.dataset_spec(),
        init_state_hash=init_state_hash(model),
        coord_pubkey=coord.ss58,
    )
