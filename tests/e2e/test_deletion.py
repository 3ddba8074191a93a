"""Deleting a KcpShard with the real `kubectl delete`, which waits for the operator's finalizer.

When the command returns, the shard has stopped everything it ran on the node (kcp, the host agents,
the front agent and its HAProxy) and every object of its own (KcpSlots, Jobs, the front Deployment, the
operator's per-shard Lease, the published kcp-admin Secret). The root-material Secret stays unless
`deletionPolicy: Delete`: it is what a re-created shard needs to serve the same store again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kcpshard.k8s.api import (
    DEPLOYMENTS,
    JOBS,
    KCPSHARDS,
    KCPSLOTS,
    LEASES,
    ROLEBINDINGS,
    ROLES,
    SECRETS,
    SERVICEACCOUNTS,
    NotFound,
    ResourceRef,
)
from kcpshard_testkit import scenario
from kcpshard_testkit.kcpbin import make_kcp
from kcpshard_testkit.stack import Stack
from kcpshard_testkit.waiting import wait_for

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(300)]

FAST = scenario.FAST


def _commands(stack: Stack) -> list[str]:
    return [b" ".join(args).decode(errors="replace") for args in scenario.processes(stack).values()]


async def _exists(stack: Stack, ref: ResourceRef, name: str) -> bool:
    try:
        await stack.api.get(ref, stack.namespace, name)
    except NotFound:
        return False
    return True


async def _running(stack: Stack) -> None:
    """What a serving shard runs on the node: one kcp, its host agent, the front agent, HAProxy."""
    commands = _commands(stack)
    assert len(scenario.kcp_processes(stack)) >= 1, commands
    assert any(" agent slot " in c for c in commands), commands
    assert any(" agent front " in c for c in commands), commands
    assert any("haproxy" in c for c in commands), commands
    assert await _exists(stack, LEASES, "kcpshard-root")
    assert await _exists(stack, DEPLOYMENTS, "root-front")
    for ref in (SERVICEACCOUNTS, ROLES, ROLEBINDINGS):  # the agents' identity
        assert await _exists(stack, ref, "root-agent")


async def _delete_and_check_clean(stack: Stack, *, secret_kept: bool) -> None:
    done = stack.kubectl("delete", "kshard", "root", "--timeout=90s", check=False)
    assert done.returncode == 0, done.stderr
    assert 'kcpshard.kcpshard.dev "root" deleted' in done.stdout, done.stdout
    # kubectl returned: the finalizer let the shard go only once everything had stopped.
    with pytest.raises(NotFound):
        await stack.shard("root")
    assert scenario.kcp_processes(stack) == []
    assert _commands(stack) == []  # no host agent, front agent or HAProxy either
    selector = "kcpshard.dev/shard=root"
    assert (await stack.api.list(JOBS, stack.namespace, label_selector=selector))["items"] == []
    assert (await stack.api.list(KCPSLOTS, stack.namespace, label_selector=selector))["items"] == []
    assert not await _exists(stack, DEPLOYMENTS, "root-front")
    assert not await _exists(stack, LEASES, "kcpshard-root")
    assert not await _exists(stack, SECRETS, "root-kcp-admin")
    for ref in (SERVICEACCOUNTS, ROLES, ROLEBINDINGS):  # gone now, not later by garbage collection
        assert not await _exists(stack, ref, "root-agent")
    if secret_kept:
        shared = await stack.api.get(SECRETS, stack.namespace, "root-shared")
        assert shared["data"].get("admin.kubeconfig"), sorted(shared["data"])
    else:
        assert not await _exists(stack, SECRETS, "root-shared")

    # The slots' own kcp-admin Secrets go with their KcpSlots (garbage collection, which takes a moment).
    async def slot_secrets_gone() -> bool:
        names = [s["metadata"]["name"] for s in (await stack.api.list(SECRETS, stack.namespace))["items"]]
        return not any(n.startswith(("root-a-", "root-b-")) for n in names)

    await wait_for("the slots' kcp-admin Secrets to go", slot_secrets_gone, timeout=30)
    # Nothing came back after the finalizer: no Lease re-created by a stopping loop, no new slot.
    assert not await _exists(stack, LEASES, "kcpshard-root")
    assert scenario.kcp_processes(stack) == []


@pytest.mark.parametrize("policy", ["Retain", "Delete"])
async def test_deleting_a_ready_shard_stops_everything_it_ran(
    stack: Stack, bin_dir: Path, policy: str
) -> None:
    spec: dict[str, Any] = {"kcp": {"version": "v0.32.1", "binary": make_kcp(bin_dir, "kcp-1", **FAST)}}
    if policy == "Delete":
        spec["deletionPolicy"] = "Delete"
    await scenario.create_shard(stack, **spec)
    await scenario.wait_ready(stack)

    async def published() -> bool:
        return await _exists(stack, SECRETS, "root-kcp-admin")

    await wait_for("the kcp-admin Secret", published, timeout=30)
    await _running(stack)
    await _delete_and_check_clean(stack, secret_kept=policy == "Retain")


async def test_shard_applied_again_after_retain_serves_with_the_kept_material_at_once(
    stack: Stack, bin_dir: Path
) -> None:
    """What the kept Secret is for: the shard applied again on the same store serves as before."""
    spec: dict[str, Any] = {
        "kcp": {"version": "v0.32.1", "binary": make_kcp(bin_dir, "kcp-1", **FAST)},
        # Well above a roll's own handover and probe here, well below kcp's 60 s controller lease.
        "roll": {"probeTimeoutSeconds": 20},
    }
    await scenario.create_shard(stack, **spec)
    await scenario.wait_ready(stack)
    admin = await stack.shard_admin("root")
    await _delete_and_check_clean(stack, secret_kept=True)

    port = await scenario.create_shard(stack, **spec)
    shard = await _ready_or_stalled(stack)
    last = shard["status"]["lastRoll"]
    assert last["result"] == "Succeeded", last
    assert shard["status"]["activeSlot"] == "a"
    again = await stack.shard_admin("root")
    assert (again.token, again.ca_pem) == (admin.token, admin.ca_pem)
    seeded = scenario.condition(await stack.api.get(KCPSLOTS, stack.namespace, "root-a"), "Seeded")
    assert seeded["reason"] == "Seeded" and "copied from Secret root-shared" in seeded["message"]
    async with scenario.traffic(stack, port) as load:
        await scenario.more_requests(load)
    assert load.report.failed == 0, load.report.failures


async def _ready_or_stalled(stack: Stack) -> dict[str, Any]:
    """The shard once its first roll ended, either way."""

    async def ended() -> dict[str, Any] | None:
        shard = await stack.shard("root")
        status = shard.get("status") or {}
        return shard if status.get("lastRoll") and not status.get("rollout") else None

    return await wait_for("the first roll of shard root to end", ended, timeout=90)


async def test_deleting_a_shard_during_a_roll_stops_both_slots(stack: Stack, bin_dir: Path) -> None:
    await scenario.create_shard(
        stack, kcp={"version": "v0.32.1", "binary": make_kcp(bin_dir, "kcp-1", **FAST)}
    )
    await scenario.wait_ready(stack)
    await _running(stack)
    stuck = make_kcp(bin_dir, "kcp-2", never_ready=True, **FAST)
    await stack.api.patch(
        KCPSHARDS,
        stack.namespace,
        "root",
        {"spec": {"kcp": {"binary": stuck}, "roll": {"readyTimeoutSeconds": 120}}},
    )
    await scenario.wait_step(stack, "root", "WaitingReady")

    async def both_run() -> bool:
        return len(scenario.kcp_processes(stack)) == 2

    await wait_for("the new slot's kcp beside the old one", both_run, timeout=60)
    assert await scenario.slot_names(stack) == ["root-a", "root-b"]
    await _delete_and_check_clean(stack, secret_kept=True)
