"""``hypertrain ledger show`` and ``verify``: read-only, beside a running writer; exit 0 ok,
1 damaged, 2 usage."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hypertrain.cli import main
from hypertrain.ledger import Ledger, journal_path
from tests.ledger.support import RUN, equal_round, make_params, play_round

Capture = pytest.CaptureFixture[str]


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    with Ledger.open(tmp_path, make_params()) as ledger:
        play_round(ledger, 0, {**equal_round("alice", "bob"), "carol": ("FAULT", 100, 0)}, 1050)
        ledger.get_weights(1, 1200, 0)
        ledger.clawback("bob", 500_000, ledger.event_time(0))
    return tmp_path


def test_show_prints_balances_and_totals(state_dir: Path, capsys: Capture) -> None:
    assert main(["ledger", "show", "--state-dir", str(state_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["hotkey", "pending", "paid", "burned", "debt", "flags"]
    assert lines[1].split() == ["alice", "0", "333333", "0", "0"]
    assert lines[2].split() == ["bob", "0", "333333", "0", "500000"]
    assert lines[3].split() == ["carol", "0", "0", "333333", "0", "blacklisted"]
    assert lines[4] == "totals: minted 1000000, burned 333334, paid 666666, pending 0, debt 500000"
    assert "10 records" in lines[5]
    assert "last answer: epoch 1" in lines[5]
    assert "1 events recorded since" in lines[5]


def test_show_json(state_dir: Path, capsys: Capture) -> None:
    assert main(["ledger", "show", "--state-dir", str(state_dir), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["totals"] == {
        "minted": 10**6,
        "burned": 333_334,
        "paid": 666_666,
        "pending": 0,
        "debt": 500_000,
    }
    assert shown["hotkeys"]["bob"] == {
        "pending": 0,
        "paid": 333_333,
        "burned": 0,
        "debt": 500_000,
        "blacklisted": False,
        "frozen": False,
    }
    assert shown["params"] == make_params().to_record()
    assert (shown["records"], shown["queued_events"], shown["last_epoch"]) == (10, 1, 1)


def test_show_and_verify_work_beside_the_writer(state_dir: Path, capsys: Capture) -> None:
    with Ledger.open(state_dir, make_params()) as ledger:
        ledger.commit(RUN, 1, "alice", ledger.event_time(0))
        assert main(["ledger", "show", "--state-dir", str(state_dir)]) == 0
        assert main(["ledger", "verify", "--state-dir", str(state_dir)]) == 0
    out = capsys.readouterr().out
    assert "11 records" in out


def test_verify_ok_prints_one_summary_line(state_dir: Path, capsys: Capture) -> None:
    assert main(["ledger", "verify", "--state-dir", str(state_dir)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out.splitlines() == [
        f"ok: {journal_path(state_dir)}: 10 records, 1 answers; minted 1000000, burned 333334,"
        " paid 666666, pending 0, debt 500000"
    ]


def test_verify_names_a_torn_tail_and_leaves_it(state_dir: Path, capsys: Capture) -> None:
    path = journal_path(state_dir)
    size = path.stat().st_size
    with path.open("ab") as f:
        f.write(b'{"at":')
    assert main(["ledger", "verify", "--state-dir", str(state_dir)]) == 0
    out = capsys.readouterr().out
    assert f"torn tail of 6 bytes at byte offset {size} left out" in out
    assert path.stat().st_size == size + 6


def test_verify_a_damaged_journal_exits_1_naming_the_record(
    state_dir: Path, capsys: Capture
) -> None:
    path = journal_path(state_dir)
    lines = path.read_bytes().splitlines(keepends=True)
    offset = sum(map(len, lines[:4]))
    lines[4] = lines[4].replace(b'"at":1050', b'"at":1051')
    path.write_bytes(b"".join(lines))
    assert main(["ledger", "verify", "--state-dir", str(state_dir)]) == 1
    err = capsys.readouterr().err
    assert f"line 5 at byte offset {offset} (seq 4): hash does not match" in err
    assert main(["ledger", "show", "--state-dir", str(state_dir)]) == 1
    assert "journal damaged" in capsys.readouterr().err


def test_usage_errors_exit_2(tmp_path: Path, capsys: Capture) -> None:
    assert main(["ledger", "verify", "--state-dir", str(tmp_path / "nope")]) == 2
    assert "no such state directory" in capsys.readouterr().err
    assert main(["ledger", "verify", "--state-dir", str(tmp_path)]) == 2
    assert "no ledger journal" in capsys.readouterr().err
    assert main(["ledger", "show", "--state-dir", str(tmp_path)]) == 2
    assert main(["ledger", "verify"]) == 2
    assert main(["ledger"]) == 2


def test_the_console_command_runs(state_dir: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hypertrain", "ledger", "verify", "--state-dir", str(state_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok: ")
