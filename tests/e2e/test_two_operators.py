"""Two operator processes watch the same shard (docs/design.md#one-roll-at-a-time): the per-shard Lease
`kcpshard-<shard>` (controller/shardlock.py, after client-go's leader election) lets only its holder act.
When the holder is killed, the other one takes over once the lease expires and rolls the shard. The
operators run as processes beside the cluster, so each one's log can be read; their pods run on the node.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from tests.e2e.test_one_roll_at_a_time import ROLL_LINES, _roll_to

from kcpshard.k8s.api import LEASES
from kcpshard_testkit import scenario
from kcpshard_testkit.kcpbin import make_kcp
from kcpshard_testkit.stack import Process, Stack

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(300)]
OPERATOR_IN_CLUSTER = False


def _acting(log: Path) -> bool:
    text = log.read_text(errors="replace")
    return all(line in text for line in ROLL_LINES)


async def _lease_holder(stack: Stack) -> str | None:
    lease = await stack.api.get(LEASES, stack.namespace, "kcpshard-root")
    return (lease.get("spec") or {}).get("holderIdentity")


async def test_two_operators_only_the_lease_holder_acts(stack: Stack, bin_dir: Path) -> None:
    lease = ("--shard-lease-seconds", "4")
    operators: list[Process] = [
        stack.start_operator(*lease, log="op1.log"),
        stack.start_operator(*lease, log="op2.log"),
    ]
    try:
        port = await scenario.create_shard(
            stack, kcp={"version": "v0.32.1", "binary": make_kcp(bin_dir, "kcp-1", rsa_bits=2048)}
        )
        await scenario.wait_ready(stack)
        async with scenario.traffic(stack, port) as load:
            await _roll_to(stack, make_kcp(bin_dir, "kcp-2", rsa_bits=2048))
            shard = await scenario.wait_last_roll(stack, "root")
            await scenario.wait_settled(stack)
            await scenario.more_requests(load)
        assert shard["status"]["lastRoll"]["result"] == "Succeeded"
        assert shard["status"]["activeSlot"] == "b"
        assert await scenario.flips_to(stack, "root", "a") == 1
        assert await scenario.flips_to(stack, "root", "b") == 1
        holder = await _lease_holder(stack)
        assert holder
        acting = [op for op in operators if _acting(op.log)]
        assert len(acting) == 1, [op.log.name for op in acting]
        (first,) = acting
        assert f"as {holder}" in first.log.read_text()  # the lease names the operator that acted
        (other,) = [op for op in operators if op is not first]
        assert not any(line in other.log.read_text() for line in ROLL_LINES)
        assert load.report.failed == 0, load.report.failures

        # The acting operator dies; the standby takes the shard over once the lease expires.
        os.killpg(first.popen.pid, signal.SIGKILL)
        assert first.popen.wait(timeout=10) == -signal.SIGKILL
        async with scenario.traffic(stack, port) as load:
            await _roll_to(stack, make_kcp(bin_dir, "kcp-3", rsa_bits=2048))
            shard = await scenario.wait_last_roll(stack, "root", timeout=150)
            await scenario.wait_settled(stack)
            await scenario.more_requests(load)
        print("two operators:", load.report.summary())
        assert shard["status"]["lastRoll"]["result"] == "Succeeded"
        assert shard["status"]["activeSlot"] == "a"
        assert _acting(other.log)
        new_holder = await _lease_holder(stack)
        assert new_holder and new_holder != holder
        assert f"as {new_holder}" in other.log.read_text()
        # One flip per roll: the first slot, the first roll, the roll after the takeover.
        assert await scenario.flips_to(stack, "root", "a") == 2
        assert await scenario.flips_to(stack, "root", "b") == 1
        assert load.report.failed == 0, load.report.failures
    finally:
        for op in operators:
            op.stop()
