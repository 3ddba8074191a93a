"""The front's own life: a front that never starts stalls the shard as FrontFailed, naming the node and
its pod's state; a front replaced on a serving shard (a changed template: here the agent's command, as
an operator upgrade changes its image) is make before break, the new pod sharing the port with the old
one until it serves, and one that never comes up leaves the old one serving. On the real control plane
(its Deployment controller runs the RollingUpdate), with a client through the front counting failures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kcpshard.k8s import names
from kcpshard.k8s.api import DEPLOYMENTS, KCPSHARDS, PODS
from kcpshard_testkit import scenario
from kcpshard_testkit.stack import Stack
from kcpshard_testkit.waiting import wait_for

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(300)]
OPERATOR_IN_CLUSTER = False  # each test runs its own, restarted with another agent command

FRONT_TIMEOUT = {"roll": {"frontStartTimeoutSeconds": 8}}


async def _front_pods(stack: Stack, shard: str = "root") -> list[dict[str, Any]]:
    selector = f"kcpshard.dev/shard={shard},kcpshard.dev/component=front"
    return (await stack.api.list(PODS, stack.namespace, label_selector=selector))["items"]


def _restart_operator(stack: Stack, agent_command: str, log: str) -> None:
    assert stack.operator is not None
    stack.operator.stop()
    stack.start_operator("--agent-command", agent_command, log=log)


async def test_a_new_shard_whose_front_never_starts_stalls_naming_the_node_and_pod(stack: Stack) -> None:
    stack.start_operator()
    await scenario.create_shard(stack, "lost", node="no-such-node", **FRONT_TIMEOUT)
    shard = await scenario.wait_stalled(stack, "lost", timeout=60)
    stalled = scenario.condition(shard, "Stalled")
    print(stalled)
    assert stalled["reason"] == "FrontFailed", stalled
    message = stalled["message"]
    assert "the front on node no-such-node has not been available for 8s" in message
    assert "is Pending" in message or "no pod of deployment lost-front exists" in message, message
    assert "check that node no-such-node exists" in message
    event = await scenario.wait_event(stack, "lost", "FrontFailed")
    assert event["type"] == "Warning"
    assert await scenario.slot_names(stack, "lost") == []  # nothing started without a front


async def test_a_front_replacement_is_make_before_break_and_one_that_never_starts_leaves_the_old(
    stack: Stack,
    bin_dir: Path,
) -> None:
    own = "kcpshard"  # the agents' command in the image
    stack.start_operator()
    port, _ = await scenario.serving_shard(stack, bin_dir, **FRONT_TIMEOUT)
    [first] = [p["metadata"]["name"] for p in await _front_pods(stack)]
    async with scenario.traffic(stack, port) as load:
        # A working new template (as an operator upgrade brings): the new pod serves before the old goes.
        _restart_operator(stack, f"env KCPSHARD_FRONT_TEMPLATE=2 {own}", "operator-2.log")

        async def replaced() -> list[str] | None:
            pods = [p["metadata"]["name"] for p in await _front_pods(stack)]
            return pods if first not in pods and len(pods) == 1 else None

        [second] = await wait_for("the front replaced", replaced, timeout=90)
        await scenario.wait_ready(stack)
        await scenario.more_requests(load)
        replaced_report = load.report.summary()
        failed_in_replacement = load.report.failed

        # A template whose agent cannot start: the new pod crash-loops, the old one serves on.
        _restart_operator(stack, "false", "operator-3.log")
        shard = await scenario.wait_stalled(stack, timeout=90)
        await scenario.more_requests(load)
        stalled = scenario.condition(shard, "Stalled")
        assert stalled["reason"] == "FrontFailed", stalled
        assert f"the new front on node {stack.info.node} did not become ready within 8s" in stalled["message"]
        assert "the front it replaces serves on" in stalled["message"]
        assert second in [p["metadata"]["name"] for p in await _front_pods(stack)]

        # The working template again: the crash-looping pod goes, the shard is Ready.
        _restart_operator(stack, f"env KCPSHARD_FRONT_TEMPLATE=2 {own}", "operator-4.log")
        await scenario.wait_ready(stack, timeout=90)
        await scenario.more_requests(load)
    print("replacement:", replaced_report, "whole run:", load.report.summary())
    assert failed_in_replacement == 0, load.report.failures
    assert load.report.failed == 0, load.report.failures
    deployment = await stack.api.get(DEPLOYMENTS, stack.namespace, names.front_name("root"))
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert (await stack.api.get(KCPSHARDS, stack.namespace, "root"))["status"]["activeSlot"] == "a"
