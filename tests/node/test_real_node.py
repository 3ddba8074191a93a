"""On a real node: the kubelet runs every pod in a container from the image the Dockerfile builds.

The operator is deploy/base's Deployment (non-root, its ServiceAccount token mounted by the API server,
in-cluster configuration); the slot Jobs and the front are containers of the images; `kubectl logs` and
`kubectl exec` go through the kubelet as in any cluster. hack/roll-scenario.sh, kind's roll, runs here too."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kcpshard.k8s.api import KCPSHARDS, KCPSLOTS
from kcpshard_testkit import scenario
from kcpshard_testkit.incluster import OPERATOR_NAMESPACE
from kcpshard_testkit.kubectl import kubectl_binary
from kcpshard_testkit.realkcp import NEWER, OLDER, on_the_node, real_kcp
from kcpshard_testkit.stack import Stack, shard_manifest
from kcpshard_testkit.tcp import free_port

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(600)]


def _json(stack: Stack, *args: str) -> Any:
    return json.loads(stack.kubectl(*args, "-o", "json").stdout)


def _running_operator(stack: Stack) -> str:
    pods = _json(stack, "-n", OPERATOR_NAMESPACE, "get", "pods")["items"]
    running = [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"]
    assert running, [p["status"] for p in pods]
    return str(running[0])


async def test_the_node_is_real(cluster: Stack) -> None:
    (node,) = _json(cluster, "get", "nodes")["items"]
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == "v1.37.2"
    assert info["containerRuntimeVersion"].startswith("containerd://")
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True", ready
    wide = cluster.kubectl("get", "nodes", "-o", "wide").stdout
    print(wide)
    assert "containerd://" in wide


async def test_the_operator_runs_as_deploy_base_declares(cluster: Stack) -> None:
    pod = _running_operator(cluster)
    spec = _json(cluster, "-n", OPERATOR_NAMESPACE, "get", "pod", pod)["spec"]
    assert spec["serviceAccountName"] == "kcpshard-operator"
    assert spec["containers"][0]["securityContext"]["runAsNonRoot"] is True
    # Inside the container, through the kubelet: the image's user, the token the API server mounted.
    identity = cluster.kubectl("-n", OPERATOR_NAMESPACE, "exec", pod, "--", "id", "-u").stdout.strip()
    assert identity == "65532"
    token_dir = "/var/run/secrets/kubernetes.io/serviceaccount"
    listed = cluster.kubectl("-n", OPERATOR_NAMESPACE, "exec", pod, "--", "ls", token_dir).stdout.split()
    assert {"token", "ca.crt", "namespace"} <= set(listed)
    helped = cluster.kubectl("-n", OPERATOR_NAMESPACE, "exec", pod, "--", "kcpshard", "operator", "--help")
    assert "usage: kcpshard operator" in helped.stdout
    logs = cluster.kubectl("-n", OPERATOR_NAMESPACE, "logs", pod).stdout
    assert "Initial authentication has finished" in logs, logs[-2000:]
    assert "Traceback" not in logs, logs[-4000:]


async def _ready(stack: Stack, name: str) -> dict[str, Any]:
    return await scenario.wait_ready(stack, name, timeout=240)


async def test_blue_green_roll_in_containers_loses_no_request(cluster: Stack, images: Any) -> None:
    port = free_port()
    manifest = shard_manifest(
        "green",
        etcd=cluster.info.etcd_endpoint,
        front_port=port,
        node=cluster.info.node,
        kcp={"version": "v0.32.1", "binary": "kcpshard-fake-kcp", "image": images.test.name},
    )
    await cluster.api.create(KCPSHARDS, "default", manifest)
    first = await _ready(cluster, "green")
    assert first["status"]["activeSlot"] == "a"

    # The slot's host agent is a container: its log is the container's, read through the kubelet.
    (job,) = await scenario.slot_jobs(cluster, "green")
    logs = cluster.kubectl("logs", f"job/{job}").stdout
    slot = await cluster.api.get(KCPSLOTS, "default", "green-a")
    assert f"kcp started, pid {slot['status']['pid']}" in logs, logs[-2000:]

    async with scenario.traffic(cluster, port, "green") as load:
        await cluster.api.patch(KCPSHARDS, "default", "green", {"spec": {"kcp": {"version": "v0.32.2"}}})

        shard = await scenario.wait_last_roll(cluster, "green", timeout=240)
        await scenario.more_requests(load)
    report = load.report
    print(f"through the front during the roll: {report.ok} answered, {report.failed} failed")
    assert shard["status"]["lastRoll"]["result"] == "Succeeded", shard["status"]["lastRoll"]
    assert shard["status"]["lastRoll"]["toSlot"] == "b"
    assert report.failed == 0, report
    assert report.ok > 0
    pods = _json(cluster, "get", "pods", "-l", "kcpshard.dev/shard=green")["items"]
    assert all(p["spec"]["containers"][0]["image"] for p in pods)


async def test_the_roll_scenario_rolls_real_kcp_in_containers_with_no_failed_request(cluster: Stack) -> None:
    """hack/roll-scenario.sh, the scenario hack/kind-e2e.sh runs on kind, here on the real node: real kcp
    v0.30.0 to v0.31.2, the binaries where the README tells users to put them, a client through the front."""
    older, newer = real_kcp(OLDER), real_kcp(NEWER)
    port = free_port()
    store = {"etcd": {"endpoints": [cluster.info.etcd_endpoint], "prefix": "/shards/default/scenario"}}
    tools = os.pathsep.join((str(Path(kubectl_binary()).parent), str(Path(sys.executable).parent)))
    env = {
        **os.environ,
        "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",  # kubectl and its kcpshard plugin
        "KUBECONFIG": cluster.info.kubeconfig,
        "NODE": cluster.info.node,
        "FRONT_PORT": str(port),
        "FRONT_ADDRESS": "127.0.0.1",
        "STORE": json.dumps(store),
        "SHARD": "scenario",
        "SHUTDOWN_DELAY": "2",
        "KCP_FROM": older.version,
        "KCP_TO": newer.version,
        "BIN_FROM": on_the_node(older),
        "BIN_TO": on_the_node(newer),
    }
    ran = await asyncio.to_thread(
        subprocess.run,
        ["bash", str(REPO / "hack" / "roll-scenario.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    print(ran.stdout, ran.stderr)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert f"OK: kcp {older.version} -> {newer.version} blue/green" in ran.stderr
    answered = re.search(r"client: (\d+) requests answered, 0 failed", ran.stderr)
    assert answered and int(answered.group(1)) > 0, ran.stderr[-3000:]

    # The serving slot's host agent is a container: its log, read through the kubelet, names its kcp.
    shard = await cluster.shard("scenario")
    assert shard["status"]["lastRoll"]["result"] == "Succeeded"
    slot = await cluster.api.get(KCPSLOTS, "default", f"scenario-{shard['status']['activeSlot']}")
    jobs = await scenario.slot_jobs(cluster, "scenario")
    [job] = [j for j in jobs if j.startswith(f"scenario-{shard['status']['activeSlot']}")]
    logs = cluster.kubectl("logs", f"job/{job}").stdout
    assert f"kcp started, pid {slot['status']['pid']}" in logs, logs[-2000:]
    pods = _json(cluster, "get", "pods", "-l", "kcpshard.dev/shard=scenario")["items"]
    assert pods and all(p["spec"]["containers"][0]["image"] for p in pods)


def _metrics_port(stack: Stack) -> int:
    deployment = _json(stack, "-n", OPERATOR_NAMESPACE, "get", "deployment", "kcpshard-operator")
    ports = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    return int(next(p["hostPort"] for p in ports if p["name"] == "metrics"))


async def test_the_operator_serves_the_shards_metrics(cluster: Stack) -> None:
    """After the roll above: the replica holding the shard's Lease reports it Ready and the roll counted,
    on the port deploy/base names `metrics` (what deploy/monitoring's PodMonitor scrapes)."""
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"http://127.0.0.1:{_metrics_port(cluster)}/metrics", timeout=10)).text
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    shard = (("namespace", "default"), ("shard", "green"))
    assert samples[("kcpshard_shard_ready", shard)] == 1.0
    assert samples[("kcpshard_stalled", shard)] == 0.0
    succeeded = (*shard, ("reason", ""), ("result", "Succeeded"))
    assert samples[("kcpshard_rolls_total", tuple(sorted(succeeded)))] >= 1.0
    assert any(name == "kcpshard_build_info" for name, _ in samples)
