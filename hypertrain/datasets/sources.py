"""Where a build's text comes from: files found on disk, in a fixed order, within a byte budget.

A *document* is one text file. A file is text when it holds no NUL byte and decodes as strict
UTF-8; anything else (binaries, Latin-1 test fixtures, unreadable files) is skipped and counted,
never guessed at, so the choice is deterministic. Empty files are skipped too.

Order: the sources in the order given; inside a directory, every regular file below it (symlinks
are not followed) sorted by its relative POSIX path. The budget ``max_bytes`` counts source bytes
(EOS tokens are not counted): documents are taken whole while they fit; the document that crosses
the budget is cut at the last UTF-8 character boundary that fits, and collection stops there.

The default source (:func:`stdlib_sources`) is the running Python's standard library: every
``*.py`` file under ``sysconfig.get_paths()["stdlib"]`` except ``site-packages``,
``dist-packages`` and ``__pycache__`` folders, then the text files (``*.txt``, ``*.rst``) of a
documentation folder if one is installed (``<base_prefix>/share/doc/pythonX.Y`` or
``<base_prefix>/Doc``). Nothing is ever downloaded.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Iterable, Iterator
from pathlib import Path

import attrs

__all__ = ["STDLIB_LABEL", "Collected", "Document", "SourceRoot", "collect", "stdlib_sources"]

STDLIB_LABEL = "stdlib"
"""The display prefix of documents of the default source (``stdlib/json/__init__.py``)."""

_SKIP_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})
_DOC_SUFFIXES = (".txt", ".rst")


@attrs.frozen
class SourceRoot:
    """One source: ``path`` (a file or a folder), shown in manifests as ``label``.

    ``suffixes`` limits which files of a folder are read (empty: all files).
    """

    path: Path
    label: str
    suffixes: tuple[str, ...] = ()


@attrs.frozen
class Document:
    """One document: its display ``name`` and the UTF-8 bytes used (possibly cut)."""

    name: str
    data: bytes


@attrs.frozen
class Collected:
    """The documents of a build, with how many files were skipped as not text."""

    documents: tuple[Document, ...]
    skipped_files: int

    @property
    def n_bytes(self) -> int:
        return sum(len(d.data) for d in self.documents)


def stdlib_sources() -> list[SourceRoot]:
    """The default source: the standard library's ``*.py`` files, then its docs if installed."""
    roots = [SourceRoot(Path(sysconfig.get_paths()["stdlib"]), STDLIB_LABEL, (".py",))]
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    base = Path(sys.base_prefix)
    for docs in (base / "share" / "doc" / version, base / "Doc"):
        if docs.is_dir():
            roots.append(SourceRoot(docs, f"{STDLIB_LABEL}-docs", _DOC_SUFFIXES))
            break
    return roots


def _files(root: SourceRoot) -> Iterator[tuple[str, Path]]:
    """``(display name, path)`` of the files of ``root`` in sorted relative-path order."""
    if not root.path.is_dir():
        yield root.label, root.path
        return
    found: list[tuple[str, Path]] = []
    for folder, dirs, names in os.walk(root.path, followlinks=False):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS]
        for name in names:
            path = Path(folder) / name
            if root.suffixes and not name.endswith(root.suffixes):
                continue
            if path.is_symlink() or not path.is_file():
                continue
            found.append((path.relative_to(root.path).as_posix(), path))
    found.sort(key=lambda item: item[0])
    for rel, path in found:
        yield f"{root.label}/{rel}", path


def _text(path: Path) -> bytes | None:
    """The bytes of ``path`` if it is a non-empty text file (no NUL, strict UTF-8), else None."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if not data or b"\x00" in data:
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return data


def _cut(data: bytes, limit: int) -> bytes:
    """The longest prefix of UTF-8 ``data`` of at most ``limit`` bytes ending on a boundary."""
    return data[:limit].decode("utf-8", "ignore").encode("utf-8")


def collect(roots: Iterable[SourceRoot], max_bytes: int) -> Collected:
    """The documents of ``roots`` in order, up to ``max_bytes`` source bytes (see module doc)."""
    documents: list[Document] = []
    skipped = 0
    left = max_bytes
    for root in roots:
        for name, path in _files(root):
            if left <= 0:
                return Collected(tuple(documents), skipped)
            data = _text(path)
            if data is None:
                skipped += 1
                continue
            if len(data) > left:
                data = _cut(data, left)
                left = 0
                if data:
                    documents.append(Document(name, data))
                continue
            documents.append(Document(name, data))
            left -= len(data)
    return Collected(tuple(documents), skipped)
