"""The layers: only the controller, the agents, the API clients and the dev environment talk to
servers; the roll planning and the builders are pure. Checked on the import graph."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "kcpshard"

# Modules that do I/O; pure layers must import none of them.
IO_MODULES = (
    "kopf",
    "httpx",
    "aiohttp",
    "kubernetes",
    "subprocess",
    "socket",
    "kcpshard.k8s.api",
    "kcpshard.k8s.status",
    "kcpshard.kcp.client",
    "kcpshard.controller",
    "kcpshard.agent",
    "kcpshard.testing",
)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def _offending(path: Path) -> list[str]:
    return sorted(n for n in _imports(path) if any(n == m or n.startswith(m + ".") for m in IO_MODULES))


@pytest.mark.parametrize(
    "module",
    [
        "roll/plan.py",
        "roll/revision.py",
        "k8s/builders.py",
        "api/models.py",
        "api/conditions.py",
        "api/crds.py",
        "api/annotations.py",
        "api/history.py",
        "k8s/duration.py",
        "plugin/render.py",
        "kcp/flags.py",
        "kcp/versions.py",
    ],
)
def test_pure_modules_import_no_io(module: str) -> None:
    assert _offending(PACKAGE / module) == []


def test_only_the_operator_side_layers_reach_the_testing_package() -> None:
    users = [
        p.relative_to(PACKAGE).as_posix()
        for p in PACKAGE.rglob("*.py")
        if "testing" not in p.parts and any(n.startswith("kcpshard.testing") for n in _imports(p))
    ]
    assert users == []


def test_nothing_is_importable_as_operator() -> None:
    assert not (PACKAGE.parent / "__init__.py").exists()
