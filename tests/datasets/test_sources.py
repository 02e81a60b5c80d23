"""Which files a build reads, in which order, and how the byte budget cuts them."""

from __future__ import annotations

import sysconfig
from pathlib import Path

from hypertrain.datasets import SourceRoot, collect, stdlib_sources


def _tree(root: Path) -> None:
    (root / "b").mkdir(parents=True)
    (root / "b" / "z.txt").write_text("zzz")
    (root / "a.txt").write_text("héllo")
    (root / "b" / "bin.dat").write_bytes(b"ab\x00cd")
    (root / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (root / "empty.txt").write_bytes(b"")


def test_folder_files_in_sorted_relative_order_text_only(tmp_path: Path) -> None:
    _tree(tmp_path / "src")
    got = collect([SourceRoot(tmp_path / "src", "src")], 1000)
    assert [d.name for d in got.documents] == ["src/a.txt", "src/b/z.txt"]
    assert got.documents[0].data == "héllo".encode()
    assert got.skipped_files == 3  # NUL byte, not UTF-8, empty


def test_budget_cuts_at_a_character_boundary_and_stops(tmp_path: Path) -> None:
    _tree(tmp_path / "src")
    got = collect([SourceRoot(tmp_path / "src", "src")], 2)  # "h" + half of "é"
    assert [d.data for d in got.documents] == [b"h"]
    got = collect([SourceRoot(tmp_path / "src", "src")], 8)  # a.txt is 6 bytes
    assert [d.data for d in got.documents] == ["héllo".encode(), b"zz"]
    assert got.n_bytes == 8


def test_file_source_and_order_of_roots(tmp_path: Path) -> None:
    _tree(tmp_path / "src")
    one = SourceRoot(tmp_path / "src" / "b" / "z.txt", "z")
    got = collect([one, SourceRoot(tmp_path / "src", "src")], 1000)
    assert [d.name for d in got.documents] == ["z", "src/a.txt", "src/b/z.txt"]


def test_default_source_is_the_stdlib_without_site_packages() -> None:
    roots = stdlib_sources()
    assert roots[0].path == Path(sysconfig.get_paths()["stdlib"])
    got = collect(roots, 300_000)
    names = [d.name for d in got.documents]
    assert names[0].startswith("stdlib/")
    assert names == sorted(names)
    assert all(n.endswith(".py") and "site-packages" not in n for n in names)
    assert got.n_bytes == 300_000
