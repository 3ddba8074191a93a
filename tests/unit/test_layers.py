"""The layers: only the controller, the agents, the API clients and the dev environment talk to
servers; the roll planning and the builders are pure. Within the controller the flow goes one way:
observe (reads only) -> plan (roll/, pure) -> act (handlers that decide nothing) -> status writer.
Checked on the import graph and the source."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
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
    "kcpshard_testkit",
)

# What may only be written by the status writer (and what the act handlers therefore never import).
WRITERS = (
    "kopf",
    "kcpshard.metrics",
    "kcpshard.k8s.status",
    "kcpshard.controller.status_writer",
    "kcpshard.controller.status_changes",
)

# The roll's types: the act handlers may import these and nothing else of the roll.
ROLL_TYPES = ("kcpshard.roll.actions", "kcpshard.roll.observed", "kcpshard.roll.outcomes")

# Client calls that change something on a server.
WRITE_CALLS = {"create", "replace", "patch", "delete", "delete_lease", "delete_workspaces", "probe"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(tree: ast.Module) -> set[ast.AST]:
    """Imports under `if TYPE_CHECKING:`: annotations only, never run."""
    nodes: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            nodes.update(n for body in node.body for n in ast.walk(body))
    return nodes


def _imports(path: Path, *, runtime_only: bool = False) -> set[str]:
    tree = ast.parse(path.read_text())
    skipped = _type_checking_only(tree) if runtime_only else set()
    names: set[str] = set()
    package = _module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else _module_name(path)
    for node in ast.walk(tree):
        if node in skipped:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            module = node.module if not node.level else f"{package}.{node.module}"
            names.add(module)
            # `from kcpshard.roll import plan` imports the module kcpshard.roll.plan
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def _matching(names: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if any(n == m or n.startswith(m + ".") for m in prefixes))


def _offending(path: Path) -> list[str]:
    return _matching(_imports(path), IO_MODULES)


def _product_modules() -> Iterator[Path]:
    return iter(sorted(PACKAGE.rglob("*.py")))


ROLL = sorted(p.relative_to(PACKAGE).as_posix() for p in (PACKAGE / "roll").glob("*.py"))
ACT = sorted(p.relative_to(PACKAGE).as_posix() for p in (PACKAGE / "controller" / "act").glob("*.py"))


@pytest.mark.parametrize(
    "module",
    [
        *ROLL,
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


def test_observing_writes_nothing() -> None:
    path = PACKAGE / "controller" / "observe.py"
    assert (
        _matching(_imports(path), (*WRITERS, "kcpshard.controller.act", "kcpshard.controller.dispatch")) == []
    )
    calls = {
        node.func.attr
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    assert sorted(calls & WRITE_CALLS) == []


@pytest.mark.parametrize("module", ACT)
def test_act_handlers_decide_nothing_and_write_no_status(module: str) -> None:
    imported = _imports(PACKAGE / module)
    roll = _matching(imported, ("kcpshard.roll",))
    assert [n for n in roll if not n.startswith(ROLL_TYPES) and n != "kcpshard.roll"] == []
    assert _matching(imported, WRITERS) == []


@pytest.mark.parametrize("module", [m.rsplit(".", 1)[1] for m in ROLL_TYPES])
def test_the_roll_types_hold_no_rules(module: str) -> None:
    tree = ast.parse((PACKAGE / "roll" / f"{module}.py").read_text())
    functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    assert functions == []


def test_no_import_cycles() -> None:
    graph = {
        _module_name(p): {n for n in _imports(p, runtime_only=True) if n.startswith("kcpshard.")}
        for p in PACKAGE.rglob("*.py")
    }
    graph = {m: {n for n in deps if n in graph and n != m} for m, deps in graph.items()}

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), list(graph[start])
        while todo:
            module = todo.pop()
            if module == goal:
                return True
            if module not in seen:
                seen.add(module)
                todo.extend(graph[module])
        return False

    assert sorted(m for m in graph if reaches(m, m)) == []


def test_no_product_module_imports_the_test_kit() -> None:
    users = [
        p.relative_to(PACKAGE).as_posix()
        for p in _product_modules()
        if any(n.startswith("kcpshard_testkit") for n in _imports(p))
    ]
    assert users == []


MODULE_PATH = re.compile(r"^kcpshard_testkit(\.\w+)*(:\w+)?$")


def test_no_product_module_reaches_the_test_kit_through_a_string() -> None:
    found = {
        (p.relative_to(PACKAGE).as_posix(), node.value)
        for p in _product_modules()
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_PATH.match(node.value)
    }
    assert found == set()


def test_the_product_package_holds_no_test_kit() -> None:
    assert sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name in {"testing", "testkit"}) == []


def test_nothing_is_importable_as_operator() -> None:
    assert not (PACKAGE.parent / "__init__.py").exists()
