"""The journal: the chain on disk, reopen = replay, torn final writes repaired, any other
damage refused with its offset, one writer, the params fixed."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from hypertrain.ledger import (
    ChainBreak,
    JournalChanged,
    JournalLocked,
    Ledger,
    ParamsMismatch,
    RebuildMismatch,
    journal_path,
    verify_journal,
)
from hypertrain.ledger.canonical import canonical_bytes, sha256_hex
from tests.ledger.support import (
    RUN,
    equal_round,
    journal_lines,
    make_params,
    play_round,
    rechain,
)


def build(state_dir: Path) -> tuple[dict[int, bytes], Ledger]:
    """A journal with rounds, answers, a clawback and a vindication; returns the answers and
    the ledger, still open."""
    ledger = Ledger.open(state_dir, make_params())
    play_round(ledger, 0, {**equal_round("a", "b"), "c": ("NO_UPLOAD", 100, 0)}, 1050)
    answers = {0: ledger.get_weights(0, 1100, 5)}
    play_round(ledger, 1, equal_round("a", "c"), ledger.event_time(1150))
    ledger.clawback("b", 1_000, ledger.event_time(1150))
    answers[1] = ledger.get_weights(1, 1200, 6)
    ledger.vindicate(RUN, 0, "c", ledger.event_time(1250))
    answers[2] = ledger.get_weights(2, 1300, 7)
    return answers, ledger


def test_every_record_chains_to_the_one_before(tmp_path: Path) -> None:
    _answers, ledger = build(tmp_path)
    ledger.close()
    lines = journal_lines(tmp_path)
    assert lines[0]["kind"] == "init"
    assert lines[0]["prev_hash"] == "0" * 64
    assert lines[0]["format"] == "hypertrain-ledger/1"
    assert lines[0]["params"] == make_params().to_record()
    for seq, record in enumerate(lines):
        assert record["seq"] == seq
        unsigned = {k: v for k, v in record.items() if k != "hash"}
        assert record["hash"] == sha256_hex(canonical_bytes(unsigned))
        if seq:
            assert record["prev_hash"] == lines[seq - 1]["hash"]
    kinds = [r["kind"] for r in lines]
    assert kinds.count("weights") == 3
    assert {"commit", "verdict", "finalize", "clawback", "vindicate"} <= set(kinds)
    weights = next(r for r in lines if r["kind"] == "weights" and r["payments"])
    assert set(weights) == {"kind", "seq", "prev_hash", "hash", "answer", "payments"}
    for line in journal_path(tmp_path).read_bytes().splitlines():
        assert canonical_bytes(json.loads(line)) == line


def test_reopen_replays_to_the_same_state_and_answers(tmp_path: Path) -> None:
    answers, ledger = build(tmp_path)
    state = ledger.state
    ledger.close()
    with Ledger.open(tmp_path, make_params()) as again:
        assert again.state == state
        for epoch, data in answers.items():
            assert again.get_weights(epoch, 0, 0) == data
        again.commit(RUN, 2, "a", again.event_time(0))  # and the chain goes on
    assert verify_journal(journal_path(tmp_path)).ok


def test_the_journal_and_its_lock_are_private(tmp_path: Path) -> None:
    with Ledger.open(tmp_path, make_params()) as ledger:
        assert stat.S_IMODE(ledger.path.stat().st_mode) == 0o600
        assert stat.S_IMODE((ledger.path.parent / "journal.lock").stat().st_mode) == 0o600


def test_a_second_writer_is_refused(tmp_path: Path) -> None:
    with Ledger.open(tmp_path, make_params()), pytest.raises(JournalLocked, match="another"):
        Ledger.open(tmp_path, make_params())
    with Ledger.open(tmp_path, make_params()):  # released on close
        pass


def test_other_params_are_refused(tmp_path: Path) -> None:
    Ledger.open(tmp_path, make_params()).close()
    before = journal_path(tmp_path).read_bytes()
    with pytest.raises(ParamsMismatch, match="vest_rounds=3"):
        Ledger.open(tmp_path, make_params(vest_rounds=3))
    assert journal_path(tmp_path).read_bytes() == before
    Ledger.open(tmp_path, make_params()).close()  # the lock was released


def test_a_file_changed_behind_the_writer_is_refused(tmp_path: Path) -> None:
    with Ledger.open(tmp_path, make_params()) as ledger:
        ledger.commit(RUN, 0, "a", 1010)
        with ledger.path.open("ab") as f:
            f.write(b"x")
        state = ledger.state.queue.copy()
        with pytest.raises(JournalChanged, match="size is"):
            ledger.commit(RUN, 0, "b", 1010)
        assert ledger.state.queue == state
    with pytest.raises(JournalChanged, match="closed"):
        ledger.commit(RUN, 0, "b", 1010)


def test_a_failed_append_stops_the_writer_until_reopened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Ledger.open(tmp_path, make_params())
    ledger.commit(RUN, 0, "a", 1010)
    real_write = os.write

    def half_write(fd: int, data: bytes | memoryview) -> int:
        real_write(fd, bytes(data)[:10])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", half_write)
    with pytest.raises(OSError, match="No space"):
        ledger.commit(RUN, 0, "b", 1010)
    monkeypatch.setattr(os, "write", real_write)
    assert not ledger.has_commit(RUN, 0, "b")
    with pytest.raises(JournalChanged, match="earlier write failed"):
        ledger.commit(RUN, 0, "c", 1010)
    ledger.close()
    with Ledger.open(tmp_path, make_params()) as again:  # repairs the 10 torn bytes
        assert again.has_commit(RUN, 0, "a")
        assert not again.has_commit(RUN, 0, "b")
        assert journal_lines(tmp_path)[-1]["kind"] == "journal_repaired"


@pytest.mark.parametrize("cut", [1, 40, -1])
def test_a_torn_final_write_is_quarantined_and_repaired(tmp_path: Path, cut: int) -> None:
    """``cut`` bytes of the last record are lost (-1: only its newline)."""
    answers, ledger = build(tmp_path)
    ledger.commit(RUN, 2, "z", ledger.event_time(0))
    ledger.close()
    path = journal_path(tmp_path)
    data = path.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    torn = data[last:-1] if cut == -1 else data[last : len(data) - cut]
    path.write_bytes(data[:last] + torn)
    with Ledger.open(tmp_path, make_params()) as reopened:
        assert not reopened.has_commit(RUN, 2, "z")  # never acknowledged: gone
        assert reopened.get_weights(2, 0, 0) == answers[2]
        reopened.commit(RUN, 2, "y", reopened.event_time(0))
    sidecar = tmp_path / "ledger" / f"journal.torn-{last}-{sha256_hex(torn)[:16]}.bin"
    assert sidecar.read_bytes() == torn
    assert stat.S_IMODE(sidecar.stat().st_mode) == 0o600
    lines = journal_lines(tmp_path)
    repaired = lines[-2]
    assert repaired["kind"] == "journal_repaired"
    assert (repaired["offset"], repaired["length"]) == (last, len(torn))
    assert repaired["sha256"] == sha256_hex(torn)
    assert repaired["sidecar"] == sidecar.name
    assert lines[-1]["kind"] == "commit"
    assert lines[-1]["hotkey"] == "y"
    assert verify_journal(path).ok


def test_a_torn_init_starts_the_journal_again(tmp_path: Path) -> None:
    path = journal_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"format":"hypertrain-le')
    with Ledger.open(tmp_path, make_params()):
        pass
    assert [r["kind"] for r in journal_lines(tmp_path)] == ["init", "journal_repaired"]


def test_verify_reports_a_torn_tail_without_repairing_it(tmp_path: Path) -> None:
    _answers, ledger = build(tmp_path)
    ledger.close()
    path = journal_path(tmp_path)
    with path.open("ab") as f:
        f.write(b'{"at":17')
    before = path.read_bytes()
    report = verify_journal(path)
    assert report.ok
    assert report.torn is not None
    assert report.torn.data == b'{"at":17'
    assert path.read_bytes() == before
    assert not list(path.parent.glob("journal.torn-*"))


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("target", ["digit", "newline", "brace"])
def test_a_damaged_middle_record_is_refused_naming_its_offset(tmp_path: Path, target: str) -> None:
    _answers, ledger = build(tmp_path)
    ledger.close()
    path = journal_path(tmp_path)
    data = path.read_bytes()
    starts = [0, *[i + 1 for i, b in enumerate(data) if b == ord("\n")][:-1]]
    line = 5
    start = starts[line]
    spot = {
        "digit": data.index(b'"at":', start) + 5,
        "newline": starts[line + 1] - 1,
        "brace": start,
    }[target]
    _flip(path, spot)
    damaged = path.read_bytes()
    with pytest.raises(
        ChainBreak, match=f"line {line + 1} at byte offset {start} \\(seq {line}\\)"
    ):
        Ledger.open(tmp_path, make_params())
    assert path.read_bytes() == damaged  # nothing repaired, nothing appended
    report = verify_journal(path)
    assert not report.ok
    assert report.damage_offset == start
    assert report.records == line
    with pytest.raises(ChainBreak):  # not JournalLocked: the refused open released its lock
        Ledger.open(tmp_path, make_params())


def _rewrite(tmp_path: Path, edit: dict[str, object], where: int) -> None:
    records = journal_lines(tmp_path)
    records[where] = {**records[where], **edit}
    journal_path(tmp_path).write_bytes(rechain(records))


def test_a_forged_answer_on_a_valid_chain_is_a_rebuild_mismatch(tmp_path: Path) -> None:
    _answers, ledger = build(tmp_path)
    ledger.close()
    records = journal_lines(tmp_path)
    index = next(i for i, r in enumerate(records) if r["kind"] == "weights" and r["payments"])
    answer = records[index]["answer"]
    answer["weights"]["a"] += 1.0
    _rewrite(tmp_path, {"answer": answer}, index)
    with pytest.raises(RebuildMismatch, match=f"seq {index}.*not its recomputation"):
        Ledger.open(tmp_path, make_params())
    assert not verify_journal(journal_path(tmp_path)).ok


def test_forged_payments_are_a_rebuild_mismatch(tmp_path: Path) -> None:
    _answers, ledger = build(tmp_path)
    ledger.close()
    records = journal_lines(tmp_path)
    index = next(i for i, r in enumerate(records) if r["kind"] == "weights" and r["payments"])
    _rewrite(tmp_path, {"payments": records[index]["payments"][::-1]}, index)
    with pytest.raises(RebuildMismatch, match="payments"):
        Ledger.open(tmp_path, make_params())


def test_a_record_the_rules_refuse_is_a_chain_break(tmp_path: Path) -> None:
    _answers, ledger = build(tmp_path)
    ledger.close()
    records = journal_lines(tmp_path)
    records.insert(2, records[1])  # the same commit twice
    journal_path(tmp_path).write_bytes(rechain(records))
    with pytest.raises(ChainBreak, match=r"line 3 .*rules refuse it.*already committed"):
        Ledger.open(tmp_path, make_params())


@pytest.mark.parametrize(
    ("edit", "where", "message"),
    [
        ({"kind": "mint"}, 3, "unknown record kind 'mint'"),
        ({"kind": "init"}, 3, "only the first, must be init"),
        ({"surprise": 1}, 3, "unknown field"),
        ({"w": -1}, 1, "w must be"),
    ],
)
def test_bad_records_on_a_valid_chain_are_chain_breaks(
    tmp_path: Path, edit: dict[str, object], where: int, message: str
) -> None:
    _answers, ledger = build(tmp_path)
    ledger.close()
    _rewrite(tmp_path, edit, where)
    with pytest.raises(ChainBreak, match=message):
        Ledger.open(tmp_path, make_params())


def test_a_line_not_in_canonical_form_is_a_chain_break(tmp_path: Path) -> None:
    _answers, ledger = build(tmp_path)
    ledger.close()
    path = journal_path(tmp_path)
    lines = path.read_bytes().splitlines()
    lines[2] = json.dumps(json.loads(lines[2]), sort_keys=True).encode()  # ", " and ": "
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(ChainBreak, match=r"line 3 .*canonical form"):
        Ledger.open(tmp_path, make_params())


def test_a_missing_record_breaks_the_chain(tmp_path: Path) -> None:
    _answers, ledger = build(tmp_path)
    ledger.close()
    path = journal_path(tmp_path)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:3] + lines[4:]))
    with pytest.raises(ChainBreak, match=r"line 4 .*seq 3.*seq is 4"):
        Ledger.open(tmp_path, make_params())
