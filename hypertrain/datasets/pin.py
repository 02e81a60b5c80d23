"""``pin``: copy a verified build into a content-addressed object store.

The objects are the train shards and ``manifest.json``, each stored under its sha256 in the
coordinator's layout ``<objects>/<sha[:2]>/<sha>`` (``<objects>`` is conventionally
``<state_dir>/objects``) by :class:`~hypertrain.store.objects.ObjectStore`, run under
``trio.run``. The holdout (shards, ``holdout.json``, salt) is **not** pinned: it stays private
until the owner reveals it (see :mod:`hypertrain.datasets.manifest`). ``pin`` may write into a
running daemon's store, so it opens the store with ``clean_tmp=False``: only the owning process
(the daemon) removes leftover temp files; the daemon's uploads in flight are left alone. A
shard's URI is then its sha256, which is what ``shard_uri_template = "{shard_sha256}"`` says.

The directory is verified first (:func:`hypertrain.datasets.verify.verify`); a bad build is never
pinned. The result carries the RunManifest ``dataset`` fragment (``merkle_root, depth,
n_samples, sample_format, shard_uri_template, shard_sha256_root, holdout_commit``), which
structures as :class:`hypertrain.protocol.manifest.DatasetSpec`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import trio

from hypertrain.datasets.manifest import MANIFEST_FILE, TRAIN_PREFIX, DatasetManifest, load_record
from hypertrain.datasets.shards import shard_name
from hypertrain.datasets.verify import verify
from hypertrain.store.objects import READ_CHUNK_SIZE, ObjectStore

__all__ = ["PinResult", "pin", "pin_async"]


@attrs.frozen
class PinResult:
    """The pinned objects (sha256 of each, manifest last) and the ``dataset`` fragment."""

    objects: tuple[str, ...]
    manifest_sha256: str
    fragment: dict[str, Any]


async def _chunks(path: Path) -> AsyncIterator[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(READ_CHUNK_SIZE):
            yield chunk
            await trio.lowlevel.checkpoint()


async def _put_all(store: ObjectStore, files: list[tuple[Path, str | None]]) -> list[str]:
    stored: list[str] = []
    for path, sha256 in files:
        size = path.stat().st_size
        info = await store.put_stream(
            _chunks(path), expected_sha256=sha256, size_cap=size, expected_size=size
        )
        stored.append(info.sha256)
    return stored


def pin(data_dir: str | Path, objects_dir: str | Path) -> PinResult:
    """Verify ``data_dir`` and store its train shards and manifest under ``objects_dir``.

    The synchronous entry of the CLI; inside Trio, await :func:`pin_async`. Raises DatasetError
    when the build does not verify; store errors (``ContentMismatch`` if a file changed after
    verification) propagate.
    """
    return trio.run(pin_async, data_dir, objects_dir)


async def pin_async(data_dir: str | Path, objects_dir: str | Path) -> PinResult:
    """:func:`pin`, for callers already running Trio."""
    data_dir = Path(data_dir)
    verify(data_dir)
    manifest = load_record(DatasetManifest, data_dir / MANIFEST_FILE)
    files: list[tuple[Path, str | None]] = [
        (data_dir / shard_name(TRAIN_PREFIX, i), sha)
        for i, sha in enumerate(manifest.shard_sha256s)
    ]
    files.append((data_dir / MANIFEST_FILE, None))
    store = ObjectStore.open(objects_dir, clean_tmp=False)
    stored = await _put_all(store, files)
    return PinResult(
        objects=tuple(stored), manifest_sha256=stored[-1], fragment=manifest.fragment()
    )
