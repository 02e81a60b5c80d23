"""The miner's copy of the run's dataset when ``data_dir`` is not configured.

The operator registered the run's pinned dataset (``PUT /v1/admin/runs/{id}/dataset``); the
miner reads ``GET /v1/runs/{id}/dataset`` and, before training a round, fetches the pinned
``manifest.json`` and the shards holding its assigned sample ids (shard = id //
samples_per_shard) into ``<workdir>/dataset/`` in the build layout (``manifest.json`` +
``shard-{i:05d}.u16``), each with the signed ``GET /v1/objects/{sha}``. Promises:

- every fetched object is hash-checked before it is written; it goes to a temp file in the
  same directory, fsynced, then renamed into place (and the directory fsynced): a wrong answer
  raises :class:`~hypertrain.miner.errors.DataFetchError` and writes nothing; a network error
  or a 5xx answer propagates as itself (transient: the round retries it until ``d_commit``);
- the cache persists across rounds and restarts: a present file whose sha256 matches is not
  fetched again, a corrupt one is fetched again;
- the manifest's ``dataset_spec()`` must equal the run manifest's ``dataset`` section and its
  ``seq_len`` the model's; the reader is opened lazily (:meth:`Dataset.open` with ``lazy=True``)
  so only the shards a round reads must exist, each re-hashed on first use.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

import attrs

from hypertrain.datasets.cachefiles import file_sha256, needed_shards, write_atomically
from hypertrain.datasets.errors import DatasetError
from hypertrain.datasets.manifest import MANIFEST_FILE, TRAIN_PREFIX, DatasetManifest, load_record
from hypertrain.datasets.reader import Dataset
from hypertrain.datasets.shards import shard_name
from hypertrain.miner.answers import DatasetInfo
from hypertrain.miner.client import CoordinatorClient
from hypertrain.miner.errors import ApiError, DataFetchError
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import DatasetSpec, RunManifest

__all__ = ["CACHE_DIR", "RemoteDataset", "needed_shards"]

CACHE_DIR: Final = "dataset"
"""The cache's directory under the miner's workdir."""


def _check_spec(record: DatasetManifest, spec: DatasetSpec) -> None:
    mine = record.dataset_spec()
    for f in attrs.fields(DatasetSpec):
        have, want = getattr(mine, f.name), getattr(spec, f.name)
        if have != want:
            raise DataFetchError(
                f"dataset manifest {f.name} is {have!r}, the run manifest's dataset has {want!r}"
            )


class RemoteDataset:
    """The run's dataset fetched on demand into ``<workdir>/dataset`` (module docstring)."""

    def __init__(
        self,
        client: CoordinatorClient,
        keypair: Keypair,
        run_id: str,
        manifest: RunManifest,
        workdir: Path,
    ) -> None:
        self.client, self.keypair, self.run_id, self.manifest = client, keypair, run_id, manifest
        self.directory = workdir / CACHE_DIR
        self.fetched = 0
        """Objects downloaded since construction (tests count them)."""
        self._record: DatasetManifest | None = None
        self._dataset: Dataset | None = None

    async def _fetch(self, sha256: str, path: Path, now: int) -> None:
        """Make ``path`` hold the object ``sha256`` (cached when it already does)."""
        if file_sha256(path) == sha256:
            return
        try:
            data = await self.client.get_object(self.keypair, self.run_id, sha256, now)
        except ApiError as e:
            if e.status >= 500:
                raise  # transient: the round retries it until d_commit
            raise DataFetchError(f"cannot fetch {path.name} ({sha256}): {e}") from e
        got = hashlib.sha256(data).hexdigest()
        if got != sha256:
            raise DataFetchError(
                f"the coordinator served {path.name} with sha256 {got}, expected {sha256};"
                " nothing was written"
            )
        self.fetched += 1
        write_atomically(path, data)

    async def _load_manifest(self, now: int) -> DatasetManifest:
        """The run's dataset manifest, fetched (or found cached) and checked once."""
        if self._record is not None:
            return self._record
        try:
            info: DatasetInfo = await self.client.dataset(self.run_id)
        except ApiError as e:
            if e.status >= 500:
                raise  # transient: the round retries it until d_commit
            raise DataFetchError(f"run {self.run_id}: no dataset to fetch: {e}") from e
        self.directory.mkdir(parents=True, exist_ok=True)
        sha = info.manifest_sha256
        await self._fetch(sha, self.directory / MANIFEST_FILE, now)
        try:
            record = load_record(DatasetManifest, self.directory / MANIFEST_FILE)
            record.check_counts()
        except DatasetError as e:
            raise DataFetchError(f"dataset manifest {sha}: {e}") from e
        _check_spec(record, self.manifest.dataset)
        if record.seq_len != self.manifest.model.seq_len:
            raise DataFetchError(
                f"dataset seq_len {record.seq_len} != the model's {self.manifest.model.seq_len}"
            )
        self._record = record
        return record

    async def ensure(self, ids: Iterable[int], now: int) -> None:
        """Fetch (or find cached) the manifest and the shards holding ``ids``; ``now`` is the
        beacon round the signed object requests are valid from."""
        record = await self._load_manifest(now)
        for i in needed_shards(ids, record.samples_per_shard):
            if not 0 <= i < record.n_shards:
                raise DataFetchError(f"sample ids past the dataset's {record.n_samples} samples")
            path = self.directory / shard_name(TRAIN_PREFIX, i)
            await self._fetch(record.shard_sha256s[i], path, now)
        if self._dataset is None:
            try:
                self._dataset = Dataset.open(self.directory, lazy=True)
            except DatasetError as e:
                raise DataFetchError(f"{self.directory}: {e}") from e

    def samples(self, ids: Any) -> Any:
        """The samples ``ids`` (after :meth:`ensure` fetched their shards)."""
        if self._dataset is None:
            raise DataFetchError("the dataset is not fetched yet")
        return self._dataset.samples(ids)
