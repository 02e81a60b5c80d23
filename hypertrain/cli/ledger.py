"""``hypertrain ledger``: read the escrow ledger's journal without writing to it.

``ledger show --state-dir D [--json]`` replays ``D/ledger/journal.jsonl`` (params from its
``init`` record) and prints every hotkey's balances and the totals, with every recorded event
applied. ``ledger verify --state-dir D`` walks the hash chain, recomputes every stored answer
and recounts the accounts. Neither takes the writer's lock or repairs anything, so both run
beside the daemon; a torn final write (an append in flight, or a crash the daemon repairs when
it next opens the journal) is left out and named.

Exit status: 0 ok (verify prints a one-line summary), 1 the journal is damaged (the reason,
naming the line, byte offset and seq, on stderr), 2 usage: no such state directory, or no
journal in it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from hypertrain.cli.common import EXIT_INVALID, EXIT_OK, CliError, Subparsers, fail, print_json
from hypertrain.ledger import (
    HotkeyAccount,
    LedgerError,
    LedgerState,
    Totals,
    journal_path,
    read_journal,
    verify_journal,
)
from hypertrain.ledger.journal import TornTail

__all__ = ["register"]

_COLUMNS = ("pending", "paid", "burned", "debt")


def _journal(state_dir: str) -> Path:
    root = Path(state_dir)
    if not root.is_dir():
        raise CliError(f"{root}: no such state directory")
    path = journal_path(root)
    if not path.is_file():
        raise CliError(f"{root}: no ledger journal ({path} does not exist)")
    return path


def _torn_note(torn: TornTail | None) -> str:
    if torn is None:
        return ""
    return (
        f"; torn tail of {len(torn.data)} bytes at byte offset {torn.offset} left out"
        " (the writer quarantines it when it opens the journal)"
    )


def _totals_text(totals: Totals) -> str:
    return (
        f"minted {totals.minted}, burned {totals.burned}, paid {totals.paid},"
        f" pending {totals.pending}, debt {totals.debt}"
    )


def _flags(account: HotkeyAccount) -> str:
    return ",".join(
        name
        for name, on in (("blacklisted", account.blacklisted), ("frozen", account.frozen))
        if on
    )


def _table(state: LedgerState) -> list[str]:
    balances = state.balances()
    width = max([len("hotkey"), *map(len, balances)])
    lines = [f"{'hotkey':<{width}}  " + "  ".join(f"{c:>13}" for c in _COLUMNS) + "  flags"]
    for hotkey, account in balances.items():
        numbers = "  ".join(f"{getattr(account, c):>13}" for c in _COLUMNS)
        lines.append(f"{hotkey:<{width}}  {numbers}  {_flags(account)}".rstrip())
    return lines


def _show(args: argparse.Namespace) -> int:
    path = _journal(args.state_dir)
    try:
        scan, state = read_journal(path)
    except LedgerError as e:
        return fail(f"journal damaged: {e.detail}", EXIT_INVALID)
    except OSError as e:
        raise CliError(f"{path}: cannot read ({e.strerror})") from e
    if state is None:
        raise CliError(f"{path}: the journal holds no record yet")
    totals = state.totals()
    if args.json:
        print_json(
            {
                "journal": str(path),
                "records": len(scan.records),
                "queued_events": len(state.queue),
                "last_epoch": state.last_epoch,
                "last_epoch_at": state.last_epoch_at,
                "params": state.params.to_record(),
                "totals": {
                    "minted": totals.minted,
                    "burned": totals.burned,
                    "paid": totals.paid,
                    "pending": totals.pending,
                    "debt": totals.debt,
                },
                "hotkeys": {
                    hotkey: {
                        "pending": a.pending,
                        "paid": a.paid,
                        "burned": a.burned,
                        "debt": a.debt,
                        "blacklisted": a.blacklisted,
                        "frozen": a.frozen,
                    }
                    for hotkey, a in state.balances().items()
                },
                "torn_bytes": len(scan.torn.data) if scan.torn is not None else 0,
            }
        )
        return EXIT_OK
    out = sys.stdout
    for line in _table(state):
        out.write(line + "\n")
    out.write(f"totals: {_totals_text(totals)}\n")
    last = "none" if state.last_epoch is None else f"epoch {state.last_epoch}"
    out.write(
        f"journal: {path}: {len(scan.records)} records; last answer: {last};"
        f" {len(state.queue)} events recorded since{_torn_note(scan.torn)}\n"
    )
    return EXIT_OK


def _verify(args: argparse.Namespace) -> int:
    path = _journal(args.state_dir)
    try:
        report = verify_journal(path)
    except OSError as e:
        raise CliError(f"{path}: cannot read ({e.strerror})") from e
    if not report.ok:
        return fail(f"{path}: journal damaged: {report.damage}", EXIT_INVALID)
    totals = "no records" if report.totals is None else _totals_text(report.totals)
    sys.stdout.write(
        f"ok: {path}: {report.records} records, {report.answers} answers; {totals}"
        f"{_torn_note(report.torn)}\n"
    )
    return EXIT_OK


def register(subparsers: Subparsers[Any]) -> None:
    """Add ``ledger show`` and ``ledger verify``."""
    group = subparsers.add_parser("ledger", help="read the escrow ledger's journal (read-only)")
    commands = group.add_subparsers(title="ledger commands", metavar="COMMAND", required=True)
    show = commands.add_parser("show", help="balances per hotkey and the ledger's totals")
    show.add_argument("--state-dir", required=True, metavar="DIR", help="the daemon's state dir")
    show.add_argument("--json", action="store_true", help="one line of JSON instead of a table")
    show.set_defaults(handler=_show)
    verify = commands.add_parser(
        "verify", help="walk the hash chain, recompute every answer, recount the accounts"
    )
    verify.add_argument("--state-dir", required=True, metavar="DIR", help="the daemon's state dir")
    verify.set_defaults(handler=_verify)
