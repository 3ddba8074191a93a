"""The shell scripts parse (`bash -n`) and pass shellcheck; the kind end-to-end script applies the
project's own manifests (deploy/, examples/), which exist and build."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kcpshard.k8s.builders import DEFAULT_IMAGE

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(
    [*(REPO / "hack").glob("*.sh"), *(REPO / "hack" / "tools").glob("*.sh"), REPO / ".ci" / "run"]
)
KIND_E2E = REPO / "hack" / "kind-e2e.sh"
ROLL_SCENARIO = REPO / "hack" / "roll-scenario.sh"  # kind-e2e.sh's roll and checks
KUBECTL = Path(sys.executable).parent / "kubectl"


def test_the_scripts_are_found() -> None:
    assert {p.name for p in SCRIPTS} >= {"bootstrap.sh", "kind-e2e.sh"}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_bash_parses(script: Path) -> None:
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_shellcheck(script: Path) -> None:
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.fail("shellcheck is not installed: apt-get install shellcheck (hack/bootstrap.sh does)")
    done = subprocess.run(
        [shellcheck, "-x", str(script)], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _applied_paths(text: str) -> set[str]:
    """Paths the script hands to `kubectl apply -k|-f` and `kubectl patch --local -f`."""
    return set(re.findall(r"kubectl (?:apply|patch --local) (?:-k|-f) ((?:deploy|examples)/[\w./-]+)", text))


def test_kind_e2e_applies_the_projects_own_manifests() -> None:
    text = KIND_E2E.read_text()
    assert "bash hack/roll-scenario.sh" in text  # the roll and its checks live there
    applied = _applied_paths(text) | _applied_paths(ROLL_SCENARIO.read_text())
    assert applied == {
        "deploy/base",
        "examples/kcpshard.yaml",
    }
    for path in applied:
        assert (REPO / path).exists(), path
    assert "set -euo pipefail" in text and "trap cleanup EXIT" in text


@pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl is not installed in the venv")
def test_deploy_base_builds_with_the_generated_crds() -> None:
    built = subprocess.run(
        [str(KUBECTL), "kustomize", str(REPO / "deploy" / "base")], capture_output=True, text=True, timeout=60
    )
    assert built.returncode == 0, built.stderr
    docs = [d for d in yaml.safe_load_all(built.stdout) if d]
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("CustomResourceDefinition", "kcpshards.kcpshard.dev") in kinds
    assert ("Deployment", "kcpshard-operator") in kinds
    crd = next(d for d in docs if d["metadata"]["name"] == "kcpshards.kcpshard.dev")
    assert crd == yaml.safe_load((REPO / "crds" / "kcpshards.yaml").read_text())
    operator = next(d for d in docs if d["kind"] == "Deployment")
    # the image kind-e2e.sh builds and loads, under the name the operator gives its agents
    assert operator["spec"]["template"]["spec"]["containers"][0]["image"] == DEFAULT_IMAGE
    assert f"IMAGE={DEFAULT_IMAGE} " in KIND_E2E.read_text()
