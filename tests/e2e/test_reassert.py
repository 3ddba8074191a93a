"""After an aborted version upgrade whose new kcp had started
(docs/design.md#re-assert-after-an-aborted-upgrade): the shard says its serving kcp should re-assert its
bootstrap (BootstrapReassertNeeded), and one command, `kubectl kcpshard reassert`, rolls the serving
revision once more; a client through the front sees no failed request, and the failed upgrade stays failed
until the spec or the retry annotation changes.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from kcpshard.k8s.api import KCPSHARDS
from kcpshard_testkit import scenario
from kcpshard_testkit.kcpbin import make_kcp
from kcpshard_testkit.stack import Stack
from kcpshard_testkit.waiting import wait_for

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(300)]

BIN = Path(sys.executable).parent  # kubectl finds the plugin, kubectl-kcpshard, on PATH


async def _kubectl_kcpshard(stack: Stack, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        "kubectl",
        "kcpshard",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={
            **os.environ,
            "KUBECONFIG": stack.info.kubeconfig,
            "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")]),
        },
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
    return proc.returncode or 0, out.decode()


async def test_an_aborted_upgrade_asks_for_a_reassert_and_one_command_runs_it(
    stack: Stack, bin_dir: Path
) -> None:
    good = make_kcp(bin_dir, "kcp-0321", version="v0.32.1", **scenario.FAST)
    never_ready = make_kcp(bin_dir, "kcp-0330", version="v0.33.0", never_ready=True, **scenario.FAST)
    port = await scenario.create_shard(stack, kcp={"version": "v0.32.1", "binary": good})
    await scenario.wait_ready(stack)
    async with scenario.traffic(stack, port) as load:
        upgrade = {
            "kcp": {"version": "v0.33.0", "binary": never_ready},
            "roll": {"readyTimeoutSeconds": 6},
        }
        await stack.api.patch(KCPSHARDS, stack.namespace, "root", {"spec": upgrade})
        shard = await scenario.wait_stalled(stack)
        assert scenario.condition(shard, "Stalled")["reason"] == "ReadyTimeout"
        needed = scenario.condition(shard, "BootstrapReassertNeeded")
        assert needed.get("status") == "True", shard["status"]["conditions"]
        for words in ("kcp v0.33.0 started during the aborted upgrade", "kubectl kcpshard reassert root"):
            assert words in needed["message"], needed["message"]
        await scenario.wait_event(stack, "root", "BootstrapReassertNeeded")

        code, out = await _kubectl_kcpshard(stack, "reassert", "root")
        assert code == 0 and "reassert requested" in out, out

        async def reasserted() -> dict[str, Any] | None:
            status = (await stack.shard("root")).get("status") or {}
            last = status.get("lastRoll") or {}
            return status if last.get("reassertToken") and not status.get("rollout") else None

        status = await wait_for("the re-assert roll", reasserted, timeout=120)
        await scenario.more_requests(load)
    last = status["lastRoll"]
    assert last["result"] == "Succeeded", last
    assert (last["fromSlot"], last["toSlot"]) == ("a", "b")
    assert last["fromRevision"] == last["toRevision"]  # the serving revision, once more
    assert "re-asserted its bootstrap" in last["message"]
    assert status["activeSpec"]["kcp"]["version"] == "v0.32.1"
    assert status["failedRoll"]["result"] == "Aborted"  # the upgrade itself is still failed
    shard = await stack.shard("root")
    needed = scenario.condition(shard, "BootstrapReassertNeeded")
    assert (needed["status"], needed["reason"]) == ("False", "Reasserted"), needed
    # The spec still asks for the failed upgrade: it stays stalled, and the re-assert is not repeated.
    shard = await scenario.wait_stalled(stack)
    assert scenario.condition(shard, "Stalled")["reason"] == "ReadyTimeout"
    assert shard["status"]["lastRoll"]["reassertToken"] == last["reassertToken"]
    assert load.report.failed == 0, load.report.failures
