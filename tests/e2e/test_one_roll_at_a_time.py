"""Only one roll per shard at a time (docs/design.md#one-roll-at-a-time).

- A spec change during a roll is queued: the roll under way finishes on the revision it started with,
  then a second roll takes the shard to the newest spec.
- Two operator processes watch the same shard: test_two_operators.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kcpshard.api.models import KcpShardSpec
from kcpshard.k8s.api import KCPSHARDS
from kcpshard.roll.revision import revision_of
from kcpshard_testkit import scenario
from kcpshard_testkit.kcpbin import make_kcp
from kcpshard_testkit.stack import Stack
from kcpshard_testkit.waiting import wait_for

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(300)]


# Lines the acting operator logs for a roll (its Events are logged as "<reason>: <message>").
ROLL_LINES = ("RollStarted:", "SlotCreated:", "Flipping:")


async def _roll_to(stack: Stack, binary: str) -> str:
    """Change the kcp binary; returns the revision of the new spec."""
    shard = await stack.api.patch(KCPSHARDS, stack.namespace, "root", {"spec": {"kcp": {"binary": binary}}})
    return revision_of(KcpShardSpec.model_validate(shard["spec"]))


async def test_spec_change_during_a_roll_waits_for_it_to_end(stack: Stack, bin_dir: Path) -> None:
    port = await scenario.create_shard(
        stack, kcp={"version": "v0.32.1", "binary": make_kcp(bin_dir, "kcp-1", rsa_bits=2048)}
    )
    first = await scenario.wait_ready(stack)
    created = len([r for r in await scenario.event_reasons(stack, "root") if r == "RollStarted"])
    async with scenario.traffic(stack, port) as load:
        second = await _roll_to(stack, make_kcp(bin_dir, "kcp-2", startup_seconds=5, rsa_bits=2048))
        at_wait = await scenario.wait_step(stack, "root", "WaitingReady")
        assert at_wait["status"]["rollout"]["targetRevision"] == second
        third = await _roll_to(stack, make_kcp(bin_dir, "kcp-3", rsa_bits=2048))
        assert len({first["status"]["activeRevision"], second, third}) == 3

        # Record every roll target and every report seen until the shard settles on the third spec.
        targets: list[str] = []
        reports: list[tuple[str, str]] = []

        async def settled() -> dict[str, Any] | None:
            shard = await stack.shard("root")
            status = shard.get("status") or {}
            target = (status.get("rollout") or {}).get("targetRevision")
            if target and (not targets or targets[-1] != target):
                targets.append(target)
            report = status.get("lastRoll") or {}
            last = report.get("toRevision")
            if last and (not reports or reports[-1][0] != last):
                reports.append((last, report.get("result", "")))
            ready = scenario.condition(shard, "Ready").get("status") == "True"
            return shard if ready and not status.get("rollout") and last == third else None

        shard = await wait_for("the shard on the third spec", settled, timeout=150)
        await scenario.more_requests(load)
    print("queued:", load.report.summary(), "targets", targets, "reports", reports)
    assert targets == [second, third]  # the first roll kept its target; the second came after it
    # The creation roll's report, then the first roll's, then the second's: each finished in turn.
    done = "Succeeded"
    assert reports == [(first["status"]["activeRevision"], done), (second, done), (third, done)]
    status = shard["status"]
    assert status["lastRoll"]["result"] == "Succeeded"
    assert status["activeRevision"] == third and status["activeSlot"] == "a"
    assert status["observedGeneration"] == shard["metadata"]["generation"]
    started = [r for r in await scenario.event_reasons(stack, "root") if r == "RollStarted"]
    assert len(started) - created == 2
    await scenario.wait_settled(stack)
    assert load.report.failed == 0, load.report.failures
