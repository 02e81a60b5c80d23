"""``PUT /v1/admin/runs/{id}/dataset`` and ``GET /v1/runs/{id}/dataset``: every status code."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import attrs
import pytest

from hypertrain.datasets import BuildOptions, DatasetManifest, SourceRoot, build
from hypertrain.datasets.manifest import MANIFEST_FILE, load_record
from hypertrain.datasets.pin import PinResult, pin
from hypertrain.protocol.manifest import RunManifest
from tests.coordinator.harness import admin_headers
from tests.coordinator.lifecycle_support import admin, create_run, manifest, open_runs

TEXT = "".join(f"line {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(200))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("coord-dataset")
    (root / "corpus.txt").write_text(TEXT, encoding="utf-8")
    out = root / "data"
    options = BuildOptions(
        sources=(SourceRoot(root / "corpus.txt", "corpus"),),
        out=out,
        seq_len=16,
        samples_per_shard=64,
        salt=b"s" * 32,
    )
    build(options)
    return out


@pytest.fixture
def pinned(built: Path, tmp_path: Path) -> PinResult:
    """The build pinned into the harness's object store (``tmp_path/data/objects``)."""
    return pin(built, tmp_path / "data" / "objects")


def run_manifest(built: Path) -> RunManifest:
    """The harness manifest carrying the built dataset's spec."""
    record = load_record(DatasetManifest, built / MANIFEST_FILE)
    return attrs.evolve(manifest(), dataset=record.dataset_spec())


def objects_dir(tmp_path: Path) -> Path:
    return tmp_path / "data" / "objects"


def put(sha: str) -> dict[str, str]:
    return {"manifest_sha256": sha}


async def test_register_then_read_back_write_once(
    built: Path, pinned: PinResult, tmp_path: Path
) -> None:
    record = load_record(DatasetManifest, built / MANIFEST_FILE)
    async with open_runs(tmp_path) as h:
        run_id = await create_run(h, run_manifest(built))
        r = await h.client.get(f"/v1/runs/{run_id}/dataset")
        assert (r.status_code, r.json()) == (404, {"detail": "no dataset registered for this run"})
        path = f"/v1/admin/runs/{run_id}/dataset"
        sha = pinned.manifest_sha256
        r = await admin(h, "PUT", path, put(sha))
        assert r.status_code == 200, r.text
        assert r.json() == {"run_id": run_id, "manifest_sha256": sha, "n_shards": record.n_shards}
        again = await admin(h, "PUT", path, put(sha))
        assert (again.status_code, again.json()) == (200, r.json())
        r = await h.client.get(f"/v1/runs/{run_id}/dataset")
        assert r.status_code == 200, r.text
        assert r.json() == {
            "run_id": run_id,
            "manifest_sha256": sha,
            "seq_len": record.seq_len,
            "samples_per_shard": record.samples_per_shard,
            "n_samples": record.n_samples,
            "shard_sha256s": list(record.shard_sha256s),
        }
        other = await h.ctx.objects.put_bytes(b"another manifest")
        r = await admin(h, "PUT", path, put(other.sha256))
        assert r.status_code == 409
        assert sha in r.json()["detail"]
        assert "write-once" in r.json()["detail"]


async def test_auth_unknown_run_and_bad_body(pinned: PinResult, tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        await create_run(h)
        unknown = "ab" * 32
        path = f"/v1/admin/runs/{unknown}/dataset"
        r = await h.client.put(path, json=put(pinned.manifest_sha256))
        assert r.status_code == 401
        r = await admin(h, "PUT", path, put(pinned.manifest_sha256))
        assert r.status_code == 404
        r = await h.client.get(f"/v1/runs/{unknown}/dataset")
        assert r.status_code == 404
        r = await admin(h, "PUT", path, {"manifest_sha256": "XY"})
        assert r.status_code == 400
        assert "manifest_sha256" in r.text


async def test_missing_manifest_object_is_409_naming_it(built: Path, tmp_path: Path) -> None:
    sha = hashlib.sha256((built / MANIFEST_FILE).read_bytes()).hexdigest()
    async with open_runs(tmp_path) as h:
        run_id = await create_run(h, run_manifest(built))
        r = await admin(h, "PUT", f"/v1/admin/runs/{run_id}/dataset", put(sha))
        assert r.status_code == 409
        assert sha in r.json()["detail"]


async def test_missing_shard_object_is_409_naming_it(
    built: Path, pinned: PinResult, tmp_path: Path
) -> None:
    record = load_record(DatasetManifest, built / MANIFEST_FILE)
    missing = record.shard_sha256s[1]
    (objects_dir(tmp_path) / missing[:2] / missing).unlink()
    async with open_runs(tmp_path) as h:
        run_id = await create_run(h, run_manifest(built))
        r = await admin(h, "PUT", f"/v1/admin/runs/{run_id}/dataset", put(pinned.manifest_sha256))
        assert r.status_code == 409
        assert missing in r.json()["detail"]
        r = await h.client.get(f"/v1/runs/{run_id}/dataset")
        assert r.status_code == 404


async def test_not_a_manifest_is_422(built: Path, tmp_path: Path) -> None:
    async with open_runs(tmp_path) as h:
        run_id = await create_run(h, run_manifest(built))
        path = f"/v1/admin/runs/{run_id}/dataset"
        for blob in (b"not json", json.dumps({"seq_len": 16}).encode()):
            info = await h.ctx.objects.put_bytes(blob)
            r = await admin(h, "PUT", path, put(info.sha256))
            assert r.status_code == 422, r.text
            assert "not a DatasetManifest" in r.json()["detail"]


async def test_other_datasets_manifest_is_422_naming_the_field(
    pinned: PinResult, tmp_path: Path
) -> None:
    async with open_runs(tmp_path) as h:
        run_id = await create_run(h)  # the example manifest: another dataset
        r = await admin(h, "PUT", f"/v1/admin/runs/{run_id}/dataset", put(pinned.manifest_sha256))
        assert r.status_code == 422
        assert r.json()["detail"].startswith("dataset manifest merkle_root is ")
        r = await h.client.get(f"/v1/runs/{run_id}/dataset", headers=admin_headers())
        assert r.status_code == 404
