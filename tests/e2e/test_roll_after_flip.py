"""Failures at or after the flip: the roll never flips back on a live store behind the user's back.

No new lease holder in time or a probe workspace that never becomes Ready ends the roll as Failed
with a reason (the new slot keeps serving); an old slot that ignores SIGTERM is killed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kcpshard.k8s.api import KCPSHARDS
from kcpshard_testkit import scenario
from kcpshard_testkit.kcpbin import make_kcp
from kcpshard_testkit.stack import Stack

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(300)]

FAST = scenario.FAST

POST_FLIP = {
    # name: (knobs of the new kcp, roll timeouts, reason, words in the message)
    # The new kcp tries for the lease once, while the old one holds it, and not again for an hour.
    "no-new-leader": (
        {"retry_period_seconds": 3600},
        {"leaseTimeoutSeconds": 4},
        "LeaseTimeout",
        ["no new holder"],
    ),
    # Its workspace controller never runs: the probe workspace never becomes Ready.
    "probe-never-ready": (
        {"controller_period_seconds": 3600},
        {"probeTimeoutSeconds": 4},
        "ProbeFailed",
        ["did not become Ready within"],
    ),
}


@pytest.mark.parametrize("fault", sorted(POST_FLIP))
async def test_failure_after_the_flip_stalls_and_never_flips_back(
    stack: Stack, bin_dir: Path, fault: str
) -> None:
    knobs, roll, reason, words = POST_FLIP[fault]
    port, _ = await scenario.serving_shard(stack, bin_dir)
    async with scenario.traffic(stack, port) as load:
        bad = make_kcp(bin_dir, "kcp-2", **FAST, **knobs)
        await stack.api.patch(
            KCPSHARDS, stack.namespace, "root", {"spec": {"kcp": {"binary": bad}, "roll": roll}}
        )
        shard = await scenario.wait_stalled(stack, timeout=120)
        await scenario.more_requests(load)
    stalled = scenario.condition(shard, "Stalled")
    print(fault, stalled, load.report.summary())
    assert stalled["reason"] == reason, stalled
    for word in words:
        assert word in stalled["message"], stalled["message"]
    status = shard["status"]
    assert status["lastRoll"]["result"] == "Failed" and status["lastRoll"]["reason"] == reason
    # No flip back: the new slot serves; the old one was stopped before the failure.
    assert status["activeSlot"] == "b"
    assert status["front"]["observedBackend"] == "b"
    event = await scenario.wait_event(stack, "root", reason)
    assert event["type"] == "Warning"
    assert len(scenario.kcp_processes(stack)) == 1
    # It stays stalled (no retry loop behind the user's back) until the spec changes.
    again = await stack.shard("root")
    assert scenario.condition(again, "Stalled")["status"] == "True"
    assert (
        "change the spec, or retry with: kubectl annotate kcpshard root kcpshard.dev/retry"
        in (scenario.condition(again, "Stalled")["message"])
    )
    # A spec change (a fixed binary) rolls again, and succeeds.
    await stack.api.patch(
        KCPSHARDS, stack.namespace, "root", {"spec": {"kcp": {"binary": make_kcp(bin_dir, "kcp-3", **FAST)}}}
    )
    shard = await scenario.wait_ready(stack, timeout=120)
    assert shard["status"]["lastRoll"]["result"] == "Succeeded"
    assert shard["status"]["activeSlot"] == "a"


async def test_old_slot_that_ignores_sigterm_is_killed(stack: Stack, bin_dir: Path) -> None:
    stubborn = make_kcp(bin_dir, "kcp-stubborn", ignore_sigterm=True, **FAST)
    port = await scenario.create_shard(stack, kcp={"version": "v0.32.1", "binary": stubborn})
    await scenario.wait_ready(stack)
    (old_pid,) = scenario.kcp_processes(stack)
    async with scenario.traffic(stack, port) as load:
        await stack.api.patch(
            KCPSHARDS,
            stack.namespace,
            "root",
            {
                "spec": {
                    "kcp": {"binary": make_kcp(bin_dir, "kcp-2", **FAST)},
                    "roll": {"stopTimeoutSeconds": 3},
                }
            },
        )
        shard = await scenario.wait_ready(stack, timeout=120)
        await scenario.more_requests(load)
    assert shard["status"]["lastRoll"]["result"] == "Succeeded"
    # The agent killed kcp at the shard's 3 s (read at SIGTERM; its Job was made with the default),
    # and reported the exit before the lease was handed over: the pod was never force-deleted.
    killed = await scenario.wait_event(stack, "root", "SlotKilled")
    assert killed["message"] == "slot a's kcp did not exit within 3s of SIGTERM: its host agent killed it"
    assert not Path(f"/proc/{old_pid}").exists()
    await scenario.wait_settled(stack)
    assert load.report.failed == 0, load.report.failures
