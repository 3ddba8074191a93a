"""The Helm chart (deploy/helm/kcpshard-operator) rendered by the real `helm` (built from its Go module by
`make tools`): with its defaults, the same objects as `kubectl kustomize deploy/base`, of which its files/
are links; with values, only what they name changes."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kcpshard_testkit.incluster import helm_values, operator_overlay
from kcpshard_testkit.kubectl import kubectl_binary
from kcpshard_testkit.tools import tool

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "kcpshard-operator"
NAMESPACE = "kcpshard-system"


def _helm(*args: str) -> str:
    done = subprocess.run([str(tool("helm")), *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _objects(text: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(text) if d}


def _rendered(*values: str) -> dict[tuple[str, str], dict[str, Any]]:
    sets = [arg for value in values for arg in ("--set", value)]
    return _objects(
        _helm("template", "kcpshard", str(CHART), "--namespace", NAMESPACE, "--include-crds", *sets)
    )


def _operator(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    return dict(objects[("Deployment", "kcpshard-operator")]["spec"]["template"]["spec"]["containers"][0])


def test_helm_lints_the_chart() -> None:
    out = _helm("lint", str(CHART))
    assert "1 chart(s) linted, 0 chart(s) failed" in out, out


def test_the_defaults_render_what_deploy_base_holds() -> None:
    done = subprocess.run(
        [kubectl_binary(), "kustomize", str(REPO / "deploy" / "base")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    base = _objects(done.stdout)
    # Helm does not make the release's namespace (`helm install --create-namespace` does).
    del base[("Namespace", NAMESPACE)]
    chart = _rendered()
    assert sorted(chart) == sorted(base)
    for key, obj in base.items():
        assert chart[key] == obj, key


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["watchNamespaces={team-a,team-b}"], {"--namespace=team-a", "--namespace=team-b"}),
        (["agentImage=example.test/kcpshard:0.2"], {"--all-namespaces", "--image=example.test/kcpshard:0.2"}),
        (["liveness.host=127.0.0.1", "liveness.port=9440", "metricsPort=9441"],
         {"--all-namespaces", "--liveness=http://127.0.0.1:9440/healthz", "--metrics-port=9441"}),
    ],
)  # fmt: skip
def test_values_change_only_the_operators_arguments_they_name(values: list[str], expected: set[str]) -> None:
    defaults, changed = _operator(_rendered()), _operator(_rendered(*values))
    assert set(changed["command"]) - set(defaults["command"]) == expected - set(defaults["command"])
    assert expected <= set(changed["command"])
    assert ("--all-namespaces" in changed["command"]) == ("--all-namespaces" in expected)


def test_image_replicas_and_the_host_network() -> None:
    objects = _rendered(
        "image.repository=example.test/kcpshard", "image.tag=0.2.0", "image.pullPolicy=Never",
        "replicas=3", "hostNetwork=true", "liveness.port=9440", "metricsPort=9441",
    )  # fmt: skip
    deployment = objects[("Deployment", "kcpshard-operator")]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert deployment["spec"]["replicas"] == 3
    assert container["image"] == "example.test/kcpshard:0.2.0" and container["imagePullPolicy"] == "Never"
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert container["ports"] == [
        {"name": "liveness", "containerPort": 9440, "hostPort": 9440},
        {"name": "metrics", "containerPort": 9441, "hostPort": 9441},
    ]
    assert container["livenessProbe"]["httpGet"]["port"] == 9440


def test_the_test_nodes_values_render_what_its_kustomize_overlay_does(tmp_path: Path) -> None:
    """tests/node installs the operator both ways: the same Deployment either way."""
    image, ports = "kcpshard:test", {"liveness_port": 40001, "metrics_port": 40002}
    overlay = operator_overlay(tmp_path / "overlay", image=image, **ports)
    done = subprocess.run(
        [kubectl_binary(), "kustomize", str(overlay)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    kustomized = _objects(done.stdout)[("Deployment", "kcpshard-operator")]
    charted = _rendered(*[v for v in helm_values(image, **ports) if v != "--set"])[
        ("Deployment", "kcpshard-operator")
    ]
    assert charted == kustomized
