"""The shell blocks tagged ``doctest`` in docs/*.md are executed, so the docs stay true.

A block opens with a fence line of three backticks followed by ``bash doctest`` (or
``sh doctest``). All blocks of one document run in order in one ``bash -Eeuo pipefail``
process, in a fresh temporary directory that is also ``$HOME``, with the virtualenv's ``bin/``
first on ``PATH`` (so ``hypertrain`` is the console script under test). A failing command fails
the test and names the document, block and line.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_OPEN = re.compile(r"^```(?:bash|sh) doctest\s*$", re.MULTILINE)
DOCS = sorted(d for d in (ROOT / "docs").glob("*.md") if _OPEN.search(d.read_text("utf-8")))
_TIMEOUT_S = 300


def doctest_blocks(text: str) -> list[tuple[int, str]]:
    """(first line number, body) of each doctest block, in order."""
    blocks: list[tuple[int, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if _OPEN.match(lines[i]):
            start = i + 2
            body: list[str] = []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            if i == len(lines):
                raise AssertionError(f"doctest block opened at line {start - 1} never closes")
            blocks.append((start, "\n".join(body)))
        i += 1
    return blocks


def build_script(doc: Path, blocks: list[tuple[int, str]]) -> str:
    parts = [
        "set -Eeuo pipefail",
        "trap 'echo \"doctest failed: $HT_DOC block $HT_BLOCK (starting at line $HT_LINE)"
        ": exit $?\" >&2' ERR",
        f"HT_DOC={doc.name}",
    ]
    for number, (line, body) in enumerate(blocks, start=1):
        parts += [f"HT_BLOCK={number}; HT_LINE={line}", body]
    return "\n".join(parts) + "\n"


def test_block_parser_finds_tagged_blocks_only() -> None:
    text = (
        "x\n```bash doctest\necho 1\necho 2\n```\n```bash\nfalse\n```\n```sh doctest\ntrue\n```\n"
    )
    assert doctest_blocks(text) == [(3, "echo 1\necho 2"), (10, "true")]


def test_failing_block_fails_and_names_the_line(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    script = build_script(doc, [(3, "true"), (9, "false")])
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode != 0
    assert "x.md block 2 (starting at line 9)" in done.stderr


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_doc_shell_blocks(doc: Path, tmp_path: Path) -> None:
    blocks = doctest_blocks(doc.read_text(encoding="utf-8"))
    env = {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "HYPERTRAIN_REPO": str(ROOT),
    }
    done = subprocess.run(
        ["bash", "-c", build_script(doc, blocks)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"{done.stderr}\n--- stdout ---\n{done.stdout}"
