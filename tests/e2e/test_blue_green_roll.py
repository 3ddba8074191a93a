"""End to end: a shard is created, serves through the front, and rolls blue/green while a
client keeps sending requests through the front. Everything is real but kcp: the control plane, the
node (containerd, the kubelet), the operator's pods, the host agents and HAProxy in containers, the
stand-in kcp on real etcd."""

from __future__ import annotations

import pytest

from kcpshard.api import conditions as cond
from kcpshard.api.conditions import SLOT_STEPS
from kcpshard.k8s.api import JOBS, KCPSHARDS, KCPSLOTS, NotFound
from kcpshard.kcp.client import KcpClient
from kcpshard_testkit import scenario
from kcpshard_testkit.load import KubeStyleLoad
from kcpshard_testkit.stack import Stack
from kcpshard_testkit.tcp import free_port
from kcpshard_testkit.waiting import wait_for

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(300)]


def _cond(obj: dict, type_: str) -> dict | None:
    found = cond.find((obj.get("status") or {}).get("conditions"), type_)
    return dict(found) if found else None


async def _ready_shard(stack: Stack, name: str) -> dict:
    async def ready() -> dict | None:
        shard = await stack.shard(name)
        ready = _cond(shard, "Ready")
        if ready and ready["status"] == "True" and not shard["status"].get("rollout"):
            return shard
        return None

    return await wait_for(f"shard {name} Ready=True", ready, timeout=90)


async def test_blue_green_roll_loses_no_request(stack: Stack) -> None:
    front_port = free_port()
    manifest = stack.manifest("root", front_port)
    await stack.api.create(KCPSHARDS, stack.namespace, manifest)
    first = await _ready_shard(stack, "root")
    # kstatus as GitOps tools and scripts read it
    waited = stack.kubectl("wait", "kshard/root", "--for=condition=Ready", "--timeout=30s")
    assert "condition met" in waited.stdout
    assert first["status"]["activeSlot"] == "a"
    assert first["status"]["lastRoll"]["result"] == "Succeeded"

    admin = await stack.shard_admin("root")
    front = f"https://127.0.0.1:{front_port}"
    old_slot = await stack.api.get(KCPSLOTS, stack.namespace, "root-a")
    old_pid = old_slot["status"]["pid"]  # in its container's PID namespace
    old_kcps = scenario.kcp_processes(stack)  # as this machine sees them
    assert len(old_kcps) == 1, old_kcps
    # `kubectl logs job/...`, as the operator's messages name it, reads the slot's host agent and kcp.
    (job,) = await scenario.slot_jobs(stack)
    logs = stack.kubectl("logs", f"job/{job}", check=False)
    assert logs.returncode == 0, logs.stderr
    assert f"kcp started, pid {old_pid}" in logs.stdout, logs.stdout[-2000:]

    load = KubeStyleLoad(front, admin.token, admin.ca_pem)
    await load.start()
    try:

        async def some_requests() -> bool:
            return load.report.ok >= 20

        await wait_for("client traffic through the front", some_requests, timeout=30)
        await stack.api.patch(KCPSHARDS, stack.namespace, "root", {"spec": {"kcp": {"version": "v0.32.2"}}})

        async def rolled() -> dict | None:
            shard = await stack.shard("root")
            status = shard.get("status") or {}
            last = status.get("lastRoll") or {}
            if last.get("toSlot") == "b" and not status.get("rollout"):
                return shard
            return None

        shard = await wait_for("the roll to slot b", rolled, timeout=120)
        before_stop = load.report.ok

        async def more_requests() -> bool:
            return load.report.ok >= before_stop + 20

        await wait_for("client traffic after the roll", more_requests, timeout=30)
    finally:
        report = await load.stop()

    print("client:", report.summary(), f"longest without an answer {report.longest_no_answer_seconds()} s")
    print("roll report:", shard["status"]["lastRoll"])
    assert report.failed == 0, report.failures
    assert report.ok > 40
    # No client waits out a Retry-After: the old kcp closes the connections kept alive to it once its
    # shutdown delay ends (--shutdown-send-retry-after=false), and they reconnect to the new slot.
    assert 429 not in report.by_status, report.by_status

    status = shard["status"]
    assert status["lastRoll"]["result"] == "Succeeded", status["lastRoll"]
    assert status["activeSlot"] == "b"
    assert _cond(shard, "Ready")["status"] == "True"
    assert _cond(shard, "Reconciling")["status"] == "False"
    assert _cond(shard, "Stalled")["status"] == "False"
    assert status["observedGeneration"] == shard["metadata"]["generation"]
    for key in ("startToReady", "oldExit", "leaseHandover", "probe", "total"):
        assert key in status["lastRoll"]["durations"], key

    new_slot = await stack.api.get(KCPSLOTS, stack.namespace, "root-b")
    for step in SLOT_STEPS:
        assert _cond(new_slot, step)["status"] == "True", (step, new_slot["status"]["conditions"])

    # The new slot leads: the lease holder is the one the handover recorded, and it is live.
    async with KcpClient(front, admin.ca_pem, admin.token) as kcp:
        lease = await kcp.get_lease()
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == new_slot["status"]["holderIdentity"]
    # The probe ran on the new leader: only the leader readies a workspace, the probe came after
    # the handover, and the holder then is the holder now (leadership did not move in between).
    stamps = status["lastRoll"]["timestamps"]
    assert stamps["leaseHandedOver"] <= stamps["probed"]
    assert "became Ready" in _cond(new_slot, "Probed")["message"]

    # The old slot: process exited, Job and KcpSlot gone.
    assert all(scenario.exited(pid) for pid in old_kcps)
    with pytest.raises(NotFound):
        await stack.api.get(KCPSLOTS, stack.namespace, "root-a")
    jobs = await stack.api.list(JOBS, stack.namespace, label_selector="kcpshard.dev/slot=a")
    assert jobs["items"] == []
    await scenario.wait_settled(stack)  # one kcp left: the new slot's
