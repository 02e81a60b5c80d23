"""Numbered SQL migrations: load them, check their sequence, apply the pending ones.

A migration is a file ``NNNN_name.sql`` (four digits, lowercase name) in the ``migrations``
folder shipped inside this package (or any folder a caller passes, for tests). Promises:

- :func:`load_migrations` returns them ordered by number and refuses a badly named ``.sql`` file,
  two files with one number, a gap, or a sequence that does not start at 1.
- :func:`apply_migrations` records what it applied in ``schema_migrations`` and applies each
  pending migration in its own ``BEGIN IMMEDIATE`` transaction together with its record, so a
  migration is either fully applied and recorded or not at all. Applied ones are skipped (also
  when another process applied them meanwhile). A database that records a version this code does
  not know, or records a known version under another name, is refused before anything changes.
- Migration files hold plain DDL/DML; transaction control (BEGIN, COMMIT, END, ROLLBACK,
  SAVEPOINT, RELEASE) is refused because it would break the one-transaction promise.

This module is plain ``sqlite3``; it imports no Trio and runs wherever the caller runs it.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Sequence
from importlib import resources
from importlib.resources.abc import Traversable

import attrs

from hypertrain.store.errors import MigrationError, SchemaTooNew

__all__ = [
    "Migration",
    "apply_migrations",
    "default_migrations",
    "load_migrations",
    "recorded_version",
    "split_statements",
]

_FILE_NAME = re.compile(r"(?P<version>[0-9]{4})_(?P<name>[a-z0-9_]+)\.sql")
_TRANSACTION_CONTROL = re.compile(r"(BEGIN|COMMIT|END|ROLLBACK|SAVEPOINT|RELEASE)\b", re.IGNORECASE)
_LEADING_COMMENTS = re.compile(r"(\s+|--[^\n]*(\n|$)|/\*.*?\*/)*", re.DOTALL)

_CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL
)
"""


@attrs.frozen
class Migration:
    """One numbered schema change: its number, its name and its SQL text."""

    version: int
    name: str
    sql: str

    @property
    def label(self) -> str:
        """The file name it came from, for messages: ``0001_init``."""
        return f"{self.version:04d}_{self.name}"


def default_migrations() -> Traversable:
    """The migrations folder shipped in this package (package data, read via importlib)."""
    return resources.files("hypertrain.store") / "migrations"


def load_migrations(source: Traversable) -> tuple[Migration, ...]:
    """Read every ``*.sql`` file of ``source`` and return the checked, ordered sequence."""
    found: list[Migration] = []
    for entry in source.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        match = _FILE_NAME.fullmatch(entry.name)
        if match is None:
            raise MigrationError(f"migration file {entry.name!r} is not named NNNN_name.sql")
        sql = entry.read_text(encoding="utf-8")
        migration = Migration(int(match["version"]), match["name"], sql)
        for statement in split_statements(sql):
            if _TRANSACTION_CONTROL.match(statement, _skip_comments(statement)):
                raise MigrationError(f"migration {migration.label} must not control transactions")
        found.append(migration)
    return check_sequence(found)


def check_sequence(migrations: Iterable[Migration]) -> tuple[Migration, ...]:
    """Order ``migrations`` by number; refuse duplicates and any gap in 1, 2, 3, ..."""
    ordered = sorted(migrations, key=lambda m: (m.version, m.name))
    for index, current in enumerate(ordered):
        previous = ordered[index - 1] if index else None
        if previous is not None and previous.version == current.version:
            raise MigrationError(
                f"duplicate migration number {current.version:04d}: "
                f"{previous.label} and {current.label}"
            )
        if current.version != index + 1:
            raise MigrationError(
                f"migration {index + 1:04d} is missing (next found is {current.label})"
            )
    return tuple(ordered)


def split_statements(sql: str) -> list[str]:
    """Split a script into complete statements (semicolons in strings, comments, triggers ok).

    A final statement may omit its semicolon; empty statements (a lone ``;`` after comments)
    are dropped; an incomplete remainder (an open string, a missing parenthesis) is refused.
    """
    statements: list[str] = []
    pieces = sql.split(";")
    buffer = ""
    for piece in pieces[:-1]:
        buffer += piece + ";"
        if sqlite3.complete_statement(buffer):
            if _skip_comments(buffer) < len(buffer) - 1:
                statements.append(buffer.strip())
            buffer = ""
    rest = buffer + pieces[-1]
    if _skip_comments(rest) != len(rest):
        if not sqlite3.complete_statement(rest + ";"):
            raise MigrationError(f"incomplete SQL statement at the end: {rest.strip()[:60]!r}")
        statements.append(rest.strip() + ";")
    return statements


def recorded_version(conn: sqlite3.Connection) -> int:
    """The highest migration number recorded in ``conn`` (0 when none or no table)."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
    ).fetchone()
    if exists is None:
        return 0
    row = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()
    return int(row[0])


def apply_migrations(conn: sqlite3.Connection, migrations: Sequence[Migration], *, now: int) -> int:
    """Apply the pending ``migrations`` to ``conn`` (autocommit mode) and return the version.

    ``now`` (unix seconds from the caller's injected wall clock) is stored as ``applied_at``.
    Raises :class:`SchemaTooNew` or :class:`MigrationError` before changing anything when the
    database's records do not match ``migrations``; a migration whose SQL fails is rolled back
    and reported as :class:`MigrationError` naming it, with the sqlite error as its cause.
    """
    conn.execute(_CREATE_TABLE)
    conn.execute("BEGIN")
    try:
        applied = _check_records(conn, migrations)
    finally:
        conn.execute("COMMIT")
    for migration in migrations:
        if migration.version in applied:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Re-read inside the write lock: another process may have migrated meanwhile.
            if migration.version not in _check_records(conn, migrations):
                _run_one(conn, migration, now)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return len(migrations)


def _check_records(conn: sqlite3.Connection, migrations: Sequence[Migration]) -> set[int]:
    """The recorded versions, after refusing records that ``migrations`` does not explain."""
    known = {m.version: m.name for m in migrations}
    rows = conn.execute("SELECT version, name FROM schema_migrations ORDER BY version").fetchall()
    for version, name in rows:
        if version not in known:
            newest = max(known, default=0)
            raise SchemaTooNew(
                f"the database records schema version {version} ({name!r}) but this code knows "
                f"versions up to {newest}; upgrade hypertrain or use another state directory"
            )
        if known[version] != name:
            raise MigrationError(
                f"the database records migration {version:04d} as {name!r}, "
                f"this code has {known[version]!r}"
            )
    versions = [int(version) for version, _ in rows]
    if versions != list(range(1, len(versions) + 1)):
        raise MigrationError(f"the database records a gapped migration history: {versions}")
    return set(versions)


def _skip_comments(text: str) -> int:
    """The index of the first character of ``text`` that is not whitespace or a comment."""
    match = _LEADING_COMMENTS.match(text)
    return 0 if match is None else match.end()


def _run_one(conn: sqlite3.Connection, migration: Migration, now: int) -> None:
    """Execute one migration's statements and its record inside the open transaction."""
    try:
        for statement in split_statements(migration.sql):
            conn.execute(statement)
        conn.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
            (migration.version, migration.name, now),
        )
    except sqlite3.Error as e:
        raise MigrationError(f"migration {migration.label} failed: {e}") from e
