"""``hypertrain verify-checkpoint`` and ``hypertrain checkpoint fetch``: check a checkpoint
directory (:mod:`hypertrain.aggregator.checkpoint_verify`) and download one from a daemon
(:mod:`hypertrain.aggregator.checkpoint_client`).

``verify-checkpoint DIR [--signer SS58] [--replay (--api URL | --objects DIR)]`` reads exactly
the regular files in DIR (a subdirectory, symbolic link or other entry fails ``files`` and is
neither followed nor read), runs every check and, with ``--replay``, re-runs every tape's merge
from the objects of a daemon (``--api``: the checkpoint's public object route) or of a local
object store (``--objects``: ``DIR/<sha[:2]>/<sha>`` as in ``<state_dir>/objects``, or
``DIR/<sha>``). Prints one JSON line ``{"result": "VERIFIED", ...}``; on failure one line
``FAIL <check>: <detail>`` per failed check on stderr, then ``{"result": "FAIL", "failed":
[checks]}`` on stdout.

``checkpoint fetch --api URL --run-id ID --out DIR [--w W]`` downloads checkpoint W (default:
the newest), checks every file against the daemon's listing and the manifest, and puts DIR in
place only when all three hold; prints ``{run_id, w, status, out, files}``. It does not verify
signatures or replay: run ``verify-checkpoint`` on DIR for that.

Exit status: 0 ok; 1 the checkpoint fails a check, a download is not what the listing or
manifest says, or the daemon refused a request (404: its detail); 2 usage (DIR is not a
directory, ``--replay`` without exactly one source or a source without ``--replay``, a bad
SS58, an existing non-empty ``--out``); 3 the daemon unreachable.
"""

from __future__ import annotations

import argparse
import errno
import os
import stat
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Final

import httpx

from hypertrain.aggregator.checkpoint import FILES
from hypertrain.aggregator.checkpoint_client import (
    CheckpointClient,
    CheckpointMismatch,
    fetch_checkpoint,
)
from hypertrain.aggregator.checkpoint_verify import (
    Checked,
    CheckpointInvalid,
    check_checkpoint,
    replay_checkpoint,
)
from hypertrain.aggregator.remote_client import DEFAULT_RETRY, DaemonUnreachable, Refused, Retry
from hypertrain.cli.common import (
    EXIT_INVALID,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Subparsers,
    api_arg,
    fail,
    hex64_arg,
    print_json,
    ss58_arg,
)
from hypertrain.protocol.errors import NotFound
from hypertrain.protocol.jcs import MAX_SAFE_INT

__all__ = [
    "EXIT_UNREACHABLE",
    "directory_loader",
    "fetch_main",
    "read_checkpoint_dir",
    "register",
    "verify_main",
]

