"""``hypertrain datasets build | verify | pin`` end to end, and the trainer's reader."""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest

from hypertrain.cli import main
from hypertrain.datasets import Dataset, DatasetError, decode, encode_docs, pack, verify_sample
from hypertrain.protocol.converter import structure
from hypertrain.protocol.example import EXAMPLE_COORD_SEED
from hypertrain.protocol.hashes import holdout_commit
from hypertrain.protocol.keys import Keypair
from hypertrain.protocol.manifest import DatasetSpec
from hypertrain.protocol.merkle import merkle_root
from hypertrain.protocol.testmode import build_test_mode_manifest

SEQ = 32
PER_SHARD = 64
FRAGMENT_KEYS = {
    "merkle_root",
    "depth",
    "n_samples",
    "sample_format",
    "shard_uri_template",
    "shard_sha256_root",
    "holdout_commit",
}


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["datasets", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _build_args(out: Path, *extra: str) -> list[str]:
    return ["build", "--seq-len", str(SEQ), "--samples-per-shard", str(PER_SHARD),
            "--out", str(out), *extra]  # fmt: skip


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    (root / "docs").mkdir()
    for i in range(12):
        (root / "docs" / f"doc{i:02d}.txt").write_text(f"document {i}: " + "héllo wörld " * 200)
    (root / "docs" / "blob.bin").write_bytes(bytes(range(256)))
    return root / "docs"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> Path:
    out = tmp_path_factory.mktemp("built") / "ds"
    assert main(["datasets", *_build_args(out, "--source", str(corpus))]) == 0
    return out


@pytest.fixture
def copy(built: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(built, target)
    return target


def test_build_writes_the_documented_layout(built: Path, corpus: Path) -> None:
    manifest = json.loads((built / "manifest.json").read_text())
    assert (built / "manifest.json").read_text() == json.dumps(
        manifest, sort_keys=True, indent=2
    ) + "\n"
    texts = [p.read_bytes() for p in sorted(corpus.glob("*.txt"))]
    samples = pack(encode_docs(texts), SEQ)
    n = manifest["n_samples"]
    assert n == manifest["n_shards"] * PER_SHARD
    assert n % PER_SHARD == 0
    assert manifest["depth"] == (n - 1).bit_length()
    assert manifest["sample_format"] == "u16[seq_len+1] token ids"
    assert manifest["shard_uri_template"] == "{shard_sha256}"
    assert manifest["extra"]["skipped_files"] == 1
    assert [s["path"] for s in manifest["sources"]] == [
        f"{corpus}/doc{i:02d}.txt" for i in range(12)
    ]
    leaves = [row.astype("<u2").tobytes() for row in samples[:n]]
    assert manifest["merkle_root"] == merkle_root(leaves).hex()
    shard0 = (built / "shard-00000.u16").read_bytes()
    assert shard0 == samples[:PER_SHARD].astype("<u2").tobytes()
    assert manifest["shard_sha256s"][0] == hashlib.sha256(shard0).hexdigest()
    digests = [bytes.fromhex(d) for d in manifest["shard_sha256s"]]
    assert manifest["shard_sha256_root"] == merkle_root(digests).hex()
    holdout = json.loads((built / "holdout.json").read_text())
    h = manifest["holdout"]["n_samples"]
    assert h == holdout["n_samples"] == -(-len(samples) * 5 // 100)
    tail = samples[len(samples) - h :]
    assert holdout["merkle_root"] == merkle_root([r.astype("<u2").tobytes() for r in tail]).hex()
    assert set(manifest["holdout"]) == {"n_samples", "commit"}  # the root stays private


def test_holdout_commit_recomputes_from_root_and_private_salt(built: Path) -> None:
    salt = (built / "holdout.salt").read_bytes()
    assert len(salt) == 32
    for name in ("holdout.salt", "holdout.json", "holdout-00000.u16"):
        assert stat.S_IMODE((built / name).stat().st_mode) == 0o600
    holdout = json.loads((built / "holdout.json").read_text())
    commit = holdout_commit(bytes.fromhex(holdout["merkle_root"]), salt)
    manifest = json.loads((built / "manifest.json").read_text())
    assert commit == holdout["commit"] == manifest["holdout"]["commit"]
    assert salt.hex() not in (built / "manifest.json").read_text()


def test_verify_ok(built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "verify", str(built))
    assert (code, err) == (0, "")
    assert out.startswith("OK n_samples=")
    assert out.rstrip().endswith("holdout=commit")


def test_flipped_byte_names_that_shard(copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = copy / "shard-00002.u16"
    data = bytearray(path.read_bytes())
    data[100] ^= 0x01
    path.write_bytes(bytes(data))
    code, out, err = _run(capsys, "verify", str(copy))
    assert (code, out) == (1, "")
    assert err.startswith("hypertrain: shard-00002.u16: sha256 ")


def test_deleted_shard_is_named(copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (copy / "shard-00001.u16").unlink()
    assert _run(capsys, "verify", str(copy))[::2] == (1, "hypertrain: shard-00001.u16: missing\n")


def test_holdout_shard_and_salt_are_checked(copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (copy / "holdout.salt").write_bytes(b"\x01" * 32)
    code, _, err = _run(capsys, "verify", str(copy))
    assert code == 1
    assert "holdout commit" in err
    (copy / "holdout-00000.u16").write_bytes(b"")
    assert "holdout-00000.u16: 0 bytes" in _run(capsys, "verify", str(copy))[2]


@pytest.mark.parametrize(
    ("field", "delta", "message"),
    [
        ("n_samples", 1, "manifest.json: n_samples is"),
        ("n_shards", -1, "manifest.json: n_shards is"),
        ("depth", 1, "manifest.json: depth is"),
    ],
)
def test_changed_manifest_count_fails(
    copy: Path, capsys: pytest.CaptureFixture[str], field: str, delta: int, message: str
) -> None:
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest[field] += delta
    (copy / "manifest.json").write_text(json.dumps(manifest))
    code, _, err = _run(capsys, "verify", str(copy))
    assert code == 1
    assert err.startswith(f"hypertrain: {message}")


def test_changed_manifest_root_fails(copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["merkle_root"] = "0" * 64
    (copy / "manifest.json").write_text(json.dumps(manifest))
    code, _, err = _run(capsys, "verify", str(copy))
    assert code == 1
    assert "merkle_root " + "0" * 64 + " != recomputed" in err


def test_public_copy_without_holdout_verifies(
    copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for path in copy.glob("holdout*"):
        path.unlink()
    code, out, _ = _run(capsys, "verify", str(copy))
    assert code == 0
    assert "holdout=absent" in out


def test_build_refuses_existing_output_and_tiny_corpus(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(capsys, *_build_args(built, "--source", str(built / "manifest.json")))
    assert code == 2
    assert "exists and is not an empty directory" in err
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("x" * 100)
    code, _, err = _run(capsys, *_build_args(tmp_path / "out", "--source", str(tiny)))
    assert code == 1
    assert "corpus too small" in err
    assert not (tmp_path / "out").exists()
    code, _, err = _run(capsys, *_build_args(tmp_path / "o2", "--source", str(tmp_path / "nope")))
    assert code == 2
    assert "no such file" in err


def test_default_stdlib_source_is_deterministic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    salt = tmp_path / "salt"
    salt.write_bytes(bytes(range(32)))
    outs = []
    for name in ("a", "b", "c"):
        given = ["--salt-file", str(salt)] if name != "c" else []
        code, out, _ = _run(capsys, *_build_args(tmp_path / name, "--max-bytes", "200000", *given))
        assert code == 0
        outs.append(json.loads(out))
    a, b, c = ((tmp_path / n / "manifest.json").read_bytes() for n in "abc")
    assert a == b
    assert json.loads(a)["sources"][0]["path"].startswith("stdlib/")
    assert json.loads(a)["extra"]["source_bytes"] == 200_000
    without_commit = [json.loads(m) for m in (a, c)]
    for m in without_commit:
        del m["holdout"]["commit"]
    assert without_commit[0] == without_commit[1]
    assert outs[0]["holdout_commit"] != outs[2]["holdout_commit"]


def test_pin_writes_objects_by_sha_and_prints_a_dataset_spec(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = tmp_path / "objects"
    code, out, err = _run(capsys, "pin", "--data-dir", str(built), "--out-objects", str(objects))
    assert (code, err) == (0, "")
    fragment = json.loads(out)
    assert set(fragment) == FRAGMENT_KEYS
    spec = structure(DatasetSpec, fragment)
    manifest = json.loads((built / "manifest.json").read_text())
    assert spec.merkle_root == manifest["merkle_root"]
    assert spec.holdout_commit == manifest["holdout"]["commit"]
    assert spec.sample_format == "u16[seq_len+1] token ids"
    stored = sorted(p for p in objects.glob("*/*") if p.parent.name != "tmp")
    for path in stored:
        assert path.name[:2] == path.parent.name
        assert hashlib.sha256(path.read_bytes()).hexdigest() == path.name
    expected = {
        *manifest["shard_sha256s"],
        hashlib.sha256((built / "manifest.json").read_bytes()).hexdigest(),
    }
    assert {p.name for p in stored} == expected  # no holdout object is published
    test_manifest, _ = build_test_mode_manifest(
        coord_pubkey=Keypair.from_seed(EXAMPLE_COORD_SEED).ss58, dataset=spec
    )
    assert test_manifest.dataset == spec


def test_pin_refuses_a_bad_build(
    copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (copy / "shard-00000.u16").write_bytes(b"\x00" * (SEQ + 1) * 2 * PER_SHARD)
    code, out, err = _run(
        capsys, "pin", "--data-dir", str(copy), "--out-objects", str(tmp_path / "o")
    )
    assert (code, out) == (1, "")
    assert "shard-00000.u16: sha256" in err


def test_reader_returns_the_exact_samples_and_proofs(built: Path, corpus: Path) -> None:
    texts = [p.read_bytes() for p in sorted(corpus.glob("*.txt"))]
    samples = pack(encode_docs(texts), SEQ)
    ds = Dataset.open(built)
    assert (len(ds), ds.seq_len) == (
        json.loads((built / "manifest.json").read_text())["n_samples"],
        SEQ,
    )
    for i in (0, 1, PER_SHARD - 1, PER_SHARD, len(ds) - 1):
        got = ds.sample(i)
        assert got.dtype == np.uint16
        assert got.shape == (SEQ + 1,)
        assert got.tolist() == samples[i].tolist()
        proof = ds.proof(i)
        assert verify_sample(got, i, len(ds), proof, ds.merkle_root)
        assert not verify_sample(got, (i + 1) % len(ds), len(ds), proof, ds.merkle_root)
        bad = got.copy()
        bad[3] ^= 1
        assert not verify_sample(bad, i, len(ds), proof, ds.merkle_root)
    ids = [5, 0, len(ds) - 1, 5]
    assert ds.samples(ids).tolist() == samples[ids].tolist()
    assert decode(ds.sample(0)).startswith("document 0: héllo")
    with pytest.raises(IndexError):
        ds.sample(len(ds))


def test_reader_holdout_split_and_verification_on_open(built: Path, copy: Path) -> None:
    holdout = Dataset.open(built, split="holdout")
    proof = holdout.proof(len(holdout) - 1)
    assert verify_sample(
        holdout.sample(len(holdout) - 1), len(holdout) - 1, len(holdout), proof, holdout.merkle_root
    )
    path = copy / "shard-00003.u16"
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match=r"shard-00003\.u16: sha256"):
        Dataset.open(copy)
    lazy = Dataset.open(copy, verify=False)
    with pytest.raises(DatasetError, match=r"merkle_root .* != recomputed"):
        lazy.proof(0)


def test_python_dash_m_entry_point(built: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "hypertrain.datasets", "verify", str(built)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0
    assert done.stdout.startswith("OK ")


def test_pin_leaves_the_daemons_temp_files_alone(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = tmp_path / "objects"
    (objects / "tmp").mkdir(parents=True)
    in_flight = objects / "tmp" / "daemon-upload.part"
    in_flight.write_bytes(b"half of an upload in flight")
    code, _, err = _run(capsys, "pin", "--data-dir", str(built), "--out-objects", str(objects))
    assert (code, err) == (0, "")
    assert in_flight.read_bytes() == b"half of an upload in flight"


def test_lazy_reader_needs_and_verifies_only_the_shards_it_reads(copy: Path) -> None:
    full = Dataset.open(copy)
    (copy / "shard-00001.u16").unlink()
    path = copy / "shard-00002.u16"
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match=r"shard-00001\.u16: missing"):
        Dataset.open(copy)
    lazy = Dataset.open(copy, lazy=True)
    ids = [0, PER_SHARD - 1, 3 * PER_SHARD]
    assert lazy.samples(ids).tolist() == full.samples(ids).tolist()
    with pytest.raises(DatasetError, match=r"shard-00001\.u16: missing"):
        lazy.sample(PER_SHARD)
    with pytest.raises(DatasetError, match=r"shard-00002\.u16: sha256"):
        lazy.samples([2 * PER_SHARD])
