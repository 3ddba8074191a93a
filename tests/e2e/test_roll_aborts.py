"""Failures before the flip abort the roll: the new slot is stopped, the old one keeps serving
through the front without a single failed request, the shard stalls with a reason and a message
that says where to look, an Event says the same, and the next spec change rolls afresh.

Each fault is real: the new revision's kcp binary is a wrapper that makes the stand-in never ready,
crash, or never listen, or it does not exist; the front agent is frozen with SIGSTOP.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from kcpshard.k8s.api import KCPSHARDS, KCPSLOTS, NotFound
from kcpshard_testkit import scenario
from kcpshard_testkit.kcpbin import make_kcp
from kcpshard_testkit.stack import Stack

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(300)]

FAST = scenario.FAST


async def _roll_to(stack: Stack, binary: str, **roll: Any) -> None:
    patch: dict[str, Any] = {"spec": {"kcp": {"binary": binary}}}
    if roll:
        patch["spec"]["roll"] = roll
    await stack.api.patch(KCPSHARDS, stack.namespace, "root", patch)


FAULTS = {
    # name: (wrapper knobs, wrapper command, reason, words in the message). A fault that ends in a
    # timeout gets 6 s; one that ends in an exit gets 60 s, so a slow pod start on a busy machine
    # cannot turn the exit into a timeout.
    "never-ready": (
        {"never_ready": True},
        None,
        "ReadyTimeout",
        ["was not ready within 6s", "Listening=True"],
    ),
    "crashes": (
        {"crash_after_seconds": 0.5},
        None,
        "SlotExited",
        ["exited with code 2", "kubectl logs job/"],
    ),
    "never-listens": ({}, "exec sleep 600", "ReadyTimeout", ["was not ready within 6s", "Listening=Unknown"]),
    "no-binary": (None, None, "SlotExited", ["exited", "kubectl logs job/"]),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
async def test_failure_before_the_flip_aborts_and_the_old_slot_keeps_serving(
    stack: Stack, bin_dir: Path, fault: str
) -> None:
    knobs, command, reason, words = FAULTS[fault]
    good = make_kcp(bin_dir, "kcp-good", **FAST)
    if knobs is None:
        bad = str(bin_dir / "no-such-kcp")
    else:
        bad = make_kcp(bin_dir, "kcp-bad", command=command, **FAST, **knobs)
    port = await scenario.create_shard(stack, kcp={"version": "v0.32.1", "binary": good})
    first = await scenario.wait_ready(stack)
    async with scenario.traffic(stack, port) as load:
        await _roll_to(stack, bad, readyTimeoutSeconds=6 if reason == "ReadyTimeout" else 60)
        shard = await scenario.wait_stalled(stack)
        await scenario.more_requests(load)
        report = load.report
        status = shard["status"]
        stalled = scenario.condition(shard, "Stalled")
        print(fault, stalled, report.summary())
        assert stalled["reason"] == reason, stalled
        for word in words:
            assert word in stalled["message"], stalled["message"]
        assert stalled["message"].startswith("slot a serves revision")
        assert scenario.condition(shard, "Ready")["status"] == "False"
        assert status["activeSlot"] == "a"
        assert status["activeRevision"] == first["status"]["activeRevision"]
        assert status["lastRoll"]["result"] == "Aborted"
        assert status["lastRoll"]["reason"] == reason
        event = await scenario.wait_event(stack, "root", reason)
        assert event["type"] == "Warning" and event["message"] == stalled["message"]
        # The new slot is stopped and removed; only the old kcp runs.
        await scenario.wait_settled(stack)
        with pytest.raises(NotFound):
            await stack.api.get(KCPSLOTS, stack.namespace, "root-b")
        assert await scenario.slot_names(stack) == ["root-a"]
        assert report.failed == 0, report.failures

    # The next spec change rolls afresh, and succeeds (with a ready timeout for a healthy kcp: 6 s
    # includes the pod's start through the Job controller and the agent's, too short on a busy machine).
    fixed = make_kcp(bin_dir, "kcp-fixed", **FAST)
    await _roll_to(stack, fixed, readyTimeoutSeconds=60)
    shard = await scenario.wait_ready(stack, timeout=120)
    assert shard["status"]["lastRoll"]["result"] == "Succeeded"
    assert shard["status"]["activeSlot"] == "b"
    assert scenario.condition(shard, "Stalled")["status"] == "False"
    await scenario.wait_settled(stack)


async def test_front_that_does_not_confirm_the_flip_restores_the_record(stack: Stack, bin_dir: Path) -> None:
    port, _ = await scenario.serving_shard(stack, bin_dir)
    (agent,) = scenario.agent_pids(stack, "front")
    async with scenario.traffic(stack, port) as load:
        os.kill(agent, signal.SIGSTOP)  # the front agent hangs; HAProxy keeps serving slot a
        try:
            await _roll_to(stack, make_kcp(bin_dir, "kcp-2", **FAST), flipTimeoutSeconds=3)
            shard = await scenario.wait_stalled(stack, timeout=120)
        finally:
            os.kill(agent, signal.SIGCONT)
        stalled = scenario.condition(shard, "Stalled")
        assert stalled["reason"] == "FlipTimeout", stalled
        assert "the front did not confirm slot b within 3s" in stalled["message"]
        assert "kubectl logs deployment/root-front" in stalled["message"]
        # The previous record and backend are back.
        assert shard["status"]["activeSlot"] == "a"
        assert shard["status"]["front"]["desiredBackend"] == "a"
        await scenario.wait_settled(stack)
        await scenario.more_requests(load)

        async def front_on_a() -> bool:
            front = (await stack.shard("root"))["status"]["front"]
            return front.get("observedBackend") == "a" and front.get("desiredBackend") == "a"

        await scenario.wait_for("the front on slot a", front_on_a, timeout=30)
        await scenario.more_requests(load)
        assert load.report.failed == 0, load.report.failures
    # The command the message names works, through the API server and the node's log endpoint.
    logs = stack.kubectl("logs", "deployment/root-front", check=False)
    assert logs.returncode == 0, logs.stderr
    assert "new connections now go to slot a" in logs.stdout, logs.stdout[-2000:]