EXIT_UNREACHABLE: Final = 3


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def _read_regular(path: Path) -> bytes | None:
    """The bytes of ``path`` if it is a regular file (never through a symbolic link)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ELOOP:  # it became a symbolic link since it was listed
            return None
        raise CliError(f"{path}: cannot read ({e.strerror})") from e
    with os.fdopen(fd, "rb") as f:
        return f.read() if stat.S_ISREG(os.fstat(fd).st_mode) else None


def read_checkpoint_dir(root: Path) -> tuple[dict[str, bytes], dict[str, str]]:
    """``(files, others)``: the bytes of each regular file of ``root`` named in ``FILES``, and
    what every other entry is (not read; a regular file of another name is not read either)."""
    files: dict[str, bytes] = {}
    others: dict[str, str] = {}
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError as e:
        raise CliError(f"{root}: cannot list ({e.strerror})") from e
    for entry in entries:
        mode = entry.stat(follow_symlinks=False).st_mode
        wanted = entry.name in FILES and stat.S_ISREG(mode)
        data = _read_regular(Path(entry.path)) if wanted else None
        if data is None:
            others[entry.name] = _kind(mode)
        else:
            files[entry.name] = data
    return files, others


def directory_loader(root: Path) -> Callable[[str], bytes]:
    """``load_object`` over an object store directory: ``root/<sha[:2]>/<sha>`` or
    ``root/<sha>``; NotFound when neither is a readable file."""

    def load(key: str) -> bytes:
        for path in (root / key[:2] / key, root / key):
            try:
                return path.read_bytes()
            except FileNotFoundError:
                continue
            except OSError as e:
                raise NotFound(f"{path}: cannot read ({e.strerror})") from e
        raise NotFound(f"not in {root}")

    return load


def _print_failures(error: CheckpointInvalid) -> int:
    for failure in error.failures:
        sys.stderr.write(f"FAIL {failure.check}: {failure.detail}\n")
    print_json({"result": "FAIL", "failed": error.failed})
    return EXIT_INVALID


def _replay(
    checked: Checked, args: argparse.Namespace, transport: httpx.BaseTransport | None, retry: Retry
) -> Checked:
    if checked.manifest is None:
        return checked  # the manifest's failure already fails the checkpoint
    if args.objects is not None:
        return replay_checkpoint(checked, directory_loader(Path(args.objects)))
    body = checked.manifest.body
    with CheckpointClient(args.api, transport=transport, retry=retry) as client:
        load = partial(client.get_object, body.run_id, body.rounds[1])
        return replay_checkpoint(checked, load)


def verify_main(
    args: argparse.Namespace,
    *,
    transport: httpx.BaseTransport | None = None,
    retry: Retry = DEFAULT_RETRY,
) -> int:
    """``verify-checkpoint`` for parsed ``args`` (module doc); tests pass a ``transport``."""
    root = Path(args.dir)
    if args.replay and (args.api is None) == (args.objects is None):
        raise CliError("--replay needs exactly one of --api URL and --objects DIR")
    if not args.replay and (args.api is not None or args.objects is not None):
        raise CliError("--api and --objects are only for --replay")
    if not root.is_dir():
        raise CliError(f"{root}: not a directory")
    if args.objects is not None and not Path(args.objects).is_dir():
        raise CliError(f"--objects {args.objects}: not a directory")
    files, others = read_checkpoint_dir(root)
    checked = check_checkpoint(files, signer=args.signer, others=others)
    if args.replay:
        try:
            checked = _replay(checked, args, transport, retry)
        except DaemonUnreachable as e:
            return fail(f"daemon unreachable: {e}", EXIT_UNREACHABLE)
        except Refused as e:
            return fail(f"refused: {e}", EXIT_INVALID)
    try:
        report = checked.report()
    except CheckpointInvalid as e:
        return _print_failures(e)
    print_json(report.to_json())
    return EXIT_OK


def fetch_main(
    args: argparse.Namespace,
    *,
    transport: httpx.BaseTransport | None = None,
    retry: Retry = DEFAULT_RETRY,
) -> int:
    """``checkpoint fetch`` for parsed ``args`` (module doc); tests pass a ``transport``."""
    out = Path(args.out)
    try:
        with CheckpointClient(args.api, transport=transport, retry=retry) as client:
            fetched = fetch_checkpoint(client, args.run_id, out, w=args.w)
    except DaemonUnreachable as e:
        return fail(f"daemon unreachable: {e}", EXIT_UNREACHABLE)
    except Refused as e:
        return fail(f"refused: {e}", EXIT_INVALID)
    except CheckpointMismatch as e:
        return fail(f"checkpoint refused: {e}", EXIT_INVALID)
    except FileExistsError as e:
        return fail(f"--out {e}", EXIT_USAGE)
    except OSError as e:
        return fail(f"--out {out}: cannot write ({e.strerror})", EXIT_USAGE)
    print_json(fetched.to_json())
    return EXIT_OK


def _round_arg(value: str) -> int:
    if not value.isascii() or not value.isdigit() or int(value) > MAX_SAFE_INT:
        raise argparse.ArgumentTypeError(f"{value!r} is not a round number")
    return int(value)


def register(subparsers: Subparsers[Any]) -> None:
    """Add ``verify-checkpoint`` and ``checkpoint fetch``."""
    verify = subparsers.add_parser(
        "verify-checkpoint",
        help="check a checkpoint directory (and replay its tapes)",
        description="Check a checkpoint directory: exit 0 VERIFIED, 1 FAIL (each failed check"
        " on stderr), 2 usage or DIR not a directory, 3 daemon unreachable (--api).",
    )
    verify.add_argument("dir", metavar="DIR", help="the checkpoint directory")
    verify.add_argument("--signer", type=ss58_arg, metavar="SS58", help="the expected K_coord")
    verify.add_argument(
        "--replay", action="store_true", help="re-run every tape's merge from stored objects"
    )
    verify.add_argument("--api", type=api_arg, metavar="URL", help="objects from this daemon")
    verify.add_argument("--objects", metavar="DIR", help="objects from this object store")
    verify.set_defaults(handler=verify_main)
    group = subparsers.add_parser("checkpoint", help="fetch a run's checkpoints from a daemon")
    commands = group.add_subparsers(title="checkpoint commands", metavar="COMMAND", required=True)
    fetch = commands.add_parser(
        "fetch",
        help="download a checkpoint, checked against the daemon's listing and its manifest",
    )
    fetch.add_argument("--api", required=True, type=api_arg, metavar="URL", help="daemon URL")
    fetch.add_argument("--run-id", required=True, type=hex64_arg, metavar="ID", help="run id")
    fetch.add_argument("--out", required=True, metavar="DIR", help="new or empty directory")
    fetch.add_argument("--w", type=_round_arg, metavar="W", help="w_end (default: newest)")
    fetch.set_defaults(handler=fetch_main)
