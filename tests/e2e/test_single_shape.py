"""The Single shape: a planned outage instead of blue/green, for version pairs that must not run side by
side on one store (docs/design.md#the-single-shape).

The old process stops first, the new revision starts on the same slot `a`, and the front is pointed at
its new port. When the new revision never becomes ready, the old revision is started again on slot `a`
and the front points back at it: the roll ends RolledBack and the shard stalls with the reason.
Every process is real; the fault is a kcp binary whose `/readyz` never turns ok.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kcpshard.api.models import KcpShardSpec
from kcpshard.k8s.api import KCPSHARDS, KCPSLOTS
from kcpshard.kcp.client import KcpClient
from kcpshard.roll.revision import revision_of
from kcpshard_testkit import scenario
from kcpshard_testkit.kcpbin import make_kcp
from kcpshard_testkit.stack import Stack

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(300)]


async def _roll_to(stack: Stack, binary: str, **roll: Any) -> str:
    """Change the kcp binary (and roll settings); returns the revision the shard should end on."""
    patch: dict[str, Any] = {"spec": {"kcp": {"binary": binary}}}
    if roll:
        patch["spec"]["roll"] = roll
    shard = await stack.api.patch(KCPSHARDS, stack.namespace, "root", patch)
    return revision_of(KcpShardSpec.model_validate(shard["spec"]))


async def _report_on(stack: Stack, revision: str) -> dict[str, Any] | None:
    last = ((await stack.shard("root")).get("status") or {}).get("lastRoll") or {}
    return last if last.get("toRevision") == revision else None


async def _lease_holder(stack: Stack, port: int) -> str | None:
    """kcp's controller lease holder, read through the front."""
    admin = await stack.shard_admin("root")
    async with KcpClient(f"https://127.0.0.1:{port}", admin.ca_pem, admin.token) as kcp:
        lease = await kcp.get_lease()
    return ((lease or {}).get("spec") or {}).get("holderIdentity")


async def _single_shard(stack: Stack, bin_dir: Path) -> tuple[int, dict[str, Any]]:
    """A serving shard of the Single shape; its front port and the shard."""
    kcp = {"version": "v0.32.1", "binary": make_kcp(bin_dir, "kcp-1", rsa_bits=2048)}
    port = await scenario.create_shard(stack, shape="Single", kcp=kcp)
    return port, await scenario.wait_ready(stack)


async def test_single_shape_rolls_in_place_with_a_planned_outage(stack: Stack, bin_dir: Path) -> None:
    port, first = await _single_shard(stack, bin_dir)
    assert first["status"]["activeSlot"] == "a"
    (old_job,) = await scenario.slot_jobs(stack)
    async with scenario.traffic(stack, port) as load:
        target = await _roll_to(stack, make_kcp(bin_dir, "kcp-2", rsa_bits=2048))
        assert target != first["status"]["activeRevision"]
        shard = await scenario.wait_last_roll(stack, "root", target)
        await scenario.more_requests(load)  # the front serves again after the outage
    print("single:", load.report.summary(), shard["status"]["lastRoll"]["durations"])
    status = shard["status"]
    last = status["lastRoll"]
    assert last["result"] == "Succeeded", last
    assert last["shape"] == "Single"
    assert last["fromSlot"] == "a" and last["toSlot"] == "a"
    assert last["durations"]["outage"] > 0
    assert status["activeSlot"] == "a" and status["activeRevision"] == target
    assert scenario.condition(shard, "Ready")["status"] == "True"
    assert scenario.condition(shard, "Stalled")["status"] == "False"

    # Same slot, new revision, a new Job (the old one's name is never reused).
    slot = await stack.api.get(KCPSLOTS, stack.namespace, "root-a")
    assert slot["spec"]["revision"] == target
    await scenario.wait_settled(stack)
    (new_job,) = await scenario.slot_jobs(stack)
    assert new_job != old_job and target[:8] in new_job
    assert await scenario.slot_names(stack) == ["root-a"]

    succeeded = [e for e in await scenario.events(stack, "root") if e.get("reason") == "RollSucceeded"]
    assert any("planned outage" in e.get("message", "") for e in succeeded), succeeded

    # The restarted process leads kcp's controllers: the handover named it.
    handed = scenario.condition(slot, "LeaseHandedOver")
    assert handed["status"] == "True", slot["status"]
    assert await _lease_holder(stack, port) == slot["status"]["holderIdentity"]


async def test_single_shape_new_revision_never_ready_restores_the_old_one(
    stack: Stack, bin_dir: Path
) -> None:
    port, first = await _single_shard(stack, bin_dir)
    original = first["status"]["activeRevision"]
    async with scenario.traffic(stack, port) as load:
        bad = make_kcp(bin_dir, "kcp-bad", never_ready=True, rsa_bits=2048)
        target = await _roll_to(stack, bad, readyTimeoutSeconds=6)
        # The first report on the roll to the target, even if another roll followed it at once.
        last = await scenario.wait_for("a report on the roll", lambda: _report_on(stack, target), timeout=90)
        assert last["result"] == "RolledBack", last
        shard = await scenario.wait_stalled(stack)
        await scenario.more_requests(load)  # the old revision serves again
    print("single rollback:", load.report.summary())
    status = shard["status"]
    assert status["lastRoll"] == last
    assert last["reason"] == "ReadyTimeout"
    assert last["shape"] == "Single"
    stalled = scenario.condition(shard, "Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "ReadyTimeout", stalled
    assert f"serves the old revision {original} again" in stalled["message"], stalled["message"]
    assert "was not ready within 6s" in stalled["message"]
    assert scenario.condition(shard, "Ready")["status"] == "False"
    assert status["activeSlot"] == "a" and status["activeRevision"] == original
    assert status["front"]["observedBackend"] == "a"

    event = await scenario.wait_event(stack, "root", "ReadyTimeout")
    assert event["type"] == "Warning"
    assert f"starting the old revision {original} again" in event["message"], event["message"]

    # Slot a runs the original revision again, alone, and leads kcp's controllers.
    await scenario.wait_settled(stack)
    slot = await stack.api.get(KCPSLOTS, stack.namespace, "root-a")
    assert slot["spec"]["revision"] == original
    assert await scenario.slot_names(stack) == ["root-a"]
    assert await _lease_holder(stack, port) == slot["status"]["holderIdentity"]
