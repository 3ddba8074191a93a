"""The layers: only the controller, the agents, the API clients and the dev environment talk to
servers; the roll planning and the builders are pure. Within the controller the flow goes one way:
observe (reads only) -> plan (roll/, pure) -> act (handlers that decide nothing) -> status writer.
Checked on the import graph and the source.

Which modules are pure is found by rule, not listed: a module that does no I/O itself (imports no I/O
library, has no async code) must reach none through the modules it imports, and the plan (roll/) and the
models (api/) must be such modules."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "kcpshard"

# Libraries that talk to something: a module importing one does I/O.
IO_LIBRARIES = (
    "kopf",
    "kubernetes",
    "httpx",
    "aiohttp",
    "asyncio",
    "subprocess",
    "socket",
    "ssl",
    "kcpshard_testkit",
)
# The layers that must be pure, by package.
PURE_PACKAGES = ("kcpshard.roll", "kcpshard.api")

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


def _product_modules() -> Iterator[Path]:
    return iter(sorted(PACKAGE.rglob("*.py")))


MODULES = {_module_name(p): p for p in _product_modules()}


def _does_io(path: Path) -> bool:
    """It imports an I/O library, or it awaits (async code waits on something outside)."""
    tree = ast.parse(path.read_text())
    awaits = any(isinstance(node, ast.AsyncFunctionDef) for node in ast.walk(tree))
    return awaits or bool(_matching(_imports(path, runtime_only=True), IO_LIBRARIES))


def _graph(*, runtime_only: bool) -> dict[str, set[str]]:
    """Product module -> the product modules it imports."""
    graph = {m: set(_imports(p, runtime_only=runtime_only)) for m, p in MODULES.items()}
    return {m: {n for n in deps if n in MODULES and n != m} for m, deps in graph.items()}


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph[module])
    return seen


# Found by rule: every module that does no I/O itself (an entry point, `__main__`, runs the program).
PURE = sorted(m for m, p in MODULES.items() if not _does_io(p) and p.name != "__main__.py")


ACT = sorted(p.relative_to(PACKAGE).as_posix() for p in (PACKAGE / "controller" / "act").glob("*.py"))


@pytest.mark.parametrize("module", PURE)
def test_a_module_without_io_reaches_none_through_its_imports(module: str) -> None:
    """I/O shows where it enters: a module that does none itself imports only modules that do none."""
    graph = _graph(runtime_only=True)
    assert sorted(m for m in _reachable(graph, module) if _does_io(MODULES[m])) == []


def test_the_plan_and_the_models_are_pure() -> None:
    layers = [m for m in MODULES if any(m == p or m.startswith(p + ".") for p in PURE_PACKAGES)]
    assert len(layers) > 10
    assert sorted(set(layers) - set(PURE)) == []


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


@pytest.mark.parametrize("runtime_only", [True, False], ids=["runtime", "with-type-checking"])
def test_no_import_cycles(runtime_only: bool) -> None:
    """Not even through imports for annotations only (`if TYPE_CHECKING:`): two modules that need each
    other's types are one concern, or a third module's."""
    graph = _graph(runtime_only=runtime_only)
    assert sorted(m for m in graph if m in _reachable(graph, m)) == []


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


def test_no_product_module_is_over_400_lines() -> None:
    """Small modules: one over 400 lines holds more than one thing and is split along its seams."""
    lengths = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    long = {name: n for name, n in lengths.items() if n > 400}
    assert long == {}
