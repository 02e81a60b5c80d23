"""The rules of the house (DESIGN.md section 2, STYLE items 21-22), as tests.

- the coordinator holds its four rooms and the few shared modules, nothing else;
- only ``hypertrain/coordinator/web/`` imports quart or quart-trio;
- the pure parts import no trio, quart or httpx, neither directly nor through the hypertrain
  modules they import (followed statically: the modules named, not the side effects of
  importing a package; ``if TYPE_CHECKING:`` imports never run and do not count);
- no package imports another package's private module (a name starting with ``_``).

Each rule is a function of a source tree, so the tests below also run it on a small tree
that breaks it and check that it says so.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

COORDINATOR_TOP = frozenset(
    {
        "__init__.py",
        "context.py",
        "settings.py",
        "tokens.py",
        "events.py",
        "computehub.py",
        "metrics.py",
        "metagraph.py",
        "web",
        "flows",
        "tables",
        "services",
    }
)
QUART = ("quart", "quart_trio")
IO_STACK = ("trio", "quart", "quart_trio", "httpx")
PURE = (
    "hypertrain/protocol",
    "hypertrain/rounds",
    "hypertrain/compute",
    "hypertrain/trainer",
    "hypertrain/ledger",
    "hypertrain/aggregator/merge.py",
    "hypertrain/aggregator/exact.py",
    "hypertrain/aggregator/rollback.py",
    "hypertrain/aggregator/checkpoint.py",
    "hypertrain/aggregator/checkpoint_verify.py",
    "hypertrain/aggregator/checkpoint_replay.py",
    "hypertrain/auditor/errors.py",
    "hypertrain/auditor/job.py",
    "hypertrain/auditor/checks.py",
    "hypertrain/auditor/verdict.py",
    "hypertrain/auditor/replayer.py",
    "hypertrain/coordinator/flows",
    "hypertrain/coordinator/tables",
)
WEB = "hypertrain/coordinator/web"


def _modules(root: Path, *parts: str) -> Iterator[Path]:
    for part in parts:
        path = root / part
        if path.is_file():
            yield path
        else:
            yield from sorted(path.rglob("*.py"))


def _typing_only(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return isinstance(test, ast.Name | ast.Attribute) and ast.unparse(test).endswith(
        "TYPE_CHECKING"
    )


def _imports(path: Path, *, submodules: bool = False, typing: bool = True) -> tuple[str, ...]:
    """The absolute module names ``path`` imports. ``submodules``: ``from a import b`` also
    gives ``a.b`` (``b`` may be a module); ``typing=False`` skips ``if TYPE_CHECKING:``
    blocks (they never run). Cached: the pure-parts walk reaches each module from every
    start (parsing them anew each time cost it 20 s of CPU)."""
    return _parsed_imports(path, submodules, typing)


@functools.cache
def _parsed_imports(path: Path, submodules: bool, typing: bool) -> tuple[str, ...]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: list[str] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            if submodules:
                names += [f"{node.module}.{alias.name}" for alias in node.names]
        if not typing and _typing_only(node):
            assert isinstance(node, ast.If)
            todo += node.orelse
            continue
        todo += ast.iter_child_nodes(node)
    return tuple(names)


def _top(name: str) -> str:
    return name.split(".")[0]


@functools.cache
def _source_of(root: Path, module: str) -> Path | None:
    """The file of a hypertrain or nurseries module under ``root``, if it is one."""
    if _top(module) not in ("hypertrain", "nurseries"):
        return None
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _rel(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def stray_coordinator_entries(root: Path) -> list[str]:
    """What ``hypertrain/coordinator/`` holds beyond its rooms and shared modules."""
    found = (root / "hypertrain/coordinator").iterdir()
    return sorted(
        p.name for p in found if p.name != "__pycache__" and p.name not in COORDINATOR_TOP
    )


def quart_outside_web(root: Path) -> list[str]:
    """``path: module`` for every quart import outside ``coordinator/web/``."""
    offenders = []
    for path in _modules(root, "hypertrain", "nurseries"):
        if _rel(root, path).startswith(f"{WEB}/"):
            continue
        offenders += [f"{_rel(root, path)}: {n}" for n in _imports(path) if _top(n) in QUART]
    return sorted(set(offenders))


def io_in_pure_parts(root: Path) -> list[str]:
    """``path: chain`` for every pure module that reaches trio, quart or httpx."""
    offenders = []
    for start in _modules(root, *PURE):
        seen: set[Path] = set()
        stack: list[tuple[Path, tuple[str, ...]]] = [(start, ())]
        while stack:
            path, chain = stack.pop()
            if path in seen:
                continue
            seen.add(path)
            for name in _imports(path, submodules=True, typing=False):
                if _top(name) in IO_STACK:
                    offenders.append(f"{_rel(root, start)}: {' -> '.join([*chain, name])}")
                    continue
                source = _source_of(root, name)
                if source is not None and source not in seen:
                    stack.append((source, (*chain, name)))
    return sorted(set(offenders))


def _package_of(root: Path, path: Path) -> str:
    return ".".join(path.relative_to(root).parent.parts)


def private_imports(root: Path) -> list[str]:
    """``path: module`` for every import of a private module of another package."""
    offenders = []
    for path in _modules(root, "hypertrain", "nurseries"):
        own = _package_of(root, path)
        for name in _imports(path, submodules=True):
            parts = name.split(".")
            private = [
                i for i, p in enumerate(parts) if p.startswith("_") and not p.startswith("__")
            ]
            if not private or _source_of(root, ".".join(parts[: private[0] + 1])) is None:
                continue
            owner = ".".join(parts[: private[0]])
            if own != owner and not own.startswith(f"{owner}."):
                offenders.append(f"{_rel(root, path)}: {name}")
    return sorted(set(offenders))


def test_the_coordinator_holds_its_rooms_and_nothing_else() -> None:
    assert stray_coordinator_entries(ROOT) == []
    for room in ("web", "flows", "tables", "services"):
        assert (ROOT / "hypertrain/coordinator" / room / "__init__.py").is_file(), room


def test_only_the_web_room_imports_quart() -> None:
    assert quart_outside_web(ROOT) == []
    assert any(_top(n) in QUART for n in _imports(ROOT / WEB / "app.py"))


def test_the_pure_parts_reach_no_trio_quart_or_httpx() -> None:
    assert io_in_pure_parts(ROOT) == []


def test_no_package_imports_another_packages_private_module() -> None:
    assert private_imports(ROOT) == []


# The rules themselves, on a tree that breaks each of them.


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


@pytest.fixture
def broken(tmp_path: Path) -> Path:
    return _write(
        tmp_path,
        {
            "hypertrain/__init__.py": "",
            "hypertrain/coordinator/__init__.py": "",
            "hypertrain/coordinator/routes_x.py": "from quart import request\n",
            "hypertrain/coordinator/web/__init__.py": "",
            "hypertrain/coordinator/web/ok.py": "import quart_trio\n",
            "hypertrain/coordinator/flows/__init__.py": "",
            "hypertrain/coordinator/flows/f.py": "from hypertrain.coordinator.helper import x\n",
            "hypertrain/coordinator/helper.py": "import trio\nx = 1\n",
            "hypertrain/coordinator/tables/typed.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import trio\n"
            ),
            "hypertrain/protocol/__init__.py": "",
            "hypertrain/protocol/p.py": "from hypertrain.cli import _common\n",
            "hypertrain/cli/__init__.py": "",
            "hypertrain/cli/_common.py": "",
            "hypertrain/cli/main.py": "from hypertrain.cli._common import y\n",
            "hypertrain/rounds/__init__.py": "",
            "hypertrain/compute/__init__.py": "",
            "hypertrain/trainer/__init__.py": "",
            "hypertrain/coordinator/tables/__init__.py": "import httpx\n",
            "nurseries/__init__.py": "",
        },
    )


def test_each_rule_names_what_breaks_it(broken: Path) -> None:
    assert stray_coordinator_entries(broken) == ["helper.py", "routes_x.py"]
    assert quart_outside_web(broken) == ["hypertrain/coordinator/routes_x.py: quart"]
    assert io_in_pure_parts(broken) == [
        "hypertrain/coordinator/flows/f.py: hypertrain.coordinator.helper -> trio",
        "hypertrain/coordinator/tables/__init__.py: httpx",
    ]
    # The cli package may use its own private module; protocol may not.
    assert private_imports(broken) == ["hypertrain/protocol/p.py: hypertrain.cli._common"]
