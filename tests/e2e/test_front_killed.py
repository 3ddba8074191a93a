"""An HAProxy process of the front SIGKILLed in the middle of a roll.

The front runs two HAProxy containers on one port (SO_REUSEPORT): the other one takes every new
connection while the kubelet starts the dead one again. A client started
after the kill sees no failure at all; the client that was running when it happened loses at most the
requests in flight on the dead process's connections (printed). The roll goes on and succeeds, the
shard's status counts the restart and the operator says so in a Warning Event.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from kcpshard.k8s.api import KCPSHARDS
from kcpshard_testkit import scenario
from kcpshard_testkit.kcpbin import make_kcp
from kcpshard_testkit.stack import Stack
from kcpshard_testkit.waiting import wait_for

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(300)]


def haproxy_pids(stack: Stack) -> dict[str, int]:
    """The front's HAProxy processes by member name (haproxy-0, haproxy-1)."""
    found = {}
    for pid, args in scenario.processes(stack).items():
        if args and args[0].endswith(b"haproxy"):
            config = next((a.decode() for a in args if a.endswith(b"haproxy.cfg")), "")
            found[Path(config).parent.name] = pid
    return found


async def test_haproxy_killed_mid_roll_loses_no_new_connection(stack: Stack, bin_dir: Path) -> None:
    port, _ = await scenario.serving_shard(stack, bin_dir)
    pids = haproxy_pids(stack)
    assert sorted(pids) == ["haproxy-0", "haproxy-1"], pids
    async with scenario.traffic(stack, port) as during:
        spec = {"kcp": {"binary": make_kcp(bin_dir, "kcp-2", **scenario.FAST)}}
        await stack.api.patch(KCPSHARDS, stack.namespace, "root", {"spec": spec})
        await scenario.wait_step(stack, "root", "WaitingReady")
        killed = pids["haproxy-0"]
        os.kill(killed, signal.SIGKILL)

        async def dead() -> bool:
            return scenario.exited(killed)

        await wait_for("the killed HAProxy to be gone", dead, timeout=10)
        async with scenario.traffic(stack, port) as after:
            shard = await scenario.wait_ready(stack, timeout=120)
            await scenario.wait_settled(stack)
            await scenario.more_requests(after)
    print("running at the kill:", during.report.summary(), during.report.failures)
    print("started after it:", after.report.summary())
    assert shard["status"]["lastRoll"]["result"] == "Succeeded"
    assert shard["status"]["activeSlot"] == "b"
    assert after.report.failed == 0, after.report.failures
    front = shard["status"]["front"]
    assert front["restarts"] == 1 and front["lastRestart"].startswith("haproxy-0 "), front
    event = await scenario.wait_event(stack, "root", "FrontRestarted")
    assert event["type"] == "Warning"
    assert "haproxy-0 " in event["message"]
    restarted = haproxy_pids(stack)
    assert sorted(restarted) == ["haproxy-0", "haproxy-1"] and restarted["haproxy-0"] != killed
    assert restarted["haproxy-1"] == pids["haproxy-1"]  # the other one never stopped
