"""The fsynced journal: replay, torn last line, durable artifact writes before events."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hypertrain.miner.journal import JOURNAL_FILE, Journal, write_durable


def test_append_and_replay(tmp_path: Path) -> None:
    j = Journal.load(tmp_path)
    j.append(0, "accepted")
    j.append(0, "committed", status="COMMITTED")
    j.append(1, "skipped", reason="x")
    again = Journal.load(tmp_path)
    assert again.events == j.events
    assert set(again.phases(0)) == {"accepted", "committed"}
    assert again.phases(0)["committed"]["status"] == "COMMITTED"
    assert again.rounds() == [0, 1]
    assert again.unfinished() == [0]
    with pytest.raises(ValueError, match="unknown journal phase"):
        j.append(0, "bogus")


@pytest.mark.parametrize("tail", [b'{"w":0,"pha', b'{"w":0,"phase":"leaves"}', b"garbage\n"])
def test_torn_last_line_is_ignored_and_truncated(tmp_path: Path, tail: bytes) -> None:
    j = Journal.load(tmp_path)
    j.append(0, "accepted")
    path = tmp_path / JOURNAL_FILE
    good = path.read_bytes()
    with path.open("ab") as f:
        f.write(tail)
    again = Journal.load(tmp_path)
    assert [e["phase"] for e in again.events] == ["accepted"]
    assert path.read_bytes() == good
    again.append(0, "trained")
    assert [e["phase"] for e in Journal.load(tmp_path).events] == ["accepted", "trained"]


def test_fsync_order_artifact_before_event(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        calls.append("fsync:" + os.readlink(f"/proc/self/fd/{fd}").rsplit("/", 1)[-1])
        real_fsync(fd)

    def replace(a: str | Path, b: str | Path) -> None:
        calls.append("rename:" + Path(b).name)
        real_replace(a, b)

    j = Journal.load(tmp_path)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    write_durable(tmp_path / "rounds" / "0" / "commit.json", b"{}")
    j.append(0, "trained")
    tmp_sync = next(i for i, c in enumerate(calls) if c.startswith("fsync:.commit.json"))
    assert calls.index("rename:commit.json") > tmp_sync
    assert calls.index("fsync:0") > calls.index("rename:commit.json")  # the directory entry
    assert calls[-1] == "fsync:" + JOURNAL_FILE
    assert (tmp_path / "rounds" / "0" / "commit.json").read_bytes() == b"{}"
