"""A slot's host agent (`kcpshard agent slot`, the process of the slot's Job) is killed with SIGKILL.

kcp is the agent's child with PR_SET_PDEATHSIG=SIGKILL, so it dies with it, and the Job fails. Before the
flip that aborts the roll and the old slot keeps serving without a failed request. In steady state the
serving slot is lost: the operator says so (Event SlotLost) and starts the same revision on the other slot.
"""

from __future__ import annotations

import itertools
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from kcpshard.k8s.api import KCPSHARDS, KCPSLOTS, NotFound
from kcpshard.kcp.client import KcpClient
from kcpshard_testkit import scenario
from kcpshard_testkit.kcpbin import make_kcp
from kcpshard_testkit.stack import Stack

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(300)]


def _parent(pid: int) -> int | None:
    try:
        # /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may hold spaces, so split after ')'.
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def slot_agent(stack: Stack, slot_object: str) -> int | None:
    """Pid of the host agent of KcpSlot `slot_object` among the stack's pods, if it runs."""
    for pid in scenario.agent_pids(stack, "slot"):
        if any(pair == (b"--slot", slot_object.encode()) for pair in itertools.pairwise(scenario.argv(pid))):
            return pid
    return None


def kcp_child(stack: Stack, agent: int) -> int | None:
    """The kcp process the agent started."""
    return next((pid for pid in scenario.kcp_processes(stack) if _parent(pid) == agent), None)


async def _agent_and_kcp(stack: Stack, slot_object: str) -> tuple[int, int]:

    async def running() -> tuple[int, int] | None:
        agent = slot_agent(stack, slot_object)
        kcp = kcp_child(stack, agent) if agent is not None else None
        return (agent, kcp) if agent is not None and kcp is not None else None

    return await scenario.wait_for(f"the host agent of {slot_object} and its kcp", running, timeout=30)


async def _gone(pid: int) -> None:
    async def ended() -> bool:
        return not Path(f"/proc/{pid}").exists()

    await scenario.wait_for(f"process {pid} to end", ended, timeout=15)


async def test_new_slot_agent_killed_before_the_flip_aborts_the_roll(stack: Stack, bin_dir: Path) -> None:
    port = await scenario.create_shard(
        stack, kcp={"version": "v0.32.1", "binary": make_kcp(bin_dir, "kcp-1", rsa_bits=2048)}
    )
    first = await scenario.wait_ready(stack)
    (old_kcp,) = scenario.kcp_processes(stack)
    async with scenario.traffic(stack, port) as load:
        slow = make_kcp(bin_dir, "kcp-2", startup_seconds=5, rsa_bits=2048)
        await stack.api.patch(KCPSHARDS, stack.namespace, "root", {"spec": {"kcp": {"binary": slow}}})
        await scenario.wait_step(stack, "root", "WaitingReady")
        agent, kcp = await _agent_and_kcp(stack, "root-b")
        assert (await stack.shard("root"))["status"]["rollout"]["step"] == "WaitingReady"
        os.kill(agent, signal.SIGKILL)
        await _gone(kcp)  # PR_SET_PDEATHSIG: kcp dies with its agent
        shard = await scenario.wait_stalled(stack)
        await scenario.more_requests(load)
        report = load.report
    print("agent killed before the flip:", report.summary())
    status = shard["status"]
    stalled = scenario.condition(shard, "Stalled")
    assert stalled["reason"] == "SlotExited", stalled
    assert "slot b exited" in stalled["message"] and "before it was ready" in stalled["message"]
    assert stalled["message"].startswith("slot a serves revision")
    assert status["lastRoll"]["result"] == "Aborted" and status["lastRoll"]["reason"] == "SlotExited"
    assert status["activeSlot"] == "a"
    assert status["activeRevision"] == first["status"]["activeRevision"]
    assert status["front"]["observedBackend"] == "a"
    event = await scenario.wait_event(stack, "root", "SlotExited")
    assert event["type"] == "Warning"
    # The new slot is gone; the old kcp is the one still serving.
    await scenario.wait_settled(stack)
    with pytest.raises(NotFound):
        await stack.api.get(KCPSLOTS, stack.namespace, "root-b")
    assert await scenario.slot_names(stack) == ["root-a"]
    assert scenario.kcp_processes(stack) == [old_kcp]
    assert report.failed == 0, report.failures


