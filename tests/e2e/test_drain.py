"""`kubectl drain` of the shard's node: it stops at the shard's PodDisruptionBudget, naming the shard's
pods, and the shard serves on; uncordoned, the node takes pods again and the shard rolls there."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcpshard.k8s.api import KCPSHARDS
from kcpshard_testkit import scenario
from kcpshard_testkit.kcpbin import make_kcp
from kcpshard_testkit.stack import running_stack

pytestmark = pytest.mark.timeout(240)


async def test_a_drain_stops_at_the_shards_budget_and_the_shard_serves_on(tmp_path: Path) -> None:
    async with running_stack(tmp_path / "stack") as stack:
        port, before = await scenario.serving_shard(stack, tmp_path / "bin")
        node = stack.info.node
        async with scenario.traffic(stack, port) as load:
            drain = stack.kubectl(
                "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=12s", check=False
            )
            await scenario.more_requests(load)
            out = drain.stdout + drain.stderr
            print(out)
            assert drain.returncode != 0, out
            assert "Cannot evict pod as it would violate the pod's disruption budget" in out
            assert 'error when evicting pods/"root-front-' in out  # the shard's pods, by name
            assert 'error when evicting pods/"root-a-' in out
            shard = await stack.shard("root")
            assert scenario.condition(shard, "Ready")["status"] == "True"
            assert shard["status"]["activeSlot"] == before["status"]["activeSlot"]

            # The node back in service: a roll places its new slot there.
            stack.kubectl("uncordon", node)
            spec = {"kcp": {"binary": make_kcp(tmp_path / "bin", "kcp-2", **scenario.FAST)}}
            await stack.api.patch(KCPSHARDS, "default", "root", {"spec": spec})
            rolled = await scenario.wait_last_roll(stack, "root", timeout=120)
            await scenario.more_requests(load)
        assert rolled["status"]["lastRoll"]["result"] == "Succeeded", rolled["status"]["lastRoll"]
        assert load.report.failed == 0, load.report.failures
