"""The hash-chained journal file ``<state_dir>/ledger/journal.jsonl``: reading it back
(:func:`scan_journal`, pure) and writing it (:class:`JournalWriter`, the single writer).

**Reading.** Every byte up to the last newline must be whole records (:mod:`.records`), each
line exactly the canonical bytes of its JSON object, with ``seq`` counting from 0,
``prev_hash`` chaining and ``hash`` matching, a known ``kind`` and valid fields, ``init`` first
and only first. Anything else is :class:`~hypertrain.ledger.errors.ChainBreak`, naming the
line, the byte offset and the seq expected there.

**A torn final write** is, precisely, a non-empty run of bytes after the last newline (or in a
file without one). The writer appends each record and its newline in one ``write`` and reports
success only after ``fsync``, so such bytes were never acknowledged, whatever they hold (a
record's prefix, a whole record lacking its newline, zeros from a crash). :func:`scan_journal`
returns them as :class:`TornTail`; the writer quarantines them (:meth:`JournalWriter.quarantine`)
and a reader leaves them alone.

**Writing.** One writer per journal: an exclusive ``flock`` on ``journal.lock`` (taken without
waiting; :class:`~hypertrain.ledger.errors.JournalLocked` if another holds it), and before each
append the file's size must be what this writer last left (else
:class:`~hypertrain.ledger.errors.JournalChanged`). Each append is ``write`` + ``fsync``; an
append that fails leaves the writer refusing every later one until the journal is reopened.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any, Final

import attrs

from hypertrain.ledger.canonical import canonical_bytes, sha256_hex
from hypertrain.ledger.errors import ChainBreak, JournalChanged, JournalLocked
from hypertrain.ledger.records import (
    ENVELOPE,
    GENESIS_HASH,
    INIT,
    Record,
    RepairRecord,
    decode_body,
    encode_body,
)

__all__ = [
    "JOURNAL_DIR",
    "JOURNAL_FILE",
    "LOCK_FILE",
    "JournalWriter",
    "Scan",
    "ScannedRecord",
    "TornTail",
    "encode_record",
    "journal_path",
    "scan_journal",
]

JOURNAL_DIR: Final = "ledger"
JOURNAL_FILE: Final = "journal.jsonl"
LOCK_FILE: Final = "journal.lock"


def journal_path(state_dir: Path) -> Path:
    """``<state_dir>/ledger/journal.jsonl``."""
    return state_dir / JOURNAL_DIR / JOURNAL_FILE


@attrs.frozen(kw_only=True)
class ScannedRecord:
    """One whole, valid record of the file and where it lies."""

    offset: int
    line: int
    seq: int
    hash: str
    record: Record


@attrs.frozen(kw_only=True)
class TornTail:
    """The unacknowledged bytes after the last newline."""

    offset: int
    data: bytes = attrs.field(repr=False)

    @property
    def sha256(self) -> str:
        return sha256_hex(self.data)

    @property
    def sidecar_name(self) -> str:
        """``journal.torn-<offset>-<sha16>.bin``."""
        return f"journal.torn-{self.offset}-{self.sha256[:16]}.bin"


@attrs.frozen(kw_only=True)
class Scan:
    """A journal read back: its records, where they end, and a torn tail if any."""

    records: tuple[ScannedRecord, ...]
    end: int
    torn: TornTail | None

    @property
    def last_hash(self) -> str:
        return self.records[-1].hash if self.records else GENESIS_HASH

    @property
    def next_seq(self) -> int:
        return len(self.records)


def encode_record(record: Record, seq: int, prev_hash: str) -> tuple[bytes, str]:
    """The line (with its newline) of ``record`` at ``seq`` after ``prev_hash``, and its hash."""
    kind, body = encode_body(record)
    unsigned = {**body, "kind": kind, "seq": seq, "prev_hash": prev_hash}
    digest = sha256_hex(canonical_bytes(unsigned))
    return canonical_bytes({**unsigned, "hash": digest}) + b"\n", digest


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse_line(line: bytes, seq: int, prev_hash: str) -> tuple[str, Record]:
    """The hash and record of one line; ValueError saying what is wrong."""
    try:
        value = json.loads(line.decode("ascii"), parse_constant=_no_constants)
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"not a JSON line ({e})") from None
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    if canonical_bytes(value) != line:
        raise ValueError("not in canonical form")
    missing = [key for key in ENVELOPE if key not in value]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    if value["seq"] != seq or type(value["seq"]) is not int:
        raise ValueError(f"seq is {value['seq']!r}")
    if value["prev_hash"] != prev_hash:
        raise ValueError("prev_hash is not the previous record's hash")
    body = {key: item for key, item in value.items() if key not in ENVELOPE}
    unsigned = {key: item for key, item in value.items() if key != "hash"}
    if value["hash"] != sha256_hex(canonical_bytes(unsigned)):
        raise ValueError("hash does not match the record")
    kind = value["kind"]
    if not isinstance(kind, str):
        raise ValueError("kind is not a string")
    if (kind == INIT) != (seq == 0):
        raise ValueError("the first record, and only the first, must be init")
    return str(value["hash"]), decode_body(kind, body)


def scan_journal(data: bytes, name: str = JOURNAL_FILE) -> Scan:
    """Read a journal's bytes back; ChainBreak at the first damaged record."""
    end = data.rfind(b"\n") + 1
    records: list[ScannedRecord] = []
    prev_hash = GENESIS_HASH
    offset = 0
    for number, line in enumerate(data[:end].split(b"\n")[:-1], start=1):
        seq = number - 1
        try:
            digest, record = _parse_line(line, seq, prev_hash)
        except ValueError as e:
            raise ChainBreak(
                f"{name}: line {number} at byte offset {offset} (seq {seq}): {e}", offset=offset
            ) from None
        records.append(
            ScannedRecord(offset=offset, line=number, seq=seq, hash=digest, record=record)
        )
        prev_hash = digest
        offset += len(line) + 1
    torn = TornTail(offset=end, data=data[end:]) if end < len(data) else None
    return Scan(records=tuple(records), end=end, torn=torn)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class JournalWriter:
    """The one writer of a journal; :meth:`open`, :meth:`resume`, then :meth:`append`."""

    def __init__(self, path: Path, lock_fd: int, fd: int) -> None:
        self.path = path
        self._lock_fd: int | None = lock_fd
        self._fd = fd
        self._size: int | None = None
        self._seq = 0
        self._prev_hash = GENESIS_HASH

    @classmethod
    def open(cls, path: Path) -> JournalWriter:
        """Take the lock beside ``path`` and open it (created, mode 0600, if absent)."""
        if not path.parent.is_dir():
            path.parent.mkdir(parents=True)
            _fsync_dir(path.parent.parent)
        lock_path = path.with_name(LOCK_FILE)
        lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock_fd)
            raise JournalLocked(f"{path}: another writer holds {lock_path}") from None
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
            _fsync_dir(path.parent)
        except BaseException:
            os.close(lock_fd)
            raise
        return cls(path, lock_fd, fd)

    @property
    def seq(self) -> int:
        """The seq the next record gets (the number of records)."""
        return self._seq

    def read(self) -> bytes:
        """The file's bytes as they are now."""
        size = os.fstat(self._fd).st_size
        chunks: list[bytes] = []
        offset = 0
        while offset < size:
            chunk = os.pread(self._fd, size - offset, offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks)

    def resume(self, scan: Scan, size: int) -> None:
        """Continue the chain after ``scan``'s records, made from the file's ``size`` bytes."""
        self._size = size
        self._seq, self._prev_hash = scan.next_seq, scan.last_hash

    def quarantine(self, torn: TornTail) -> RepairRecord:
        """Move ``torn`` to its 0600 sidecar (durably), cut the file at its offset, and return
        the record to append."""
        self._check_size()
        sidecar = self.path.with_name(torn.sidecar_name)
        tmp = sidecar.with_name(f".{sidecar.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            _write_all(fd, torn.data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, sidecar)
        _fsync_dir(self.path.parent)
        self._size = None
        os.ftruncate(self._fd, torn.offset)
        os.fsync(self._fd)
        self._size = torn.offset
        return RepairRecord(
            offset=torn.offset, length=len(torn.data), sha256=torn.sha256, sidecar=sidecar.name
        )

    def append(self, record: Record) -> str:
        """Write and fsync ``record`` as the next line; its hash."""
        self._check_size()
        line, digest = encode_record(record, self._seq, self._prev_hash)
        size, self._size = self._size, None  # a failure below leaves the writer refusing
        _write_all(self._fd, line)
        os.fsync(self._fd)
        assert size is not None
        self._size = size + len(line)
        self._seq += 1
        self._prev_hash = digest
        return digest

    def close(self) -> None:
        """Close the file and release the lock (idempotent)."""
        if self._lock_fd is None:
            return
        self._size = None
        os.close(self._fd)
        os.close(self._lock_fd)
        self._lock_fd = None

    def _check_size(self) -> None:
        if self._lock_fd is None:
            raise JournalChanged(f"{self.path}: the ledger is closed")
        if self._size is None:
            raise JournalChanged(f"{self.path}: an earlier write failed; reopen the ledger")
        actual = os.fstat(self._fd).st_size
        if actual != self._size:
            raise JournalChanged(
                f"{self.path}: size is {actual}, this writer left {self._size}; another writer?"
            )
