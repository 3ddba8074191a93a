"""The operator is killed with SIGKILL at each step of a roll, in turn, and started again.

The operator talks to the API server through a FaultProxy that kills it right after the API server
committed the status write that entered the step (before the operator even saw the answer): the
most awkward moment, when the step is recorded and its action not yet taken. Every time, the
restarted operator finishes the roll with exactly one flip, one surviving kcp process, no orphan
Job or slot, the new slot holding kcp's controller lease, and not one failed client request.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from kcpshard.api.conditions import SLOT_STEPS
from kcpshard.k8s.api import KCPSHARDS, KCPSLOTS
from kcpshard.kcp.client import KcpClient
from kcpshard.roll.plan import Step
from kcpshard_testkit import scenario
from kcpshard_testkit.faultproxy import status_step_is
from kcpshard_testkit.kcpbin import make_kcp
from kcpshard_testkit.stack import Stack

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(300)]
OPERATOR_IN_CLUSTER = False  # each test starts its own (through a fault proxy, killed)

FAST = scenario.FAST
LEASE = ("--shard-lease-seconds", "3")


@pytest.mark.parametrize("step", [s.value for s in Step])
async def test_operator_killed_at_a_step_resumes_and_finishes_the_roll(
    stack: Stack, bin_dir: Path, tmp_path: Path, step: str
) -> None:
    async with stack.fault_proxy(tmp_path / "proxy") as proxy:
        # A restarted operator waits for the killed one's per-shard Lease to expire: keep it short.
        first = stack.start_operator(*LEASE, kubeconfig=str(proxy.kubeconfig_path), log="operator-1.log")
        backup = step == Step.BACKING_UP.value
        port, _ = await scenario.serving_shard(stack, bin_dir)
        async with scenario.traffic(stack, port) as load:
            proxy.arm(status_step_is("root", step), lambda: os.killpg(first.popen.pid, signal.SIGKILL))
            spec = {"kcp": {"binary": make_kcp(bin_dir, "kcp-2", **FAST)}, "roll": {"backup": backup}}
            await stack.api.patch(KCPSHARDS, stack.namespace, "root", {"spec": spec})
            await asyncio.wait_for(proxy.fired.wait(), timeout=90)
            assert first.popen.wait(timeout=10) == -signal.SIGKILL
            recorded = (await stack.shard("root"))["status"]["rollout"]["step"]
            assert recorded == step  # killed in the step under test
            stack.start_operator(*LEASE, log="operator-2.log")
            shard = await scenario.wait_ready(stack, timeout=150)
            await scenario.wait_settled(stack)
            await scenario.more_requests(load)
        report = load.report
    print(step, report.summary(), shard["status"]["lastRoll"]["durations"])
    status = shard["status"]
    assert status["lastRoll"]["result"] == "Succeeded", status["lastRoll"]
    assert status["activeSlot"] == "b"
    # Exactly one flip. Killed on the write that entered Flipping, which also asked the front for slot b,
    # the first operator never had its answer and never said Flip; the second found the ask made.
    assert await scenario.flips_to(stack, "root", "b") == (0 if step == Step.FLIPPING.value else 1)
    assert await scenario.flips_to(stack, "root", "a") == 1  # the shard's first roll only: never back
    assert await scenario.slot_names(stack) == ["root-b"]
    assert len(await scenario.slot_jobs(stack)) == 1
    assert len(scenario.kcp_processes(stack)) == 1
    new_slot = await stack.api.get(KCPSLOTS, stack.namespace, "root-b")
    for condition in SLOT_STEPS:
        assert scenario.condition(new_slot, condition)["status"] == "True", (
            condition,
            new_slot["status"],
        )
    admin = await stack.shard_admin("root")
    async with KcpClient(f"https://127.0.0.1:{port}", admin.ca_pem, admin.token) as kcp:
        lease = await kcp.get_lease()
        probes = [w for w in await kcp.list_workspaces() if w.startswith("kcpshard-probe-")]
    assert lease is not None and lease["spec"]["holderIdentity"] == new_slot["status"]["holderIdentity"]
    assert probes == []  # a probe cut short by the crash left no workspace behind
    if backup:
        assert Path(status["lastRoll"]["backup"]["path"]).name.endswith(".db")
    assert report.failed == 0, report.failures


async def test_a_slot_the_roll_did_not_start_is_never_adopted(stack: Stack, bin_dir: Path) -> None:
    """A KcpSlot and Job for the target slot, of the target revision, already running when the roll
    starts (left over by someone else): the roll deletes it and starts its own."""
    from kcpshard.api.models import KcpShardSpec
    from kcpshard.k8s import builders
    from kcpshard.k8s.api import JOBS
    from kcpshard.roll.revision import revision_of

    stack.start_operator()
    port, _ = await scenario.serving_shard(stack, bin_dir)
    shard = await stack.shard("root")
    target = shard["spec"] | {"kcp": {**shard["spec"]["kcp"], "binary": make_kcp(bin_dir, "kcp-2", **FAST)}}
    spec = KcpShardSpec.model_validate(target)
    revision = revision_of(spec)
    stray = builders.kcpslot(shard, builders.SlotName.B, revision, 0, roll_id="not-this-roll")
    stray = await stack.api.create(KCPSLOTS, stack.namespace, stray)
    job = builders.slot_job(shard, spec, stray, image=stack.agent_image or builders.DEFAULT_IMAGE)
    await stack.api.create(JOBS, stack.namespace, job)

    async def stray_runs() -> list[int] | None:
        pids = scenario.kcp_processes(stack)
        return pids if len(pids) == 2 else None

    pids = await scenario.wait_for("the stray slot's kcp", stray_runs, timeout=60)
    async with scenario.traffic(stack, port) as load:
        await stack.api.patch(KCPSHARDS, stack.namespace, "root", {"spec": {"kcp": target["kcp"]}})
        shard = await scenario.wait_ready(stack, timeout=150)
        await scenario.wait_settled(stack)
        await scenario.more_requests(load)
    deleted = await scenario.wait_event(stack, "root", "SlotDeleted")
    assert "never adopted: it was not started by this roll" in deleted["message"]
    new_slot = await stack.api.get(KCPSLOTS, stack.namespace, "root-b")
    assert new_slot["metadata"]["uid"] != stray["metadata"]["uid"]
    assert new_slot["spec"]["roll"] != "not-this-roll"
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)  # both the stray and the old kcp ended
    assert shard["status"]["lastRoll"]["result"] == "Succeeded"
    assert load.report.failed == 0, load.report.failures


async def test_operator_restarted_in_the_same_pod_takes_its_lease_back_at_once(
    stack: Stack, bin_dir: Path, tmp_path: Path
) -> None:
    """The container restarts in its pod (same POD_NAME): the per-shard Lease, valid for an hour, names
    the killed run, and the new run takes it at once instead of waiting it out."""
    from kcpshard.k8s.api import LEASES
    from kcpshard.k8s.names import lease_name

    hour = ("--shard-lease-seconds", "3600")
    pod = {"POD_NAME": "kcpshard-operator-7f9c-x2k4p"}
    async with stack.fault_proxy(tmp_path / "proxy") as proxy:
        first = stack.start_operator(
            *hour, kubeconfig=str(proxy.kubeconfig_path), log="operator-1.log", env=pod
        )
        port, _ = await scenario.serving_shard(stack, bin_dir)
        async with scenario.traffic(stack, port) as load:
            proxy.arm(
                status_step_is("root", Step.WAITING_READY.value),
                lambda: os.killpg(first.popen.pid, signal.SIGKILL),
            )
            spec = {"kcp": {"binary": make_kcp(bin_dir, "kcp-2", **FAST)}}
            await stack.api.patch(KCPSHARDS, stack.namespace, "root", {"spec": spec})
            await asyncio.wait_for(proxy.fired.wait(), timeout=90)
            assert first.popen.wait(timeout=10) == -signal.SIGKILL
            killed = (await stack.api.get(LEASES, stack.namespace, lease_name("root")))["spec"]
            stack.start_operator(*hour, log="operator-2.log", env=pod)
            # Far less than the hour the killed run's Lease is still valid for.
            shard = await scenario.wait_ready(stack, timeout=150)
            await scenario.wait_settled(stack)
            await scenario.more_requests(load)
    taken = (await stack.api.get(LEASES, stack.namespace, lease_name("root")))["spec"]
    assert killed["holderIdentity"].startswith(pod["POD_NAME"] + "_")
    assert taken["holderIdentity"].startswith(pod["POD_NAME"] + "_")
    assert taken["holderIdentity"] != killed["holderIdentity"]  # a new run, not the killed one renewing
    assert shard["status"]["lastRoll"]["result"] == "Succeeded"
    assert load.report.failed == 0, load.report.failures
