"""The miner's remote dataset: fetched from the coordinator, hash-checked, cached."""

from __future__ import annotations

import io
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from hypertrain.datasets.reader import Dataset
from hypertrain.miner.client import CoordinatorClient
from hypertrain.miner.config import MinerConfig
from hypertrain.miner.datacache import RemoteDataset
from hypertrain.miner.errors import DataFetchError
from hypertrain.miner.progress import Progress
from hypertrain.miner.round import RoundStatus
from hypertrain.miner.session import run_miner
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import RunManifest
from tests.miner.fake import API, FakeCoordinator

PER_SHARD = 64


def _fake(
    run_manifest: RunManifest, coord: Keypair, owner: Keypair, key: Keypair
) -> FakeCoordinator:
    return FakeCoordinator(run_manifest, coord, owner, [key.ss58])


async def test_needed_shards_fetched_once_cached_and_corrupt_refetched(
    run_manifest: RunManifest,
    coord: Keypair,
    owner: Keypair,
    miner_key: Keypair,
    data_dir: Path,
    tmp_path: Path,
) -> None:
    fake = _fake(run_manifest, coord, owner, miner_key)
    fake.serve_dataset(data_dir)
    client = CoordinatorClient(API, transport=fake.transport())
    remote = RemoteDataset(client, miner_key, fake.run_id, run_manifest, tmp_path)
    ids = [3, PER_SHARD + 1, 5]
    await remote.ensure(ids, 1)
    cache = tmp_path / "dataset"
    assert sorted(p.name for p in cache.iterdir()) == [
        "manifest.json",
        "shard-00000.u16",
        "shard-00001.u16",
    ]
    assert remote.fetched == 3
    local = Dataset.open(data_dir)
    assert remote.samples(ids).tolist() == local.samples(ids).tolist()
    again = RemoteDataset(client, miner_key, fake.run_id, run_manifest, tmp_path)
    await again.ensure(ids, 1)
    assert again.fetched == 0  # cached across rounds and restarts
    shard = cache / "shard-00001.u16"
    data = bytearray(shard.read_bytes())
    data[0] ^= 0xFF
    shard.write_bytes(bytes(data))
    third = RemoteDataset(client, miner_key, fake.run_id, run_manifest, tmp_path)
    await third.ensure(ids, 1)
    assert third.fetched == 1
    assert shard.read_bytes() == (data_dir / "shard-00001.u16").read_bytes()
    await client.aclose()


async def test_wrong_bytes_are_refused_and_nothing_is_written(
    run_manifest: RunManifest,
    coord: Keypair,
    owner: Keypair,
    miner_key: Keypair,
    data_dir: Path,
    tmp_path: Path,
) -> None:
    fake = _fake(run_manifest, coord, owner, miner_key)
    fake.serve_dataset(data_dir)
    assert fake.dataset is not None
    bad_sha = fake.dataset["shard_sha256s"][1]
    fake.objects[bad_sha] = b"\x00" * len(fake.objects[bad_sha])
    client = CoordinatorClient(API, transport=fake.transport())
    remote = RemoteDataset(client, miner_key, fake.run_id, run_manifest, tmp_path)
    with pytest.raises(
        DataFetchError, match=rf"shard-00001\.u16 with sha256 .* expected {bad_sha}"
    ):
        await remote.ensure([PER_SHARD], 1)
    assert sorted(p.name for p in (tmp_path / "dataset").iterdir()) == ["manifest.json"]
    await client.aclose()


async def test_another_datasets_manifest_is_refused(
    run_manifest: RunManifest,
    coord: Keypair,
    owner: Keypair,
    miner_key: Keypair,
    data_dir: Path,
    tmp_path: Path,
) -> None:
    other = attrs.evolve(run_manifest.dataset, merkle_root="ab" * 32)
    fake = _fake(attrs.evolve(run_manifest, dataset=other), coord, owner, miner_key)
    fake.serve_dataset(data_dir)
    client = CoordinatorClient(API, transport=fake.transport())
    remote = RemoteDataset(client, miner_key, fake.run_id, fake.manifest, tmp_path)
    with pytest.raises(DataFetchError, match="merkle_root"):
        await remote.ensure([0], 1)
    fake.dataset = None
    with pytest.raises(DataFetchError, match="no dataset registered"):
        await RemoteDataset(client, miner_key, fake.run_id, fake.manifest, tmp_path).ensure([0], 1)
    await client.aclose()


@pytest.mark.usefixtures("configured")
async def test_a_miner_without_data_dir_mines_from_the_registered_dataset(
    autojump_clock: trio.testing.MockClock,
    run_manifest: RunManifest,
    coord: Keypair,
    owner: Keypair,
    miner_key: Keypair,
    data_dir: Path,
    tmp_path: Path,
) -> None:
    fake = _fake(run_manifest, coord, owner, miner_key)
    config = MinerConfig(
        api=API,
        keyfile=tmp_path / "k",
        workdir=tmp_path / "work",
        poll_seconds=1.0,
        chunk_bytes=4096,
    )
    fake.serve_dataset(data_dir)
    summary = await run_miner(
        config, miner_key, start=0, transport=fake.transport(),
        progress=Progress(io.StringIO()), configure=lambda env: None,
    )  # fmt: skip
    assert [r.status for r in summary.rounds] == [RoundStatus.UPLOADED], summary
    assert (tmp_path / "work" / "dataset" / "manifest.json").is_file()
