"""The repository layout and the package boundaries DESIGN.md section 2 promises."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_nurseries_import_nothing_from_hypertrain() -> None:
    offenders = []
    for path in sorted((ROOT / "nurseries").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [
                f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] == "hypertrain"
            ]
    assert offenders == []


def test_top_level_layout() -> None:
    for name in ("hypertrain", "nurseries", "tests", "bin", "config", "docs", "pyproject.toml"):
        assert (ROOT / name).exists(), name


@pytest.mark.parametrize(
    "package",
    [
        "nurseries",
        "nurseries.testing",
        "hypertrain.store",
        "hypertrain.protocol",
        "hypertrain.ledger",
    ],
)
def test_public_surface_resolves(package: str) -> None:
    module = importlib.import_module(package)
    exported = module.__all__
    assert len(set(exported)) == len(exported)
    missing = [name for name in exported if not hasattr(module, name)]
    assert missing == []
