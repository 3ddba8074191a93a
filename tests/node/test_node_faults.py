"""Faults as a cluster brings them, on the real node: the operator's pod force-deleted in the middle of a
roll, the serving slot's container killed under its kcp (a `ctr` kill of its task), the serving slot's
Job, KcpSlot or pod deleted by a person, the front's pod, HAProxy or agent ended, a drain of the node, and the
kubelet stopped (last: the node comes back after it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from typing import Any

import pytest

from kcpshard.api import annotations
from kcpshard.k8s.api import KCPSHARDS
from kcpshard_testkit import scenario
from kcpshard_testkit.incluster import OPERATOR_NAMESPACE
from kcpshard_testkit.podprocs import containerd_socket
from kcpshard_testkit.stack import Stack, shard_manifest
from kcpshard_testkit.tcp import free_port
from kcpshard_testkit.waiting import wait_for

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(600)]


def _json(stack: Stack, *args: str) -> Any:
    return json.loads(stack.kubectl(*args, "-o", "json").stdout)


def _running_operators(stack: Stack) -> list[str]:
    pods = _json(stack, "-n", OPERATOR_NAMESPACE, "get", "pods")["items"]
    return sorted(
        p["metadata"]["name"]
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    )


async def _serving(stack: Stack, name: str, images: Any, **spec: Any) -> int:
    port = free_port()
    kcp = {"version": "v0.32.1", "binary": "kcpshard-fake-kcp", "image": images.test.name}
    manifest = shard_manifest(
        name, etcd=stack.info.etcd_endpoint, front_port=port, node=stack.info.node, kcp=kcp
    )
    manifest["spec"].update(spec)
    await stack.api.create(KCPSHARDS, "default", manifest)
    await scenario.wait_ready(stack, name, timeout=240)
    return port


async def test_the_operators_pod_force_deleted_mid_roll_another_finishes_it_with_one_flip(
    cluster: Stack, images: Any
) -> None:
    port = await _serving(cluster, "relay", images, roll={"autoPromote": False})
    [first] = _running_operators(cluster)
    async with scenario.traffic(cluster, port, "relay") as load:
        await cluster.api.patch(KCPSHARDS, "default", "relay", {"spec": {"kcp": {"version": "v0.32.2"}}})

        async def gated() -> dict[str, Any] | None:
            shard = await cluster.shard("relay")
            waiting = scenario.condition(shard, "Reconciling").get("reason") == "WaitingForPromotion"
            return shard if waiting else None

        await wait_for("the roll waiting for promotion", gated, timeout=240)
        # As `kubectl delete pod --force` does: no grace, the pod object gone at once.
        cluster.kubectl("-n", OPERATOR_NAMESPACE, "delete", "pod", first, "--force", "--grace-period=0")

        async def replaced() -> list[str] | None:
            running = [p for p in _running_operators(cluster) if p != first]
            return running or None

        [second] = await wait_for("another operator pod running", replaced, timeout=180)
        promote = {"metadata": {"annotations": {annotations.PROMOTE: "2026-12-04T00:00:00Z"}}}
        await cluster.api.patch(KCPSHARDS, "default", "relay", promote)
        shard = await scenario.wait_last_roll(cluster, "relay", timeout=240)
        await scenario.more_requests(load)
    last = shard["status"]["lastRoll"]
    assert last["result"] == "Succeeded" and last["toSlot"] == "b", last
    assert await scenario.flips_to(cluster, "relay", "b") == 1
    logs = cluster.kubectl("-n", OPERATOR_NAMESPACE, "logs", second).stdout
    assert "Traceback" not in logs, logs[-3000:]
    print(f"operator {first} force-deleted mid-roll, {second} finished it: {load.report.summary()}")
    assert load.report.failed == 0, load.report.failures


async def test_the_serving_slots_container_killed_the_shard_recovers_on_the_other_slot(
    cluster: Stack, images: Any
) -> None:
    await _serving(cluster, "steady", images)
    shard = await cluster.shard("steady")
    serving = shard["status"]["activeSlot"]
    pods = _json(cluster, "get", "pods", "-l", f"kcpshard.dev/shard=steady,kcpshard.dev/slot={serving}")[
        "items"
    ]
    [pod] = [p for p in pods if p["status"].get("phase") == "Running"]
    _kill_container(cluster, pod, pod["status"]["containerStatuses"][0]["name"])
    lost = await scenario.wait_event(cluster, "steady", "SlotLost", timeout=120)
    assert f"slot {serving}" in lost["message"], lost

    async def recovered() -> dict[str, Any] | None:
        shard = await cluster.shard("steady")
        status = shard.get("status") or {}
        ready = scenario.condition(shard, "Ready").get("status") == "True"
        return shard if ready and status.get("activeSlot") not in (None, serving) else None

    shard = await wait_for("the shard serving on the other slot", recovered, timeout=240)
    assert shard["status"]["lastRoll"]["recovery"] is True, shard["status"]["lastRoll"]


@pytest.mark.parametrize("deleted", ["job", "kcpslot", "pod"])
async def test_the_serving_slot_deleted_serves_until_its_replacement_does(
    cluster: Stack, images: Any, deleted: str
) -> None:
    """Its Job, its KcpSlot, or its pod (as a forced eviction, `kubectl drain --disable-eviction`, does)
    deleted by a person: the pod's kcp serves on (agent/slot_hold.py) until the replacement on the other
    slot serves, with a shutdown delay of 2 s, far shorter than the replacement's start."""
    name = f"held-{deleted}"
    port = await _serving(cluster, name, images, shutdownDelaySeconds=2)
    shard = await cluster.shard(name)
    serving = shard["status"]["activeSlot"]
    selector = f"kcpshard.dev/shard={name},kcpshard.dev/slot={serving}"
    [pod] = [p["metadata"]["name"] for p in _json(cluster, "get", "pods", "-l", selector)["items"]]
    [job] = [j["metadata"]["name"] for j in _json(cluster, "get", "jobs", "-l", selector)["items"]]
    target = {"job": ["job", job], "kcpslot": ["kcpslot", f"{name}-{serving}"], "pod": ["pod", pod]}[deleted]
    async with scenario.traffic(cluster, port, name) as load:
        cluster.kubectl("delete", *target, "--wait=false")

        async def flipped() -> dict[str, Any] | None:
            status = (await cluster.shard(name)).get("status") or {}
            moved = status.get("activeSlot") not in (None, serving)
            return status if moved and (status.get("front") or {}).get("observedBackend") != serving else None

        await wait_for("the front serving the replacement", flipped, timeout=240)
        # The deleted slot's pod was still there, its container running, when the front left it.
        old = _json(cluster, "get", "pod", pod)
        running_at_flip = "running" in old["status"]["containerStatuses"][0]["state"]

        async def recovered() -> dict[str, Any] | None:
            status = (await cluster.shard(name)).get("status") or {}
            last = status.get("lastRoll") or {}
            return last if not status.get("rollout") and last.get("recovery") else None

        last = await wait_for("the recovery roll to end", recovered, timeout=240)
        await scenario.more_requests(load)
    print(f"serving slot's {deleted} deleted: {load.report.summary()}, recovery {last['durations']}")
    assert running_at_flip, old["status"]
    assert last["result"] == "Succeeded" and last["recovery"] is True, last
    assert load.report.failed == 0, load.report.failures


