"""The Argo CD health checks, run by Argo CD's own code the way an install runs them: every case of each
health_test.yaml (objects recorded from real rolls) through `hack/tools/argocd-lua`, which reads the
installed ConfigMap `deploy/argocd/argocd-cm.yaml` with Argo CD's settings manager (util/settings) and
computes health as its application controller does (gitops-engine's GetResourceHealth over util/lua:
gopher-lua, Lua 5.1, with the standard libraries beyond base, table and a safe os opened only by
`resource.customizations.useOpenLibs.<group>_<Kind>`).

`make tools` builds argocd-lua (hack/tools/build.sh) with the other real parts; without it these tests fail.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kcpshard.plugin import render
from kcpshard_testkit import tools

REPO = Path(__file__).resolve().parents[2]
ARGOCD = REPO / "deploy" / "argocd"
INSTALLED_CM = ARGOCD / "argocd-cm.yaml"
CUSTOMIZATIONS = ARGOCD / "resource_customizations"
KINDS = sorted(p.parent for p in CUSTOMIZATIONS.glob("*/*/health.lua"))
OPEN_LIBS_KEY = "resource.customizations.useOpenLibs."


@pytest.fixture(scope="module")
def argocd_lua() -> Path:
    try:
        return tools.tool("argocd-lua")
    except tools.ToolMissing as missing:
        pytest.fail(str(missing))


def run(argocd_lua: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(argocd_lua), *map(str, args)], capture_output=True, text=True, timeout=120)


def run_cases(argocd_lua: Path, cm: Path) -> dict[str, dict[str, Any]]:
    """Every health_test.yaml case, as Argo CD computes it with the overrides of this ConfigMap."""
    done = run(argocd_lua, "-cm", cm, *(folder / "health_test.yaml" for folder in KINDS))
    assert done.returncode in (0, 1), done.stderr  # 1: some case does not match, which the tests name
    return {r["case"]: r for r in json.loads(done.stdout)}


def write_cm(path: Path, cm: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(cm, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def installed(argocd_lua: Path) -> dict[str, dict[str, Any]]:
    return run_cases(argocd_lua, INSTALLED_CM)


@pytest.fixture(scope="module")
def without_open_libs(
    argocd_lua: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, Any]]:
    """What an admin gets who merges only the health keys (or keeps the libraries closed)."""
    cm = yaml.safe_load(INSTALLED_CM.read_text())
    cm["data"] = {k: v for k, v in cm["data"].items() if not k.startswith(OPEN_LIBS_KEY)}
    return run_cases(argocd_lua, write_cm(tmp_path_factory.mktemp("cm") / "argocd-cm.yaml", cm))


def _cases() -> list[Any]:
    cases = []
    for folder in KINDS:
        for case in yaml.safe_load((folder / "health_test.yaml").read_text())["tests"]:
            cases.append(
                pytest.param(
                    f"{folder.name}/{case['inputPath']}",
                    case["healthStatus"],
                    id=folder.name + "/" + Path(case["inputPath"]).stem,
                )
            )
    return cases


def test_every_kind_has_its_test_cases() -> None:
    assert [f"{p.parent.name}/{p.name}" for p in KINDS] == ["kcpshard.dev/KcpShard", "kcpshard.dev/KcpSlot"]
    for folder in KINDS:
        cases = yaml.safe_load((folder / "health_test.yaml").read_text())["tests"]
        statuses = {case["healthStatus"]["status"] for case in cases}
        assert statuses == {"Healthy", "Progressing", "Suspended", "Degraded"}, folder
        listed = {case["inputPath"] for case in cases}
        on_disk = {f"testdata/{p.name}" for p in (folder / "testdata").glob("*.yaml")}
        assert listed == on_disk, folder


def test_argocd_cm_carries_the_scripts_unchanged() -> None:
    cm = yaml.safe_load(INSTALLED_CM.read_text())
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["name"] == "argocd-cm"
    expected = {}
    for folder in KINDS:
        key = f"{folder.parent.name}_{folder.name}"
        expected[f"{OPEN_LIBS_KEY}{key}"] = "true"
        expected[f"resource.customizations.health.{key}"] = (folder / "health.lua").read_text()
    assert cm["data"] == expected


@pytest.mark.parametrize(("case", "expected"), _cases())
def test_health_case_in_argo_cd(
    installed: dict[str, dict[str, Any]], case: str, expected: dict[str, str]
) -> None:
    got = installed[case]["got"]
    assert {"status": got["status"], "message": got["message"]} == expected
    assert got["openLibs"] is True  # the override came from the installed keys, useOpenLibs included


@pytest.mark.parametrize(("case", "expected"), _cases())
def test_health_case_in_argo_cd_without_open_libs(
    without_open_libs: dict[str, dict[str, Any]], case: str, expected: dict[str, str]
) -> None:
    got = without_open_libs[case]["got"]
    assert {"status": got["status"], "message": got["message"]} == expected
    assert got["openLibs"] is False


def test_argo_cd_gives_a_check_from_argocd_cm_no_string_library(argocd_lua: Path, tmp_path: Path) -> None:
    """Why the checks keep to the base library: the bug this harness is here to catch (string.format made
    a stale shard and an exited slot Unknown when argocd-cm had no useOpenLibs key)."""
    shard = yaml.safe_load(
        (
            CUSTOMIZATIONS / "kcpshard.dev" / "KcpShard" / "testdata" / "progressing_staleGeneration.yaml"
        ).read_text()
    )
    obj = tmp_path / "shard.yaml"
    obj.write_text(yaml.safe_dump(shard))
    cm = yaml.safe_load(INSTALLED_CM.read_text())
    cm["data"] = {
        "resource.customizations.health.kcpshard.dev_KcpShard": (
            'return {status = "Progressing",\n'
            '        message = string.format("generation %d", obj.metadata.generation)}'
        )
    }
    closed = run(argocd_lua, "-cm", write_cm(tmp_path / "closed.yaml", cm), "-object", obj)
    assert closed.returncode == 0, closed.stderr
    assert json.loads(closed.stdout) == {
        "status": "Unknown",
        "message": "<string>:2: attempt to index a non-table object(nil) with key 'format'",
        "openLibs": False,
    }
    cm["data"]["resource.customizations.useOpenLibs.kcpshard.dev_KcpShard"] = "true"
    opened = run(argocd_lua, "-cm", write_cm(tmp_path / "open.yaml", cm), "-object", obj)
    assert opened.returncode == 0, opened.stderr
    assert json.loads(opened.stdout) == {"status": "Progressing", "message": "generation 2", "openLibs": True}


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
