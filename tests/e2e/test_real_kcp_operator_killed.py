"""Real kcp (`make tools`) on the real node: the operator SIGKILLed at a step of a roll (through a fault
proxy, right after the API server committed the step's status write) and started again; the restarted
operator finishes the roll with one flip and no failed request. The operators run as processes beside
the cluster; their pods run on the node.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from tests.e2e.test_real_kcp import LEASE, READY_TIMEOUT, check_rolled, serving

from kcpshard.k8s.api import KCPSHARDS
from kcpshard.roll.plan import Step
from kcpshard_testkit import scenario
from kcpshard_testkit.faultproxy import status_step_is
from kcpshard_testkit.realkcp import NEWER, real_kcp, real_kcp_processes
from kcpshard_testkit.stack import Stack

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(600)]
OPERATOR_IN_CLUSTER = False

KILL_AT = [Step.WAITING_READY.value, Step.HANDING_OVER_LEASE.value, Step.PROBING.value]


@pytest.mark.parametrize("step", KILL_AT)
async def test_real_kcp_operator_killed_at_a_step_finishes_the_roll(
    stack: Stack, tmp_path: Path, step: str
) -> None:
    kcp = real_kcp(NEWER)
    async with stack.fault_proxy(tmp_path / "proxy") as proxy:
        first = stack.start_operator(*LEASE, kubeconfig=str(proxy.kubeconfig_path), log="operator-1.log")
        port = await serving(stack, kcp)
        async with scenario.traffic(stack, port) as load:
            proxy.arm(status_step_is("root", step), lambda: os.killpg(first.popen.pid, signal.SIGKILL))
            await stack.api.patch(KCPSHARDS, stack.namespace, "root", {"spec": {"extraArgs": ["-v=2"]}})
            await asyncio.wait_for(proxy.fired.wait(), timeout=READY_TIMEOUT)
            assert first.popen.wait(timeout=10) == -signal.SIGKILL
            assert (await stack.shard("root"))["status"]["rollout"]["step"] == step
            stack.start_operator(*LEASE, log="operator-2.log")
            await scenario.wait_ready(stack, timeout=READY_TIMEOUT)
            await scenario.wait_settled(stack, kcps=real_kcp_processes)
            await scenario.more_requests(load)
        report = load.report
    print("real kill at", step, report.summary())
    await check_rolled(stack, port, "b")
    assert await scenario.flips_to(stack, "root", "b") == 1
    assert report.failed == 0, report.failures
