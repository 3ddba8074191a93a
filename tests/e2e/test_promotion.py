"""The promotion gate and a person's abort, on real rolls, steered with the real kubectl and the plugin.

With `spec.roll.autoPromote: false` a roll stops once its new slot is ready: the old slot serves (a
client through the front sees no failure) until `kubectl kcpshard promote`, or until `abort`, or
until `promotionDeadlineSeconds` passes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.e2e.test_plugin_status import _env, _finish, _plugin

from kcpshard.k8s.api import KCPSHARDS, KCPSLOTS
from kcpshard_testkit import record, scenario
from kcpshard_testkit.kcpbin import make_kcp
from kcpshard_testkit.stack import Stack
from kcpshard_testkit.waiting import wait_for

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(300)]


async def waiting_for_promotion(stack: Stack) -> dict[str, Any]:
    async def waiting() -> dict[str, Any] | None:
        shard = await stack.shard("root")
        reconciling = scenario.condition(shard, "Reconciling")
        return shard if reconciling.get("reason") == "WaitingForPromotion" else None

    return await wait_for("Reconciling=True/WaitingForPromotion", waiting, timeout=60)


async def gated_roll(stack: Stack, bin_dir: Path, binary: str, **roll: Any) -> dict[str, Any]:
    """A roll with autoPromote: false, once it waits for promotion."""
    spec = {
        "kcp": {"binary": make_kcp(bin_dir, binary, **scenario.FAST)},
        "roll": {"autoPromote": False, **roll},
    }
    await stack.api.patch(KCPSHARDS, stack.namespace, "root", {"spec": spec})
    return await waiting_for_promotion(stack)


async def test_a_gated_roll_waits_with_the_old_slot_serving_until_promoted(
    stack: Stack, bin_dir: Path, tmp_path: Path
) -> None:
    port, _ = await scenario.serving_shard(stack, bin_dir)
    env = _env(stack, tmp_path / "home")
    async with scenario.traffic(stack, port) as load:
        shard = await gated_roll(stack, bin_dir, "kcp-2")
        record.record("kcpshard-waiting-for-promotion", shard)
        status = shard["status"]
        assert status["rollout"]["step"] == "Flipping"
        assert (status["activeSlot"], status["front"]["observedBackend"]) == ("a", "a")
        assert scenario.condition(shard, "Ready")["status"] == "False"
        assert scenario.condition(shard, "Stalled")["status"] == "False"
        new_slot = await stack.api.get(KCPSLOTS, stack.namespace, "root-b")
        assert scenario.condition(new_slot, "Ready")["status"] == "True"
        waited = await scenario.wait_event(stack, "root", "WaitingForPromotion")
        assert "kubectl kcpshard promote root" in waited["message"]

        code, out, err = await _finish(await _plugin(env, "status", "root"))
        assert code == 0 and "Paused" in out, (out, err)
        await scenario.more_requests(load)  # still served by slot a meanwhile

        code, out, err = await _finish(await _plugin(env, "promote", "root"))
        assert code == 0 and "promote requested" in out, (out, err)
        shard = await scenario.wait_ready(stack, timeout=120)
        await scenario.wait_settled(stack)
        await scenario.more_requests(load)
    assert shard["status"]["activeSlot"] == "b"
    assert shard["status"]["lastRoll"]["result"] == "Succeeded"
    assert await scenario.flips_to(stack, "root", "b") == 1
    assert load.report.failed == 0, load.report.failures


async def test_abort_and_the_promotion_deadline_keep_the_old_slot_serving(
    stack: Stack, bin_dir: Path, tmp_path: Path
) -> None:
    port, _ = await scenario.serving_shard(stack, bin_dir)
    env = _env(stack, tmp_path / "home")
    async with scenario.traffic(stack, port) as load:
        # abort while it waits: the new slot goes, slot a serves on
        await gated_roll(stack, bin_dir, "kcp-2")
        code, out, err = await _finish(await _plugin(env, "abort", "root"))
        assert code == 0 and "abort requested" in out, (out, err)
        shard = await scenario.wait_stalled(stack)
        assert scenario.condition(shard, "Stalled")["reason"] == "Aborted"
        assert "aborted at step Flipping on request" in scenario.condition(shard, "Stalled")["message"]
        assert shard["status"]["lastRoll"]["result"] == "Aborted"
        await scenario.wait_settled(stack)
        assert await scenario.slot_names(stack) == ["root-a"]

        # nobody promotes: the deadline aborts it by itself
        await gated_roll(stack, bin_dir, "kcp-3", promotionDeadlineSeconds=5)
        shard = await scenario.wait_stalled(stack)
        stalled = scenario.condition(shard, "Stalled")
        assert stalled["reason"] == "PromotionDeadlineExceeded", stalled
        assert "not promoted within 5s" in stalled["message"]
        await scenario.wait_settled(stack)
        await scenario.more_requests(load)
    assert shard["status"]["activeSlot"] == "a"
    assert await scenario.slot_names(stack) == ["root-a"]
    assert await scenario.flips_to(stack, "root", "b") == 0
    assert load.report.failed == 0, load.report.failures