def _kill_container(stack: Stack, pod: dict[str, Any], container: str) -> None:
    """SIGKILL to the main process of one container of `pod` (a `ctr` kill of its task), as an OOM kill or
    a crash would end it; the kubelet then starts it again."""
    [found] = [c for c in pod["status"]["containerStatuses"] if c["name"] == container]
    socket = containerd_socket(stack)
    task = found["containerID"].removeprefix("containerd://")
    subprocess.run(
        ["ctr", "--address", str(socket), "-n", "k8s.io", "tasks", "kill", "--signal", "SIGKILL", task],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip


def _restarts(stack: Stack, pod: str, container: str) -> int:
    statuses = _json(stack, "get", "pod", pod)["status"]["containerStatuses"]
    return int(next(c["restartCount"] for c in statuses if c["name"] == container))


def _serving_front_pods(stack: Stack, name: str) -> list[str]:
    pods = _json(stack, "get", "pods", "-l", f"kcpshard.dev/shard={name},kcpshard.dev/component=front")
    return sorted(
        p["metadata"]["name"]
        for p in pods["items"]
        if not p["metadata"].get("deletionTimestamp")
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", ()))
    )


@pytest.mark.parametrize("fault", ["pod-deleted", "haproxy-killed", "agent-killed"])
async def test_a_front_fault_loses_no_request(cluster: Stack, images: Any, fault: str) -> None:
    """The front pod deleted by a person (or a forced eviction): it serves on until the Deployment's
    replacement serves (agent/front_hold.py). One HAProxy container SIGKILLed: the other holds the port
    (SO_REUSEPORT) while the kubelet starts it again. The front agent SIGKILLed: its HAProxy containers
    serve on, and the agent the kubelet starts again takes them over (agent/front_members.py)."""
    name = f"front-{fault}"
    port = await _serving(cluster, name, images, shutdownDelaySeconds=2)
    [pod] = _serving_front_pods(cluster, name)
    # A new connection per request: a port left with no listener fails it (kept-alive ones would not see).
    async with scenario.traffic(cluster, port, name, fresh_connections=True) as load:
        await scenario.more_requests(load)
        if fault == "pod-deleted":
            cluster.kubectl("delete", "pod", pod, "--wait=false")

            async def replaced() -> list[str] | None:
                gone = not _json(cluster, "get", "pods", "--field-selector", f"metadata.name={pod}")["items"]
                serving = [p for p in _serving_front_pods(cluster, name) if p != pod]
                return serving if gone and serving else None

            await wait_for("a new front pod serving, the deleted one gone", replaced, timeout=180)
        else:
            container = {"haproxy-killed": "haproxy-0", "agent-killed": "front"}[fault]
            _kill_container(cluster, _json(cluster, "get", "pod", pod), container)

            async def restarted() -> dict[str, Any] | None:
                front = (await cluster.shard(name))["status"]["front"]
                again = _restarts(cluster, pod, container) >= 1 and _serving_front_pods(cluster, name) == [
                    pod
                ]
                return front if again and front.get("restarts", 0) >= 1 and not front.get("error") else None

            front = await wait_for(f"the killed {container} started again", restarted, timeout=120)
            said = {"haproxy-0": "haproxy-0 ", "front": "front agent in pod "}[container]
            assert (front.get("lastRestart") or "").startswith(said), front
            assert _restarts(cluster, pod, "haproxy-1") == 0  # the other HAProxy never stopped
        await scenario.more_requests(load)
    print(f"front {fault}: {load.report.summary()}")
    assert load.report.ok > 0
    assert load.report.failed == 0, load.report.failures


async def test_a_drain_stops_at_the_shards_budget_and_the_shard_serves_on(
    cluster: Stack, images: Any
) -> None:
    """`kubectl drain` of the shard's node stops at the shard's PodDisruptionBudget, naming the shard's pods,
    and the shard serves on; uncordoned, a roll places its new slot there. The drain is limited to the
    shard's pods (--pod-selector): the module's other pods are not this test's."""
    name = "drained"
    port = await _serving(cluster, name, images, shutdownDelaySeconds=2)
    node = cluster.info.node
    before = (await cluster.shard(name))["status"]["activeSlot"]
    async with scenario.traffic(cluster, port, name) as load:
        try:
            drain = cluster.kubectl(
                "drain", node, f"--pod-selector=kcpshard.dev/shard={name}", "--ignore-daemonsets",
                "--delete-emptydir-data", "--timeout=12s", check=False,
            )  # fmt: skip
            await scenario.more_requests(load)
            shard = await cluster.shard(name)
        finally:
            cluster.kubectl("uncordon", node)
        out = drain.stdout + drain.stderr
        print(f"drain: {out.strip().splitlines()[-1]}")
        assert drain.returncode != 0, out
        assert "Cannot evict pod as it would violate the pod's disruption budget" in out, out
        assert f'error when evicting pods/"{name}-front-' in out, out  # the shard's pods, by name
        assert f'error when evicting pods/"{name}-{before}-' in out, out
        assert scenario.condition(shard, "Ready")["status"] == "True", shard["status"]
        assert shard["status"]["activeSlot"] == before

        # The node back in service: a roll places its new slot there.
        await cluster.api.patch(KCPSHARDS, "default", name, {"spec": {"kcp": {"version": "v0.32.2"}}})
        rolled = await scenario.wait_last_roll(cluster, name, timeout=240)
        await scenario.more_requests(load)
    print(f"drained then rolled: {load.report.summary()}")
    assert rolled["status"]["lastRoll"]["result"] == "Succeeded", rolled["status"]["lastRoll"]
    assert load.report.failed == 0, load.report.failures


def _kubelet_pid(stack: Stack) -> int:
    [pid] = [
        pid
        for pid, args in scenario.processes(stack.directory).items()
        if args[0].endswith(b"/kubelet") and any(a.startswith(b"--root-dir=") for a in args)
    ]
    return pid


async def test_the_kubelet_stopped_the_shard_names_the_node_and_comes_back_with_it(
    cluster: Stack, images: Any
) -> None:
    """The kubelet frozen (SIGSTOP: it neither reports nor manages pods, as a hung or stopped kubelet):
    the node goes Unknown, its pods NotReady, and the front's Deployment unavailable, while the
    containers run on and serve. The shard says the node is what is down (not a FrontFailed that a
    restart would fix), and is Ready again once the kubelet reports (SIGCONT)."""
    port = await _serving(cluster, "anchored", images)
    kubelet = _kubelet_pid(cluster)
    async with scenario.traffic(cluster, port, "anchored") as load:
        os.kill(kubelet, signal.SIGSTOP)
        try:

            async def node_down() -> dict[str, Any] | None:
                shard = await cluster.shard("anchored")
                ready = scenario.condition(shard, "Ready")
                return ready if ready.get("reason") == "NodeNotReady" else None

            down = await wait_for("the shard to name its node", node_down, timeout=180)
            await scenario.more_requests(load)
        finally:
            os.kill(kubelet, signal.SIGCONT)
        shard = await scenario.wait_ready(cluster, "anchored", timeout=180)
        await scenario.more_requests(load)
    print(f"kubelet stopped: {down['message']}; {load.report.summary()}")
    assert down["status"] == "False", down
    assert f"node {cluster.info.node} is Unknown" in down["message"], down
    assert "Kubelet stopped posting node status" in down["message"], down
    assert "the front agent last reported serving slot" in down["message"], down
    assert shard["status"]["activeSlot"] == "a" and not shard["status"].get("failedRoll"), shard["status"]
    assert load.report.failed == 0, load.report.failures
