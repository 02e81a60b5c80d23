"""Helpers shared by the command groups: one-line errors, input files, JSON output."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, NoReturn, Protocol
from urllib.parse import urlsplit

from hypertrain.protocol.errors import KeyfileError, Malformed
from hypertrain.protocol.jcs import MAX_SAFE_INT, parse_json
from hypertrain.protocol.keys import read_private_file
from hypertrain.protocol.tokens import MAX_TOKEN_FILE_BYTES, token_in
from hypertrain.protocol.validators import is_hex64, is_ss58_address

__all__ = [
    "EXIT_INVALID",
    "EXIT_OK",
    "EXIT_USAGE",
    "CliError",
    "CliGroup",
    "OneLineParser",
    "Subparsers",
    "api_arg",
    "exception_leaves",
    "fail",
    "hex64_arg",
    "positive_int_arg",
    "print_json",
    "read_input",
    "read_json",
    "read_token_file",
    "ss58_arg",
]

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2

Subparsers = argparse._SubParsersAction  # argparse exposes no public name for it


class CliGroup(Protocol):
    """A command group module: it registers its parsers on the top-level subparsers."""

    def register(self, subparsers: Subparsers[Any]) -> None: ...


class CliError(Exception):
    """A user mistake reported as one line on stderr with exit status ``code``."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are a single line (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        raise SystemExit(EXIT_USAGE)


def fail(message: str, code: int) -> int:
    """Write ``hypertrain: message`` on stderr and return ``code``."""
    sys.stderr.write(f"hypertrain: {' '.join(message.split())}\n")
    return code


def read_input(path: str) -> bytes:
    """The bytes of file ``path``, or of stdin for ``-``; CliError (exit 2) when unreadable."""
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(path).read_bytes()
    except FileNotFoundError as e:
        raise CliError(f"{path}: no such file") from e
    except IsADirectoryError as e:
        raise CliError(f"{path}: is a directory") from e
    except OSError as e:
        raise CliError(f"{path}: cannot read ({e.strerror})") from e


def read_json(path: str) -> Any:
    """Strictly parsed JSON of ``path`` (see :func:`read_input`); bad JSON exits 1."""
    data = read_input(path)
    try:
        return parse_json(data)
    except Malformed as e:
        name = "stdin" if path == "-" else path
        raise CliError(f"{name}: {e.detail}", EXIT_INVALID) from e


def read_token_file(flag: str, path: str | Path) -> str:
    """The one token (:func:`~hypertrain.protocol.tokens.token_in`) of the file ``path`` that
    option ``flag`` names, read as the daemon reads its own token files
    (:func:`~hypertrain.protocol.keys.read_private_file`: a regular file, never through a
    symlink, owned by you, without group or other permission bits). Otherwise CliError
    (exit 2): ``flag``, the file and what is wrong (``run chmod 600 FILE`` for a mode that
    lets others read it)."""
    try:
        data = read_private_file(path, MAX_TOKEN_FILE_BYTES, "token file")
    except FileNotFoundError as e:
        raise CliError(f"{flag} {path}: no such file") from e
    except KeyfileError as e:
        raise CliError(f"{flag} {e.detail}") from e
    except OSError as e:
        raise CliError(f"{flag} {path}: cannot read ({e.strerror})") from e
    token = token_in(data)
    if token is None:
        raise CliError(
            f"{flag} {path}: does not hold one token (empty, too long or containing whitespace)"
        )
    return token.decode("utf-8", "surrogateescape")


def print_json(value: object) -> None:
    """Write ``value`` as one line of JSON on stdout."""
    sys.stdout.write(json.dumps(value, separators=(",", ":")) + "\n")


def hex64_arg(value: str) -> str:
    """argparse type: 64 lowercase hex chars."""
    if not is_hex64(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not 64 lowercase hex chars")
    return value


def ss58_arg(value: str) -> str:
    """argparse type: an SS58 address (prefix 42, valid checksum)."""
    if not is_ss58_address(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not an SS58 address")
    return value


def api_arg(value: str) -> str:
    """argparse type: a daemon's http(s) base URL, without a trailing slash."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(f"{value!r} is not an http(s) URL")
    return value.rstrip("/")


def positive_int_arg(value: str) -> int:
    """argparse type: a decimal int in [1, 2^53-1]."""
    if not value.isascii() or not value.isdigit() or not 1 <= int(value) <= MAX_SAFE_INT:
        raise argparse.ArgumentTypeError(f"{value!r} is not an int in [1, 2^53-1]")
    return int(value)


def exception_leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside ``exc``'s (nested) exception groups, or ``[exc]``: what a command's
    process boundary classifies after ``trio.run``."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in exception_leaves(inner)]
    return [exc]
