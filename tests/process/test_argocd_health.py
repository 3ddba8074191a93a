"""The Argo CD health checks, run as Argo CD runs them: each case of each health_test.yaml by a real
Lua interpreter, with `obj` set to the testdata object (recorded from real rolls) as a Lua table.

Argo CD embeds gopher-lua (Lua 5.1); the scripts keep to what 5.1 and 5.4 share.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kcpshard.plugin import render

REPO = Path(__file__).resolve().parents[2]
ARGOCD = REPO / "deploy" / "argocd"
CUSTOMIZATIONS = ARGOCD / "resource_customizations"
KINDS = sorted(p.parent for p in CUSTOMIZATIONS.glob("*/*/health.lua"))
LUA = shutil.which("lua5.4") or shutil.which("lua")


def lua_value(value: Any) -> str:
    """A Lua expression for a JSON-like value (nil for null, as Argo CD passes it)."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else "0/0"
    if isinstance(value, str):
        # a JSON string is a valid Lua string literal except for \u escapes: write those as UTF-8 bytes
        escaped = "".join(ch if ord(ch) >= 0x20 and ch not in '"\\' else f"\\{ord(ch):03d}" for ch in value)
        return f'"{escaped}"'
    if isinstance(value, list):
        return "{" + ", ".join(lua_value(v) for v in value) + "}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"[{lua_value(str(k))}] = {lua_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no Lua form for {type(value).__name__}")


def run_health(script: Path, obj: dict[str, Any]) -> dict[str, str]:
    if LUA is None:
        pytest.fail("no Lua interpreter: install the Debian package lua5.4 (hack/bootstrap.sh does)")
    program = (
        f"obj = {lua_value(obj)}\n"
        f"local hs = dofile({lua_value(str(script))})\n"
        'io.write(string.format("%s\\n%s", tostring(hs.status), tostring(hs.message or "")))\n'
    )
    done = subprocess.run([LUA, "-"], input=program, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    status, _, message = done.stdout.partition("\n")
    return {"status": status, "message": message}


def _cases() -> list[Any]:
    cases = []
    for folder in KINDS:
        for case in yaml.safe_load((folder / "health_test.yaml").read_text())["tests"]:
            ident = f"{folder.name}/{Path(case['inputPath']).stem}"
            cases.append(pytest.param(folder, case, id=ident))
    return cases


def test_lua_values_round_trip_through_the_interpreter() -> None:
    if LUA is None:
        pytest.fail("no Lua interpreter: install the Debian package lua5.4 (hack/bootstrap.sh does)")
    value = {"a": [1, 2.5, 'x"y\\z\n', True], "gone": None, "é": {}}
    program = (
        f"local v = {lua_value(value)}\n"
        'io.write(v.a[1] + v.a[2], "|", v.a[3], "|", #v.a, "|", tostring(v.a[4]), "|", tostring(v.gone))'
    )
    out = subprocess.run([LUA, "-"], input=program, capture_output=True, text=True, timeout=30).stdout
    assert out == '3.5|x"y\\z\n|4|true|nil'


def test_every_kind_has_its_test_cases() -> None:
    assert [f"{p.parent.name}/{p.name}" for p in KINDS] == ["kcpshard.dev/KcpShard", "kcpshard.dev/KcpSlot"]
    for folder in KINDS:
        cases = yaml.safe_load((folder / "health_test.yaml").read_text())["tests"]
        statuses = {case["healthStatus"]["status"] for case in cases}
        assert statuses == {"Healthy", "Progressing", "Suspended", "Degraded"}, folder
        listed = {case["inputPath"] for case in cases}
        on_disk = {f"testdata/{p.name}" for p in (folder / "testdata").glob("*.yaml")}
        assert listed == on_disk, folder


@pytest.mark.parametrize(("folder", "case"), _cases())
def test_health_case(folder: Path, case: dict[str, Any]) -> None:
    obj = yaml.safe_load((folder / case["inputPath"]).read_text())
    got = run_health(folder / "health.lua", obj)
    assert got == case["healthStatus"], json.dumps(got)


def test_argocd_cm_carries_the_scripts_unchanged() -> None:
    cm = yaml.safe_load((ARGOCD / "argocd-cm.yaml").read_text())
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["name"] == "argocd-cm"
    expected = {
        f"resource.customizations.health.{folder.parent.name}_{folder.name}": (
            folder / "health.lua"
        ).read_text()
        for folder in KINDS
    }
    assert cm["data"] == expected


ARGO_PHASE = {
    render.Phase.HEALTHY: "Healthy",
    render.Phase.PROGRESSING: "Progressing",
    render.Phase.PAUSED: "Suspended",
    render.Phase.DEGRADED: "Degraded",
}


def _shard_cases() -> list[Any]:
    folder = CUSTOMIZATIONS / "kcpshard.dev" / "KcpShard"
    cases = yaml.safe_load((folder / "health_test.yaml").read_text())["tests"]
    return [
        pytest.param(folder / c["inputPath"], c["healthStatus"], id=Path(c["inputPath"]).stem) for c in cases
    ]


@pytest.mark.parametrize(("path", "expected"), _shard_cases())
def test_kubectl_kcpshard_judges_as_argocd_does(path: Path, expected: dict[str, str]) -> None:
    phase, message = render.phase(yaml.safe_load(path.read_text()))
    assert {"status": ARGO_PHASE[phase], "message": message} == expected