async def test_active_slot_agent_killed_starts_its_revision_on_the_other_slot(
    stack: Stack, bin_dir: Path
) -> None:
    # A short probe timeout: the recovered slot must lead kcp's controllers within seconds, not once
    # the dead process's controller lease (60 s) expires.
    port = await scenario.create_shard(
        stack,
        kcp={"version": "v0.32.1", "binary": make_kcp(bin_dir, "kcp-1", rsa_bits=2048)},
        roll={"probeTimeoutSeconds": 15},
    )
    first = await scenario.wait_ready(stack)
    revision = first["status"]["activeRevision"]
    assert first["status"]["activeSlot"] == "a"
    agent, kcp = await _agent_and_kcp(stack, "root-a")
    async with scenario.traffic(stack, port) as load:
        os.kill(agent, signal.SIGKILL)
        await _gone(kcp)
        lost = await scenario.wait_event(stack, "root", "SlotLost")

        async def recovered() -> dict[str, Any] | None:
            shard = await stack.shard("root")
            status = shard.get("status") or {}
            last = status.get("lastRoll") or {}
            ended = not status.get("rollout") and last.get("toSlot") == "b"
            return shard if ended and status.get("activeSlot") == "b" else None

        shard = await scenario.wait_for("the recovery roll to slot b to end", recovered, timeout=90)
        await scenario.more_requests(load)  # the front serves again
    print("agent killed while serving:", load.report.summary(), shard["status"]["lastRoll"])
    assert lost["type"] == "Warning"
    assert "slot a" in lost["message"] and "stopped while serving" in lost["message"], lost["message"]
    status = shard["status"]
    assert status["activeRevision"] == revision
    assert status["lastRoll"]["result"] == "Succeeded", status["lastRoll"]
    assert scenario.condition(shard, "Ready")["status"] == "True"
    assert scenario.condition(shard, "Stalled")["status"] == "False"
    assert status["lastRoll"]["fromSlot"] == "a" and status["lastRoll"]["toSlot"] == "b"
    assert status["lastRoll"]["toRevision"] == revision
    assert status["front"]["observedBackend"] == "b"
    await scenario.wait_settled(stack)
    assert await scenario.slot_names(stack) == ["root-b"]
    # The recovered slot leads kcp's controllers.
    new_slot = await stack.api.get(KCPSLOTS, stack.namespace, "root-b")
    admin = await stack.shard_admin("root")
    async with KcpClient(f"https://127.0.0.1:{port}", admin.ca_pem, admin.token) as client:
        lease = await client.get_lease()
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == new_slot["status"]["holderIdentity"]


@pytest.mark.parametrize("deleted", ["job", "kcpslot"])
async def test_serving_slot_deleted_serves_until_its_replacement_does(
    stack: Stack, bin_dir: Path, deleted: str
) -> None:
    """The replacement starts at once, and the deleted slot's kcp serves on (its agent holds it,
    agent/slot_hold.py) until the front serves the replacement: no request fails, though the shutdown
    delay (2 s) is shorter than a replacement's start."""
    port = await scenario.create_shard(
        stack,
        kcp={"version": "v0.32.1", "binary": make_kcp(bin_dir, "kcp-1", **scenario.FAST)},
        shutdownDelaySeconds=2,
        roll={"probeTimeoutSeconds": 30},
    )
    first = await scenario.wait_ready(stack)
    _, kcp = await _agent_and_kcp(stack, "root-a")
    (job,) = await scenario.slot_jobs(stack)
    async with scenario.traffic(stack, port) as load:
        target = ["job", job] if deleted == "job" else ["kcpslot", "root-a"]
        result = stack.kubectl("delete", *target, "--wait=false")
        assert result.returncode == 0, result.stderr

        async def flipped() -> dict[str, Any] | None:
            status = (await stack.shard("root")).get("status") or {}
            rollout = status.get("rollout") or {}
            return rollout if rollout.get("recovery") and status.get("activeSlot") == "b" else None

        rollout = await scenario.wait_for("the recovery's flip", flipped, timeout=60)
        alive_at_flip = Path(f"/proc/{kcp}").exists()

        async def recovered() -> dict[str, Any] | None:
            shard = await stack.shard("root")
            status = shard.get("status") or {}
            last = status.get("lastRoll") or {}
            done = not status.get("rollout") and last.get("toSlot") == "b" and last.get("recovery")
            return shard if done else None

        shard = await scenario.wait_for("the recovery roll to end", recovered, timeout=120)
        await _gone(kcp)  # and once it no longer serves, the held kcp stops
        await scenario.more_requests(load)
    print(
        f"serving slot's {deleted} deleted:",
        load.report.summary(),
        shard["status"]["lastRoll"]["durations"],
    )
    assert (rollout["fromSlot"], rollout["toSlot"]) == ("a", "b")
    assert alive_at_flip, "the deleted slot's kcp stopped before its replacement served"
    assert shard["status"]["lastRoll"]["result"] == "Succeeded"
    assert shard["status"]["activeRevision"] == first["status"]["activeRevision"]
    assert load.report.failed == 0, load.report.failures
    await scenario.wait_settled(stack)
    assert await scenario.slot_names(stack) == ["root-b"]
