"""Numbered migrations: applied in order, once, atomically; bad sequences and newer DBs refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from hypertrain.store import MigrationError, SchemaTooNew, open_database
from hypertrain.store.migrations import (
    default_migrations,
    load_migrations,
    recorded_version,
    split_statements,
)
from nurseries import FixedClock


def write_migrations(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(exist_ok=True)
    for name, sql in files.items():
        (folder / name).write_text(sql, encoding="utf-8")
    return folder


def records(path: Path) -> list[tuple[int, str, int]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT * FROM schema_migrations ORDER BY version").fetchall()


def tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {name for (name,) in rows}


async def test_default_migrations_are_applied_and_recorded_once(tmp_path: Path) -> None:
    shipped = load_migrations(default_migrations())
    path = tmp_path / "state.db"
    async with open_database(path, wall_clock=FixedClock(1000.0)) as db:
        assert db.statistics().schema_version == shipped[-1].version
    expected = [(m.version, m.name, 1000) for m in shipped]
    assert records(path) == expected
    assert {"schema_migrations", "meta", "objects"} <= tables(path)
    async with open_database(path, wall_clock=FixedClock(2000.0)) as db:
        assert db.statistics().schema_version == shipped[-1].version
    assert records(path) == expected


def test_shipped_migrations_load_as_package_data() -> None:
    migrations = load_migrations(default_migrations())
    assert migrations[0].label == "0001_init"
    assert [m.version for m in migrations] == list(range(1, len(migrations) + 1))


async def test_migrations_apply_in_numeric_order_and_new_ones_on_reopen(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    # Created in reverse so directory order cannot stand in for numeric order.
    write_migrations(folder, {"0002_child.sql": "CREATE TABLE child (p REFERENCES parent(id));"})
    write_migrations(folder, {"0001_parent.sql": "CREATE TABLE parent (id INTEGER PRIMARY KEY);"})
    path = tmp_path / "state.db"
    async with open_database(path, migrations=folder, wall_clock=FixedClock(1.0)):
        pass
    write_migrations(folder, {"0003_more.sql": "ALTER TABLE child ADD COLUMN note TEXT;"})
    async with open_database(path, migrations=folder, wall_clock=FixedClock(2.0)) as db:
        assert db.statistics().schema_version == 3
    assert records(path) == [(1, "parent", 1), (2, "child", 1), (3, "more", 2)]


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"0001_a.sql": "", "0003_c.sql": ""}, "migration 0002 is missing"),
        ({"0002_b.sql": ""}, "migration 0001 is missing"),
        ({"0001_a.sql": "", "0002_b.sql": "", "0002_c.sql": ""}, "duplicate migration number"),
        ({"1_a.sql": ""}, "is not named NNNN_name.sql"),
        ({"0001_Upper.sql": ""}, "is not named NNNN_name.sql"),
        ({"0001_a.sql": "BEGIN; CREATE TABLE t (x);"}, "must not control transactions"),
        ({"0001_a.sql": "CREATE TABLE t (x); -- note\n COMMIT;"}, "must not control"),
        ({"0001_a.sql": "CREATE TABLE t (x); INSERT INTO t VALUES ('"}, "incomplete SQL"),
    ],
)
async def test_bad_migration_sets_are_refused_before_any_change(
    tmp_path: Path, files: dict[str, str], message: str
) -> None:
    folder = write_migrations(tmp_path / "m", files)
    path = tmp_path / "state.db"
    with pytest.raises(MigrationError, match=message):
        async with open_database(path, migrations=folder):
            pass
    assert tables(path) <= {"schema_migrations"}


async def test_database_newer_than_the_code_is_refused(tmp_path: Path) -> None:
    folder = write_migrations(tmp_path / "m", {"0001_a.sql": "CREATE TABLE a (x);"})
    newer = write_migrations(tmp_path / "n", {"0001_a.sql": "CREATE TABLE a (x);"})
    write_migrations(newer, {"0002_b.sql": "CREATE TABLE b (x);"})
    path = tmp_path / "state.db"
    async with open_database(path, migrations=newer):
        pass
    with pytest.raises(SchemaTooNew, match="schema version 2"):
        async with open_database(path, migrations=folder):
            pass
    assert [version for version, _, _ in records(path)] == [1, 2]


async def test_a_renamed_migration_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    first = write_migrations(tmp_path / "m", {"0001_a.sql": "CREATE TABLE a (x);"})
    async with open_database(path, migrations=first):
        pass
    renamed = write_migrations(tmp_path / "n", {"0001_other.sql": "CREATE TABLE a (x);"})
    with pytest.raises(MigrationError, match="records migration 0001 as 'a'"):
        async with open_database(path, migrations=renamed):
            pass


async def test_a_failing_migration_is_rolled_back_whole_and_named(tmp_path: Path) -> None:
    folder = write_migrations(tmp_path / "m", {"0001_a.sql": "CREATE TABLE a (x);"})
    broken = "CREATE TABLE b (x);\nINSERT INTO a VALUES (1);\nINSERT INTO missing VALUES (1);"
    write_migrations(folder, {"0002_b.sql": broken})
    path = tmp_path / "state.db"
    with pytest.raises(MigrationError, match="0002_b failed") as caught:
        async with open_database(path, migrations=folder):
            pass
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
    assert [version for version, _, _ in records(path)] == [1]
    assert "b" not in tables(path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM a").fetchone() == (0,)
        assert recorded_version(conn) == 1
    write_migrations(folder, {"0002_b.sql": "CREATE TABLE b (x);\nINSERT INTO a VALUES (1);"})
    async with open_database(path, migrations=folder) as db:
        assert db.statistics().schema_version == 2


def test_split_statements_respects_strings_comments_and_triggers() -> None:
    sql = """
    -- a comment; with a semicolon
    CREATE TABLE t (x TEXT DEFAULT ';');
    /* block; comment */ INSERT INTO t VALUES ('a;b'); INSERT INTO t VALUES ('c');
    CREATE TRIGGER tr AFTER INSERT ON t BEGIN
        UPDATE t SET x = x || ';' WHERE rowid = new.rowid;
        DELETE FROM t WHERE x = '';
    END;
    -- trailing comment
    """
    statements = split_statements(sql + "INSERT INTO t VALUES ('e')")
    assert len(statements) == 5
    conn = sqlite3.connect(":memory:")
    for statement in statements:
        conn.execute(statement)
    conn.execute("INSERT INTO t VALUES ('d')")
    assert conn.execute("SELECT x FROM t ORDER BY rowid").fetchall() == [
        ("a;b",),
        ("c",),
        ("e;",),
        ("d;",),
    ]
