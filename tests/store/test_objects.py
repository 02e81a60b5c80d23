"""The content-addressed object store: keys, verified puts and gets, nothing partial left."""

from __future__ import annotations

import hashlib
import itertools
import os
import stat
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hypertrain.protocol.errors import Malformed, NotFound, PayloadTooLarge
from hypertrain.store import ContentMismatch, CorruptObject, ObjectStore

PAYLOAD = bytes(range(256)) * 1000
SHA = hashlib.sha256(PAYLOAD).hexdigest()


async def stream(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        await trio.lowlevel.checkpoint()
        yield chunk


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def stored_files(root: Path) -> list[Path]:
    """Every file under ``root`` except the temp folder."""
    return sorted(p for p in root.rglob("*") if p.is_file() and p.parent.name != "tmp")


def leftovers(root: Path) -> list[Path]:
    return sorted(root.rglob("*.part"))


async def read_into(
    objects: ObjectStore, sha: str, served: list[bytes], *, overwrite_after_open: bytes = b""
) -> None:
    """Stream ``sha`` chunk by chunk into ``served``, optionally damaging the file first."""
    async with objects.open_read(sha, chunk_size=1000) as reader:
        if overwrite_after_open:
            with objects.path_of(sha).open("r+b") as f:
                f.write(overwrite_after_open)
        async for chunk in reader:
            served.append(chunk)


async def test_round_trip(objects: ObjectStore) -> None:
    info = await objects.put_stream(
        stream(pieces(PAYLOAD, 4096)), expected_sha256=SHA, size_cap=len(PAYLOAD)
    )
    assert (info.sha256, info.size) == (SHA, len(PAYLOAD))
    assert objects.path_of(SHA) == objects.root / SHA[:2] / SHA
    assert objects.path_of(SHA).read_bytes() == PAYLOAD
    assert objects.exists(SHA)
    assert objects.size_of(SHA) == len(PAYLOAD)
    assert await objects.get(SHA) == PAYLOAD
    async with objects.open_read(SHA, chunk_size=10_000) as reader:
        assert reader.info == info
        got = [chunk async for chunk in reader]
    assert b"".join(got) == PAYLOAD
    assert max(map(len, got)) == 10_000
    assert leftovers(objects.root) == []
    stats = objects.statistics()
    assert (stats.puts, stats.bytes_put, stats.reads, stats.failed_puts) == (1, len(PAYLOAD), 2, 0)


@pytest.mark.parametrize(
    "key",
    [
        SHA.upper(),
        SHA[:63],
        SHA + "0",
        "g" * 64,
        "../" + SHA[3:],
        "/" * 64,
        "." * 64,
        SHA[:32] + "/" + SHA[33:],
        SHA + "\n",
        "",
    ],
)
async def test_bad_keys_are_refused_by_name(objects: ObjectStore, key: str) -> None:
    for call in (objects.path_of, objects.exists, objects.size_of):
        with pytest.raises(Malformed, match="not 64 lowercase hex") as caught:
            call(key)
        assert repr(key) in caught.value.detail
    with pytest.raises(Malformed):
        await objects.get(key)
    with pytest.raises(Malformed):
        async with objects.open_read(key):
            pass
    with pytest.raises(Malformed):
        await objects.put_bytes(PAYLOAD, expected_sha256=key)
    assert stored_files(objects.root) == []


async def test_a_hash_mismatch_is_refused_and_leaves_nothing(objects: ObjectStore) -> None:
    wrong = hashlib.sha256(b"other").hexdigest()
    with pytest.raises(ContentMismatch, match=SHA):
        await objects.put_stream(stream([PAYLOAD]), expected_sha256=wrong, size_cap=10**9)
    assert stored_files(objects.root) == []
    assert leftovers(objects.root) == []
    assert not objects.exists(wrong)
    assert not objects.exists(SHA)
    assert objects.statistics().failed_puts == 1


async def test_a_size_mismatch_is_refused_and_leaves_nothing(objects: ObjectStore) -> None:
    for declared in (len(PAYLOAD) - 1, len(PAYLOAD) + 1):
        with pytest.raises(ContentMismatch, match="declared"):
            await objects.put_stream(
                stream(pieces(PAYLOAD, 1000)),
                expected_sha256=SHA,
                size_cap=10**9,
                expected_size=declared,
            )
    assert stored_files(objects.root) == []
    assert leftovers(objects.root) == []


async def test_the_cap_is_enforced_as_soon_as_it_is_passed(objects: ObjectStore) -> None:
    consumed = 0

    async def counting() -> AsyncIterator[bytes]:
        nonlocal consumed
        for chunk in pieces(PAYLOAD, 1000):
            consumed += 1
            yield chunk

    with pytest.raises(PayloadTooLarge, match="5000"):
        await objects.put_stream(counting(), expected_sha256=None, size_cap=5000)
    assert consumed == 6
    assert stored_files(objects.root) == []
    assert leftovers(objects.root) == []
    with pytest.raises(PayloadTooLarge):
        await objects.put_stream(stream([]), expected_sha256=None, size_cap=10, expected_size=11)


async def test_a_cancelled_put_leaves_nothing(objects: ObjectStore) -> None:
    async def endless() -> AsyncIterator[bytes]:
        while True:
            yield b"x" * 1000
            await trio.sleep(0.001)

    with trio.move_on_after(0.05) as scope:
        await objects.put_stream(endless(), expected_sha256=None, size_cap=10**9)
    assert scope.cancelled_caught
    assert stored_files(objects.root) == []
    assert leftovers(objects.root) == []


async def test_a_failing_source_leaves_nothing(objects: ObjectStore) -> None:
    async def broken() -> AsyncIterator[bytes]:
        yield b"partial"
        raise ConnectionError("client went away")

    with pytest.raises(ConnectionError):
        await objects.put_stream(broken(), expected_sha256=None, size_cap=10**9)
    assert stored_files(objects.root) == []
    assert leftovers(objects.root) == []


async def test_a_corrupted_file_is_detected_and_never_served(objects: ObjectStore) -> None:
    await objects.put_bytes(PAYLOAD)
    path = objects.path_of(SHA)
    damaged = bytearray(PAYLOAD)
    damaged[len(damaged) // 2] ^= 0x01
    path.write_bytes(bytes(damaged))
    with pytest.raises(CorruptObject, match=SHA):
        await objects.get(SHA)
    served: list[bytes] = []
    with pytest.raises(CorruptObject, match=SHA):
        await read_into(objects, SHA, served)
    assert served == []  # refused before the first chunk, not at the end of the stream
    assert objects.statistics().corrupt_found == 2
    # Putting the object again repairs it.
    await objects.put_bytes(PAYLOAD)
    assert await objects.get(SHA) == PAYLOAD


async def test_a_file_changed_while_streaming_is_reported_at_the_end(
    objects: ObjectStore,
) -> None:
    await objects.put_bytes(PAYLOAD)
    served: list[bytes] = []
    with pytest.raises(CorruptObject, match="changed while being read"):
        # Same inode, new bytes: the open file sees them on the second pass.
        await read_into(objects, SHA, served, overwrite_after_open=b"\0" * 10)
    assert served  # the stream had started; the error still ends it


async def test_the_file_then_its_directories_are_fsynced(
    objects: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[Path] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    monkeypatch.setattr("hypertrain.store.objects.os.fsync", recording_fsync)
    await objects.put_bytes(PAYLOAD)
    shard = objects.path_of(SHA).parent
    assert len(synced) == 3
    assert synced[0].parent == objects.root / "tmp"
    assert synced[0].name.endswith(".part")
    assert synced[1:] == [shard, objects.root]
    synced.clear()
    await objects.put_bytes(PAYLOAD)
    assert synced[1:] == [shard]  # existing shard: the file and its directory only


async def test_put_is_idempotent(objects: ObjectStore) -> None:
    first = await objects.put_bytes(PAYLOAD, expected_sha256=SHA)
    second = await objects.put_stream(
        stream(pieces(PAYLOAD, 777)), expected_sha256=SHA, size_cap=len(PAYLOAD)
    )
    assert first == second
    assert stored_files(objects.root) == [objects.path_of(SHA)]
    assert await objects.get(SHA) == PAYLOAD


async def test_missing_objects_are_not_found(objects: ObjectStore) -> None:
    assert not objects.exists(SHA)
    with pytest.raises(NotFound, match=SHA):
        await objects.get(SHA)
    with pytest.raises(NotFound):
        objects.size_of(SHA)
    with pytest.raises(NotFound):
        async with objects.open_read(SHA):
            pass


async def test_the_empty_object_is_an_object(objects: ObjectStore) -> None:
    info = await objects.put_bytes(b"")
    assert info.sha256 == hashlib.sha256(b"").hexdigest()
    assert await objects.get(info.sha256) == b""


def test_temp_leftovers_are_cleaned_at_open(tmp_path: Path) -> None:
    root = tmp_path / "objects"
    (root / "tmp").mkdir(parents=True)
    (root / "tmp" / "dead.part").write_bytes(b"half an object")
    (root / "ab").mkdir()
    kept = root / "ab" / ("ab" + "0" * 62)
    kept.write_bytes(b"not ours to judge here")
    store = ObjectStore.open(root)
    assert leftovers(root) == []
    assert kept.exists()
    assert store.statistics().temp_files_cleaned == 1


async def test_offloaded_fsync_stores_the_same(tmp_path: Path) -> None:
    store = ObjectStore.open(tmp_path / "objects", offload_fsync=True)
    with trio.fail_after(10):
        info = await store.put_stream(
            stream(pieces(PAYLOAD, 5000)), expected_sha256=SHA, size_cap=len(PAYLOAD)
        )
    assert info.sha256 == SHA
    assert await store.get(SHA) == PAYLOAD


async def test_inline_puts_keep_virtual_time_exact(
    objects: ObjectStore, autojump_clock: trio.testing.MockClock
) -> None:
    start = trio.current_time()
    await objects.put_stream(stream(pieces(PAYLOAD, 1000)), expected_sha256=SHA, size_cap=10**9)
    assert await objects.get(SHA) == PAYLOAD
    assert trio.current_time() == start


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    data=st.binary(max_size=3000),
    cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=12),
)
async def test_any_chunking_stores_the_same_object(
    objects: ObjectStore, data: bytes, cuts: list[int]
) -> None:
    bounds = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    chunks = [data[a:b] for a, b in itertools.pairwise(bounds)]
    chunks.insert(len(chunks) // 2, b"")
    sha = hashlib.sha256(data).hexdigest()
    info = await objects.put_stream(stream(chunks), expected_sha256=None, size_cap=len(data))
    assert (info.sha256, info.size) == (sha, len(data))
    assert await objects.get(sha) == data
    assert leftovers(objects.root) == []


def test_open_without_clean_tmp_leaves_another_writers_temp_files(tmp_path: Path) -> None:
    root = tmp_path / "objects"
    (root / "tmp").mkdir(parents=True)
    in_flight = root / "tmp" / "daemon-upload.part"
    in_flight.write_bytes(b"an upload the owning daemon is still writing")
    store = ObjectStore.open(root, clean_tmp=False)
    assert in_flight.exists()
    assert store.statistics().temp_files_cleaned == 0


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_a_private_object_is_never_readable_by_others(objects: ObjectStore) -> None:
    secret, public = b"hidden trace", b"public trace"
    temp_modes: list[int] = []

    async def chunks() -> AsyncIterator[bytes]:
        yield secret[:3]
        temp_modes.extend(_mode(p) for p in (objects.root / "tmp").iterdir())
        yield secret[3:]

    info = await objects.put_stream(chunks(), expected_sha256=None, size_cap=100, private=True)
    assert temp_modes == [0o600]  # from the first byte on
    assert _mode(objects.path_of(info.sha256)) == 0o600
    # A copy stored readable (by an older version) is replaced by a private put ...
    objects.path_of(info.sha256).chmod(0o644)
    await objects.put_bytes(secret, private=True)
    assert _mode(objects.path_of(info.sha256)) == 0o600
    # ... or restricted in place.
    other = await objects.put_bytes(public)
    objects.path_of(other.sha256).chmod(0o644)
    objects.make_private(other.sha256)
    assert _mode(objects.path_of(other.sha256)) == 0o600
    with pytest.raises(NotFound):
        objects.make_private("0" * 64)
