"""A checkpoint's directory on disk (aggregator/checkpoint_dir.py): exactly its files, swapped
in whole, a copy where a hard link is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hypertrain.aggregator.checkpoint import FILES
from hypertrain.aggregator.checkpoint_dir import checkpoint_dir, write_checkpoint_dir


def _stored(root: Path, tag: str) -> dict[str, Path]:
    root.mkdir(parents=True, exist_ok=True)
    files = {}
    for name in FILES:
        path = root / f"{tag}-{name}"
        path.write_bytes(f"{tag} {name}".encode())
        files[name] = path
    return files


def _read(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def test_the_directory_holds_links_to_the_stored_files_and_is_replaced_whole(
    tmp_path: Path,
) -> None:
    target = checkpoint_dir(tmp_path / "state", "ab" * 32, 9)
    assert target == tmp_path / "state" / "checkpoints" / ("ab" * 32) / "9"
    first = _stored(tmp_path / "objects", "provisional")
    write_checkpoint_dir(target, first)
    assert _read(target) == {name: path.read_bytes() for name, path in first.items()}
    assert all(os.path.samefile(target / name, path) for name, path in first.items())
    second = _stored(tmp_path / "objects", "final")
    write_checkpoint_dir(target, second)
    assert _read(target) == {name: path.read_bytes() for name, path in second.items()}
    assert sorted(p.name for p in target.parent.iterdir()) == ["9"]  # nothing left aside


def test_a_refused_link_becomes_a_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_link(_src: object, _dst: object) -> None:
        raise OSError("cross-device link")

    monkeypatch.setattr(os, "link", no_link)
    files = _stored(tmp_path / "objects", "x")
    target = tmp_path / "ckpt"
    write_checkpoint_dir(target, files)
    assert _read(target) == {name: path.read_bytes() for name, path in files.items()}
    assert not any(os.path.samefile(target / n, p) for n, p in files.items())


def test_a_wrong_file_set_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    files = _stored(tmp_path / "objects", "x")
    files.pop(next(iter(files)))
    with pytest.raises(ValueError, match="exactly"):
        write_checkpoint_dir(tmp_path / "ckpt", files)
    assert not (tmp_path / "ckpt").exists()
