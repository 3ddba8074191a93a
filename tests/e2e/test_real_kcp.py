"""End to end on real kcp: the binaries `make tools` builds from kcp's Go modules (hack/tools/bin).

A real version upgrade (the older minor to the newer), the Single shape with its outage, the operator
SIGKILLed at three steps, and a kcp that refuses its flags; each with a client through the front
counting failures, and the probe on real workspaces. The stand-in keeps the faults real kcp has no knob
for (tests/e2e/test_roll_aborts.py and others).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from kcpshard.api.conditions import SLOT_STEPS
from kcpshard.k8s.api import KCPSHARDS, KCPSLOTS
from kcpshard.kcp.client import KcpClient
from kcpshard_testkit import scenario
from kcpshard_testkit.realkcp import NEWER, OLDER, RealKcp, on_the_node, real_kcp, real_kcp_processes
from kcpshard_testkit.stack import Stack

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(600)]

# Real kcp starts in tens of seconds on a busy 2-core machine; the roll's own timeouts are kcp's defaults.
READY_TIMEOUT = 300
LEASE = ("--shard-lease-seconds", "3")


def kcp_spec(kcp: RealKcp) -> dict[str, str]:
    """The binary as users put it on their node (README), at `/var/lib/kcpshard/bin/kcp-<version>`."""
    return {"version": kcp.version, "binary": on_the_node(kcp)}


async def serving(stack: Stack, kcp: RealKcp, **spec: Any) -> int:
    port = await scenario.create_shard(stack, kcp=kcp_spec(kcp), **spec)
    await scenario.wait_ready(stack, timeout=READY_TIMEOUT)
    return port


async def served_version(stack: Stack, port: int) -> str:
    """What kcp answers on /version through the front (kcp refuses it to anonymous users)."""
    admin = await stack.shard_admin("root")
    headers = {"Authorization": f"Bearer {admin.token}"}
    async with httpx.AsyncClient(verify=False, timeout=10, headers=headers) as client:
        resp = await client.get(f"https://127.0.0.1:{port}/version")
        resp.raise_for_status()
        return str(resp.json()["gitVersion"])


async def check_rolled(stack: Stack, port: int, slot: str) -> dict[str, Any]:
    """The roll ended Succeeded on `slot`, all six conditions True, the new kcp leads, no probe kept."""
    shard = await stack.shard("root")
    status = shard["status"]
    assert status["lastRoll"]["result"] == "Succeeded", status["lastRoll"]
    assert status["activeSlot"] == slot
    new_slot = await stack.api.get(KCPSLOTS, stack.namespace, f"root-{slot}")
    for condition in SLOT_STEPS:
        assert scenario.condition(new_slot, condition)["status"] == "True", (condition, new_slot["status"])
    admin = await stack.shard_admin("root")
    async with KcpClient(f"https://127.0.0.1:{port}", admin.ca_pem, admin.token) as kcp:
        lease = await kcp.get_lease()
        probes = [w for w in await kcp.list_workspaces() if w.startswith("kcpshard-probe-")]
        # The probe does not wait for kcp's finalizers: a probe workspace may still be going.
        kept = [
            w
            for w in probes
            if not ((await kcp.get_workspace(w)) or {}).get("metadata", {}).get("deletionTimestamp")
        ]
    assert lease is not None and lease["spec"]["holderIdentity"] == new_slot["status"]["holderIdentity"]
    assert kept == [], probes
    # The probe ran on real workspaces: created, Ready (kcp's own controllers), deleted.
    assert status["lastRoll"]["durations"]["probe"] > 0
    return shard


async def test_real_version_upgrade_rolls_blue_green_without_a_failed_request(stack: Stack) -> None:
    older, newer = real_kcp(OLDER), real_kcp(NEWER)
    port = await serving(stack, older)
    assert older.version in await served_version(stack, port)
    old_pids = real_kcp_processes(stack)
    assert len(old_pids) == 1
    async with scenario.traffic(stack, port) as load:
        await stack.api.patch(KCPSHARDS, stack.namespace, "root", {"spec": {"kcp": kcp_spec(newer)}})
        await scenario.wait_last_roll(stack, "root", timeout=READY_TIMEOUT + 200)
        await scenario.wait_settled(stack, kcps=real_kcp_processes)
        await scenario.more_requests(load)
    report = load.report
    shard = await check_rolled(stack, port, "b")
    print("real upgrade", older.version, "->", newer.version, report.summary())
    print("longest without an answer", report.longest_no_answer_seconds(), "s; by status", report.by_status)
    print("report", shard["status"]["lastRoll"]["durations"])
    assert newer.version in await served_version(stack, port)
    assert not any(pid in real_kcp_processes(stack) for pid in old_pids)  # the old kcp exited
    assert report.failed == 0, report.failures
    assert report.ok > 40
    # Real kcp closes the connections kept alive to it when its shutdown delay ends: no 429 to wait out.
    assert 429 not in report.by_status, report.by_status


async def test_real_single_shape_has_an_outage_and_comes_back(stack: Stack) -> None:
    kcp = real_kcp(NEWER)
    port = await serving(stack, kcp, shape="Single")
    async with scenario.traffic(stack, port) as load:
        await stack.api.patch(KCPSHARDS, stack.namespace, "root", {"spec": {"extraArgs": ["-v=2"]}})
        shard = await scenario.wait_last_roll(stack, "root", timeout=READY_TIMEOUT + 200)
        await scenario.more_requests(load)
    report = load.report
    print("real Single", report.summary(), shard["status"]["lastRoll"]["durations"])
    last = shard["status"]["lastRoll"]
    assert last["result"] == "Succeeded", last
    # Single is a planned outage: the report measures it, the client sees it (requests failed, or GETs
    # reset and retried after 1 s as client-go does), and the shard serves again after.
    assert last["durations"]["outage"] > 0
    assert report.failed + report.retried_reset > 0, report.summary()
    await check_rolled(stack, port, "a")


async def test_real_kcp_refusing_its_flags_aborts_and_the_old_slot_serves(stack: Stack) -> None:
    kcp = real_kcp(NEWER)
    port = await serving(stack, kcp)
    async with scenario.traffic(stack, port) as load:
        spec = {"extraArgs": ["--no-such-flag-in-kcp"]}
        await stack.api.patch(KCPSHARDS, stack.namespace, "root", {"spec": spec})
        shard = await scenario.wait_stalled(stack, timeout=READY_TIMEOUT)
        await scenario.wait_settled(stack, kcps=real_kcp_processes)
        await scenario.more_requests(load)
    report = load.report
    stalled = scenario.condition(shard, "Stalled")
    print("real bad flag:", stalled["message"], report.summary())
    assert stalled["reason"] == "SlotExited", stalled
    assert shard["status"]["activeSlot"] == "a"
    assert shard["status"]["lastRoll"]["result"] == "Aborted"
    assert await scenario.slot_names(stack) == ["root-a"]
    assert report.failed == 0, report.failures
