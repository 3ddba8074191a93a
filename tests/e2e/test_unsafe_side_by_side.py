"""A BlueGreen roll across kcp versions that must not run side by side on one store
(docs/design.md#unsafe-version-pairs, kcp/versions.py STORAGE_BOUNDARIES) stalls before anything starts;
with `shape: Single` it rolls.

A client through the front counts failures while the roll is refused: the serving kcp is untouched.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kcpshard.api.models import KcpShardSpec
from kcpshard.k8s.api import KCPSHARDS
from kcpshard.roll.revision import revision_of
from kcpshard_testkit import scenario
from kcpshard_testkit.kcpbin import make_kcp
from kcpshard_testkit.stack import Stack

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(300)]


async def test_an_unsafe_pair_stalls_then_rolls_in_the_single_shape(stack: Stack, bin_dir: Path) -> None:
    binary = make_kcp(bin_dir, "kcp-1", **scenario.FAST)
    port = await scenario.create_shard(stack, kcp={"version": "v0.27.3", "binary": binary})
    await scenario.wait_ready(stack)
    (old_job,) = await scenario.slot_jobs(stack)
    async with scenario.traffic(stack, port) as load:
        await stack.api.patch(KCPSHARDS, stack.namespace, "root", {"spec": {"kcp": {"version": "v0.28.0"}}})
        shard = await scenario.wait_stalled(stack)
        await scenario.more_requests(load)
    stalled = scenario.condition(shard, "Stalled")
    assert stalled["reason"] == "UnsafeSideBySide", stalled
    for words in ("kcp v0.27.3 serves", "kcp v0.28.0", "spec.shape: Single", "allowUnsafeSideBySide"):
        assert words in stalled["message"], stalled["message"]
    assert load.report.failed == 0, load.report.failures
    assert await scenario.slot_jobs(stack) == [old_job]  # nothing started
    event = await scenario.wait_event(stack, "root", "UnsafeSideBySide")
    assert event["type"] == "Warning"

    shard = await stack.api.patch(KCPSHARDS, stack.namespace, "root", {"spec": {"shape": "Single"}})
    revision = revision_of(KcpShardSpec.model_validate(shard["spec"]))
    done = await scenario.wait_last_roll(stack, "root", to_revision=revision, timeout=180)
    last = done["status"]["lastRoll"]
    assert last["result"] == "Succeeded", last
    assert done["status"]["activeSlot"] == "a"  # in place: the old kcp stopped first
    assert (done["status"].get("activeSpec") or {}).get("kcp", {}).get("version") == "v0.28.0"
    assert scenario.condition(done, "Stalled")["status"] == "False"
