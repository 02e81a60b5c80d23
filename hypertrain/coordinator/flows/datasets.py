"""Registering a run's dataset (``PUT /v1/admin/runs/{id}/dataset``) and reading it back.

The operator pins a built dataset into the daemon's object store (``hypertrain datasets pin
--out-objects <state_dir>/objects``), then registers the pinned ``manifest.json`` object's
sha256 for the run. Promises of :func:`check_dataset_manifest` and :func:`register_dataset`:

- the run must exist (404);
- the manifest object must be in the object store (409 naming it);
- it must parse as a :class:`~hypertrain.datasets.manifest.DatasetManifest` with consistent
  counts (422), whose ``dataset_spec()`` equals the run manifest's ``dataset`` section (422
  naming the first differing field);
- every shard object it names must be in the store (409 naming the first missing one);
- write-once: registering the same value again answers 200, a different one 409.

Miners then read ``GET /v1/runs/{id}/dataset`` (public: ``{run_id, manifest_sha256, seq_len,
samples_per_shard, n_samples, shard_sha256s}``, 404 when none is registered) and fetch the
shards they need with ``GET /v1/objects/{sha}``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable

import attrs
from attrs import field, frozen

from hypertrain.coordinator.flows.lifecycle import parse_manifest
from hypertrain.coordinator.tables.runs import get_run
from hypertrain.datasets.errors import DatasetError
from hypertrain.datasets.manifest import DatasetManifest
from hypertrain.protocol.converter import structure
from hypertrain.protocol.errors import Conflict, ContractMismatch, NotFound, SchemaError
from hypertrain.protocol.manifest import DatasetSpec
from hypertrain.protocol.validators import hex64, list_of

__all__ = [
    "NO_DATASET",
    "DatasetRegistered",
    "DatasetRequest",
    "DatasetView",
    "check_dataset_manifest",
    "dataset_target",
    "dataset_view",
    "register_dataset",
]

NO_DATASET = "no dataset registered for this run"


@frozen
class DatasetRequest:
    """The admin body: ``{manifest_sha256}``."""

    manifest_sha256: str = field(validator=hex64)


def _registered(conn: sqlite3.Connection, run_id: str) -> str | None:
    row = conn.execute(
        "SELECT manifest_sha256 FROM run_datasets WHERE run_id = ?", (run_id,)
    ).fetchone()
    return None if row is None else str(row[0])


def dataset_target(conn: sqlite3.Connection, run_id: str, wanted: str) -> tuple[DatasetSpec, bool]:
    """``(the run manifest's dataset section, already registered)``: 404 unknown run, 409 when a
    different dataset is registered."""
    spec = parse_manifest(get_run(conn, run_id).manifest_envelope).dataset
    existing = _registered(conn, run_id)
    if existing is not None and existing != wanted:
        raise Conflict(f"run {run_id} already has dataset {existing}; it is write-once")
    return spec, existing is not None


def check_dataset_manifest(
    blob: bytes, spec: DatasetSpec, exists: Callable[[str], bool]
) -> DatasetManifest:
    """The parsed manifest: 422 unless it matches ``spec``, 409 naming a missing shard."""
    try:
        record = structure(DatasetManifest, json.loads(blob))
        record.check_counts()
    except (ValueError, SchemaError, DatasetError) as e:
        raise ContractMismatch(f"dataset manifest is not a DatasetManifest: {e}") from None
    mine = record.dataset_spec()
    for f in attrs.fields(DatasetSpec):
        have, want = getattr(mine, f.name), getattr(spec, f.name)
        if have != want:
            raise ContractMismatch(
                f"dataset manifest {f.name} is {have!r}, the run manifest's dataset has {want!r}"
            )
    for i, sha in enumerate(record.shard_sha256s):
        if not exists(sha):
            raise Conflict(f"shard {i} object {sha} is not in the object store")
    return record


def register_dataset(conn: sqlite3.Connection, run_id: str, wanted: str, now: int) -> bool:
    """Store the run's dataset manifest sha256; True if it is new (write-once as above)."""
    _, registered = dataset_target(conn, run_id, wanted)
    if registered:
        return False
    conn.execute(
        "INSERT INTO run_datasets (run_id, manifest_sha256, registered) VALUES (?, ?, ?)",
        (run_id, wanted, now),
    )
    return True


def dataset_sha(conn: sqlite3.Connection, run_id: str) -> str:
    """The registered manifest sha256 of ``run_id``: 404 unknown run or none registered."""
    get_run(conn, run_id)
    sha = _registered(conn, run_id)
    if sha is None:
        raise NotFound(NO_DATASET)
    return sha


@frozen(kw_only=True)
class DatasetView:
    """``GET /v1/runs/{id}/dataset``: the run's registered dataset."""

    run_id: str
    manifest_sha256: str = field(validator=hex64)
    seq_len: int
    samples_per_shard: int
    n_samples: int
    shard_sha256s: tuple[str, ...] = field(validator=list_of(hex64))


@frozen(kw_only=True)
class DatasetRegistered:
    """``PUT /v1/admin/runs/{id}/dataset``: the manifest registered and its shard count."""

    run_id: str
    manifest_sha256: str = field(validator=hex64)
    n_shards: int


def dataset_view(run_id: str, sha: str, record: DatasetManifest) -> DatasetView:
    """The public answer of ``GET /v1/runs/{id}/dataset``."""
    return DatasetView(
        run_id=run_id,
        manifest_sha256=sha,
        seq_len=record.seq_len,
        samples_per_shard=record.samples_per_shard,
        n_samples=record.n_samples,
        shard_sha256s=record.shard_sha256s,
    )
