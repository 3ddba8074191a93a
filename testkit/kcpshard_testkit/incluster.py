"""The operator as a cluster runs it: `deploy/base` applied with kustomize, its pods on the real node.

One overlay over `deploy/base`, written per cluster, changes only what this test node needs:
- the image: the one `make image` built and the node imported (`images:`); the agent Jobs get the same
  one, which the operator reads from its own pod (no `--image`);
- the host network: the test node routes no pod network (see `node.py`), so the operator's pods reach the
  API server on the node's loopback, as the agents already do. Its liveness and metrics ports move to free
  ones, declared as hostPorts, so the scheduler keeps a second replica from the same node's port: one replica
  runs per node, the other waits Pending, as on any one-node cluster with host ports.
Everything else (ServiceAccount, RBAC, non-root user, liveness probe, resources) is deploy/base's.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import yaml

from kcpshard_testkit import tools
from kcpshard_testkit.kubectl import kubectl
from kcpshard_testkit.tcp import free_port
from kcpshard_testkit.waiting import wait_for

DEPLOY_BASE = tools.REPO / "deploy" / "base"
HELM_CHART = tools.REPO / "deploy" / "helm" / "kcpshard-operator"
OPERATOR_NAMESPACE = "kcpshard-system"
OPERATOR_DEPLOYMENT = "kcpshard-operator"


def split_image(reference: str) -> tuple[str, str]:
    """`name:tag` -> (name, tag); a registry port's colon is not a tag."""
    name, _, tag = reference.rpartition(":")
    if not name or "/" in tag:
        return reference, "latest"
    return name, tag


def operator_overlay(directory: Path, *, image: str, liveness_port: int, metrics_port: int) -> Path:
    """Write the overlay's kustomization.yaml into `directory`; returns the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    name, tag = split_image(image)
    container = "/spec/template/spec/containers/0"
    base = yaml.safe_load((DEPLOY_BASE / "operator.yaml").read_text())
    command = base["spec"]["template"]["spec"]["containers"][0]["command"]
    # deploy/base's liveness address, found by value rather than by a fixed index
    liveness = next(i for i, arg in enumerate(command) if arg.startswith("--liveness="))
    metrics = next(i for i, arg in enumerate(command) if arg.startswith("--metrics-port="))
    patch = [
        {"op": "add", "path": "/spec/template/spec/hostNetwork", "value": True},
        {"op": "add", "path": "/spec/template/spec/dnsPolicy", "value": "ClusterFirstWithHostNet"},
        {
            "op": "replace",
            "path": f"{container}/command/{liveness}",
            "value": f"--liveness=http://127.0.0.1:{liveness_port}/healthz",
        },
        {
            "op": "replace",
            "path": f"{container}/command/{metrics}",
            "value": f"--metrics-port={metrics_port}",
        },
        {"op": "replace", "path": f"{container}/livenessProbe/httpGet/port", "value": liveness_port},
        # On the host network the kubelet would probe the node's address; the endpoint is on loopback.
        {"op": "add", "path": f"{container}/livenessProbe/httpGet/host", "value": "127.0.0.1"},
        {
            "op": "replace",
            "path": f"{container}/ports",
            "value": [
                {"name": "liveness", "containerPort": liveness_port, "hostPort": liveness_port},
                {"name": "metrics", "containerPort": metrics_port, "hostPort": metrics_port},
            ],
        },
        {"op": "add", "path": f"{container}/imagePullPolicy", "value": "Never"},
    ]
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(DEPLOY_BASE, directory)],
        "images": [{"name": "kcpshard", "newName": name, "newTag": tag}],
        "patches": [
            {"target": {"kind": "Deployment", "name": OPERATOR_DEPLOYMENT}, "patch": json.dumps(patch)}
        ],
    }
    (directory / "kustomization.yaml").write_text(json.dumps(kustomization, indent=2))
    return directory


async def install_operator(kubeconfig: Path, directory: Path, *, image: str) -> None:
    """`kubectl apply -k` of the overlay; returns once a replica is available (the other may wait Pending)."""
    overlay = operator_overlay(directory, image=image, liveness_port=free_port(), metrics_port=free_port())
    await kubectl(kubeconfig, "apply", "-k", str(overlay))
    await _one_replica_available(kubeconfig)


def helm_values(image: str, *, liveness_port: int, metrics_port: int) -> list[str]:
    """The chart's values for the test node: what the overlay above changes, as `--set` arguments."""
    name, tag = split_image(image)
    values = {
        "image.repository": name,
        "image.tag": tag,
        "image.pullPolicy": "Never",
        "hostNetwork": "true",
        "liveness.host": "127.0.0.1",
        "liveness.port": str(liveness_port),
        "metricsPort": str(metrics_port),
    }
    return [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]


async def install_operator_with_helm(kubeconfig: Path, *, image: str) -> str:
    """`helm install` of deploy/helm/kcpshard-operator with the real helm (`make tools`); its output.

    `--take-ownership`: the test cluster applied the CRDs and the operator's RBAC before its controllers
    started (the operator's token needs its ServiceAccount); Helm adopts those identical objects."""
    values = helm_values(image, liveness_port=free_port(), metrics_port=free_port())
    proc = await asyncio.create_subprocess_exec(
        str(tools.tool("helm")), "install", "kcpshard", str(HELM_CHART), "--namespace", OPERATOR_NAMESPACE,
        "--create-namespace", "--take-ownership", "--kubeconfig", str(kubeconfig), *values,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await proc.communicate()
    text = out.decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"helm install failed: {text.strip()}")
    await _one_replica_available(kubeconfig)
    return text


class InClusterOperator:
    """deploy/base's operator on a shared cluster, stopped (scaled to 0, its pods gone) for the tests that
    run operators of their own and running (its replicas back, one available) for the others. Each state
    is reached only when asked for, so modules of one kind in a row do not stop and start it in between."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        self._replicas: str | None = None  # what it ran with, while stopped

    async def stopped(self) -> None:
        if self._replicas is not None:
            return
        ns, deployment = ("-n", OPERATOR_NAMESPACE), f"deployment/{OPERATOR_DEPLOYMENT}"
        replicas = await kubectl(self.kubeconfig, *ns, "get", deployment, "-o", "jsonpath={.spec.replicas}")
        await kubectl(self.kubeconfig, *ns, "scale", deployment, "--replicas=0")
        self._replicas = replicas.strip() or "1"
        selector = f"app.kubernetes.io/name={OPERATOR_DEPLOYMENT}"

        async def no_pod_left() -> bool:
            return not (
                await kubectl(self.kubeconfig, *ns, "get", "pods", "-l", selector, "-o", "name")
            ).strip()

        await wait_for("the in-cluster operator's pods gone", no_pod_left, timeout=120, interval=0.5)

    async def running(self) -> None:
        if self._replicas is None:
            return
        deployment = f"deployment/{OPERATOR_DEPLOYMENT}"
        await kubectl(
            self.kubeconfig, "-n", OPERATOR_NAMESPACE, "scale", deployment, f"--replicas={self._replicas}"
        )
        self._replicas = None
        await _one_replica_available(self.kubeconfig)


async def _one_replica_available(kubeconfig: Path) -> None:
    await kubectl(
        kubeconfig,
        "-n",
        OPERATOR_NAMESPACE,
        "wait",
        "--for=jsonpath={.status.availableReplicas}=1",
        "--timeout=180s",
        f"deployment/{OPERATOR_DEPLOYMENT}",
    )
