"""The test kit's overlay of deploy/base (the operator on the host network of the test node), rendered by
the real `kubectl kustomize`: only the image, the network and the ports change, and the ports are declared
as host ports so a second replica cannot take them on the same node."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from kcpshard_testkit.incluster import OPERATOR_DEPLOYMENT, operator_overlay
from kcpshard_testkit.kubectl import kubectl_binary

REPO = Path(__file__).resolve().parents[2]


def _deployment(directory: Path) -> dict[str, Any]:
    done = subprocess.run(
        [kubectl_binary(), "kustomize", str(directory)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    [deployment] = [
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == OPERATOR_DEPLOYMENT
    ]
    return dict(deployment)


def test_the_overlay_moves_liveness_and_metrics_to_host_ports_and_keeps_the_rest(tmp_path: Path) -> None:
    overlay = operator_overlay(
        tmp_path / "overlay", image="kcpshard:test", liveness_port=40001, metrics_port=40002
    )
    pod = _deployment(overlay)["spec"]["template"]["spec"]
    base = _deployment(REPO / "deploy" / "base")["spec"]["template"]["spec"]
    [container], [base_container] = pod["containers"], base["containers"]
    assert pod["hostNetwork"] is True
    assert container["image"] == "kcpshard:test" and container["imagePullPolicy"] == "Never"
    assert "--metrics-port=8081" in base_container["command"]
    assert container["command"] == [
        *(
            {"--metrics-port=8081": "--metrics-port=40002"}.get(
                arg, "--liveness=http://127.0.0.1:40001/healthz" if arg.startswith("--liveness=") else arg
            )
            for arg in base_container["command"]
        ),
    ]  # no --image: the agents take the operator's own image, read from its pod
    assert container["ports"] == [
        {"name": "liveness", "containerPort": 40001, "hostPort": 40001},
        {"name": "metrics", "containerPort": 40002, "hostPort": 40002},
    ]
    assert base_container["ports"] == [{"name": "metrics", "containerPort": 8081}]
    assert container["securityContext"] == base_container["securityContext"]
    assert pod["serviceAccountName"] == base["serviceAccountName"]
