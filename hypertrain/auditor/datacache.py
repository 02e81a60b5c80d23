"""The auditor's copy of a run's dataset: fetched on demand, hash-checked, cached on disk.

A job names its dataset by ``dataset_sha256``, the object of the registered dataset manifest
(:class:`~hypertrain.datasets.manifest.DatasetManifest`, JSON). :meth:`DatasetCache.ensure`
makes ``<data_dir>/datasets/<dataset_sha256>/`` hold that ``manifest.json`` and the train shards
holding the job's sample ids (``shard = id // samples_per_shard``), in the build layout
(``shard-{i:05d}.u16``), and returns a lazy :class:`~hypertrain.datasets.reader.Dataset` over it.
The checks mirror the miner's (:mod:`hypertrain.miner.datacache`):

- every object comes from ``fetch(sha)``, which returns hash-checked bytes; they are hashed again
  here, written to a temp file in the same directory, fsynced, renamed into place (and the
  directory fsynced). A present file whose sha256 matches is not fetched again; a corrupt one
  is fetched again;
- the manifest must parse, its counts must agree, its ``dataset_spec()`` must equal the run
  manifest's ``dataset`` section and its ``seq_len`` the model's, else
  :class:`~hypertrain.auditor.errors.BadJob` (the coordinator registered another dataset);
- the reader is lazy: it re-hashes each shard on its first use, so only the shards a job reads
  must exist.

Keyed by the dataset manifest's sha256, the cache is shared by every run and job of one
auditor, and survives restarts. The directory is the CLI's ``--data-dir`` (default
``$XDG_STATE_HOME/hypertrain/auditor``, i.e. ``~/.local/state/hypertrain/auditor``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Final

import attrs

from hypertrain.auditor.errors import BadJob, FetchFailed
from hypertrain.datasets.cachefiles import file_sha256, needed_shards, write_atomically
from hypertrain.datasets.errors import DatasetError
from hypertrain.datasets.manifest import MANIFEST_FILE, TRAIN_PREFIX, DatasetManifest, load_record
from hypertrain.datasets.reader import Dataset
from hypertrain.datasets.shards import shard_name
from hypertrain.protocol.manifest import DatasetSpec, RunManifest

__all__ = ["DATASETS_DIR", "DatasetCache", "Fetch", "needed_shards"]

DATASETS_DIR: Final = "datasets"

Fetch = Callable[[str], Awaitable[bytes]]
"""``await fetch(sha256)``: the object's bytes, already hash-checked."""


def _check_record(record: DatasetManifest, manifest: RunManifest) -> None:
    try:
        record.check_counts()
    except DatasetError as e:
        raise BadJob(f"dataset manifest: {e}") from e
    mine, spec = record.dataset_spec(), manifest.dataset
    for f in attrs.fields(DatasetSpec):
        have, want = getattr(mine, f.name), getattr(spec, f.name)
        if have != want:
            raise BadJob(f"dataset manifest {f.name} is {have!r}, the run's dataset has {want!r}")
    if record.seq_len != manifest.model.seq_len:
        raise BadJob(f"dataset seq_len {record.seq_len} != the model's {manifest.model.seq_len}")


class DatasetCache:
    """Datasets under ``root/datasets/<manifest sha256>`` (module docstring)."""

    def __init__(self, root: Path, fetch: Fetch) -> None:
        self.root = root
        self._fetch = fetch
        self._open: dict[str, Dataset] = {}
        self.fetched = 0
        """Objects downloaded since construction (tests count them)."""

    async def _ensure_file(self, sha256: str, path: Path) -> None:
        if file_sha256(path) == sha256:
            return
        data = await self._fetch(sha256)
        if hashlib.sha256(data).hexdigest() != sha256:
            raise FetchFailed(f"{path.name}: the bytes fetched do not hash to {sha256}")
        self.fetched += 1
        write_atomically(path, data)

    async def ensure(
        self, manifest_sha256: str, manifest: RunManifest, ids: Iterable[int]
    ) -> Dataset:
        """The dataset ``manifest_sha256`` with the shards of ``ids`` present (module doc)."""
        directory = self.root / DATASETS_DIR / manifest_sha256
        directory.mkdir(parents=True, exist_ok=True)
        await self._ensure_file(manifest_sha256, directory / MANIFEST_FILE)
        try:
            record = load_record(DatasetManifest, directory / MANIFEST_FILE)
        except DatasetError as e:
            raise BadJob(f"dataset manifest {manifest_sha256}: {e}") from e
        _check_record(record, manifest)
        for i in needed_shards(ids, record.samples_per_shard):
            if not 0 <= i < record.n_shards:
                raise BadJob(f"a sample id is past the dataset's {record.n_samples} samples")
            path = directory / shard_name(TRAIN_PREFIX, i)
            await self._ensure_file(record.shard_sha256s[i], path)
        dataset = self._open.get(manifest_sha256)
        if dataset is None:
            try:
                dataset = Dataset.open(directory, lazy=True)
            except DatasetError as e:
                raise FetchFailed(f"{directory}: {e}") from e
            self._open[manifest_sha256] = dataset
        return dataset
