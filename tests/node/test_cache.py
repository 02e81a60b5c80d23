"""The node's input cache: the object store's atomic write, temp files cleaned on start, and
least recently used inputs evicted above the bound, never one a job uses.

Re-hashing before use is in ``test_local.py``; the lease's bound on downloads in
``test_runner.py``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.testing

from hypertrain.compute.wire import InputFile
from hypertrain.node.cache import DEFAULT_MAX_BYTES, InputCache
from hypertrain.node.main import build_parser


def _spec(data: bytes, name: str = "trace.u16") -> InputFile:
    return InputFile(name, hashlib.sha256(data).hexdigest(), len(data))


async def _serve(spec: InputFile) -> AsyncIterator[bytes]:
    yield DATA[spec.sha256]


A, B, C, D = (bytes([n]) * 100 for n in range(4))
DATA = {hashlib.sha256(x).hexdigest(): x for x in (A, B, C, D)}


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


async def test_least_recently_used_inputs_go_first_above_the_bound(tmp_path: Path) -> None:
    cache = InputCache(tmp_path, max_bytes=300)
    for x in (A, B, C):
        await cache.ensure(_spec(x), _serve)
    await cache.ensure(_spec(A), _serve)  # A used again: B is now the least recent
    assert cache.size == 300
    await cache.ensure(_spec(D), _serve)
    assert cache.cached() == [_spec(x).sha256 for x in (C, A, D)]
    assert cache.size == 300
    assert not cache.path_of(_spec(B).sha256).exists()
    assert all(cache.path_of(_spec(x).sha256).read_bytes() == x for x in (C, A, D))


async def test_an_input_in_use_by_a_job_is_never_evicted(tmp_path: Path) -> None:
    cache = InputCache(tmp_path, max_bytes=150)
    await cache.ensure(_spec(A), _serve, job_id="j1")
    await cache.ensure(_spec(B), _serve, job_id="j1")  # the job's first input stays
    await cache.ensure(_spec(C), _serve, job_id="j2")
    assert cache.size == 300  # above the bound while jobs hold it
    paths = cache.link_job("j1", [_spec(A, "a.bin"), _spec(B, "b.bin")])
    assert paths["a.bin"].read_bytes() == A
    cache.drop_job("j1")
    assert cache.cached() == [_spec(C).sha256]  # j2 still holds C; A and B go, oldest first
    cache.drop_job("j2")
    assert cache.cached() == [_spec(C).sha256]


async def test_start_removes_temp_files_and_the_old_flat_layout(tmp_path: Path) -> None:
    first = InputCache(tmp_path)
    await first.ensure(_spec(A), _serve)
    directory = tmp_path / "cache"
    (directory / "tmp" / "0123.part").write_bytes(b"torn")  # a crash mid-download
    (directory / f".{_spec(B).sha256}.4242.tmp").write_bytes(b"torn")  # the old temp files
    (directory / _spec(C).sha256).write_bytes(C)  # the old layout
    InputCache(tmp_path).open()
    sha = _spec(A).sha256
    assert _files(directory) == [f"{sha[:2]}/{sha}"]


async def test_the_order_survives_a_restart_and_a_lower_bound_applies_at_start(
    tmp_path: Path,
) -> None:
    first = InputCache(tmp_path)
    for x in (A, B, C):
        await first.ensure(_spec(x), _serve)
    for n, x in enumerate((B, C, A)):  # B used longest ago, A last: the mtimes say so
        os.utime(first.path_of(_spec(x).sha256), ns=(n * 10**9, n * 10**9))
    again = InputCache(tmp_path, max_bytes=200)
    again.open()
    assert again.cached() == [_spec(x).sha256 for x in (C, A)]


async def test_a_cancelled_download_leaves_nothing_behind(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async def stalls(spec: InputFile) -> AsyncIterator[bytes]:
        yield A[:10]
        await trio.sleep_forever()
        yield A[10:]  # pragma: no cover

    cache = InputCache(tmp_path)
    with trio.move_on_after(5.0) as scope:
        await cache.ensure(_spec(A), stalls, job_id="j1")
    assert scope.cancelled_caught
    assert _files(tmp_path / "cache") == []
    assert cache.cached() == []


async def test_a_fetched_input_is_fsynced_before_it_is_renamed_into_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync")
        real_fsync(fd)

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        events.append("replace")
        real_replace(src, dst)

    cache = InputCache(tmp_path)
    cache.open()
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    await cache.ensure(_spec(A), _serve)
    assert events[:2] == ["fsync", "replace"]  # the file, then its directory after the rename
    assert len(events) > 2
    assert set(events[2:]) == {"fsync"}


def test_cache_max_mb_is_a_positive_count_of_mib_defaulting_to_2048() -> None:
    parser = build_parser()
    assert parser.parse_args([]).cache_max_mb == 2048
    assert DEFAULT_MAX_BYTES == 2048 << 20
    assert parser.parse_args(["--cache-max-mb", "5"]).cache_max_mb == 5
    for bad in ("0", "-1", "1.5", "x"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--cache-max-mb", bad])


async def test_start_drops_files_the_cache_did_not_write(tmp_path: Path) -> None:
    """A stray file or directory in a shard directory (not a sha256 name, in the wrong shard, a
    directory even with an input's name, a link) is removed at start instead of stopping the
    node."""
    shard = tmp_path / "cache" / "ab"
    shard.mkdir(parents=True)
    (shard / "notes.txt").write_text("mine")
    (shard / ("cd" * 32)).write_bytes(b"misplaced")
    (shard / "subdir").mkdir()
    (shard / "subdir" / "x").write_text("x")
    (shard / ("ab" * 32)).mkdir()
    outside = tmp_path / "outside"
    outside.write_text("keep me")
    (shard / ("ab" + "ef" * 31)).symlink_to(outside)
    cache = InputCache(tmp_path)
    cache.open()
    assert sorted(shard.iterdir()) == []
    assert cache.size == 0
    assert outside.read_text() == "keep me"
