"""Ready means a client gets answers: the shard's store frozen for a while, then thawed.

The store (the shard's etcd) is stopped with SIGSTOP: kcp stays up but its /readyz fails on the etcd
check, so every request that needs the store fails. The shard must say so (Ready=False, Stalled=True
with reason StoreNotReady and a Warning Event naming the store) instead of Ready=True/Serving, and
say Ready=True again by itself once the store answers.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from kcpshard_testkit import scenario
from kcpshard_testkit.stack import Stack
from kcpshard_testkit.waiting import wait_for

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(300)]


def store_pid(endpoint: str) -> int:
    """The etcd process listening on the shards' store endpoint."""
    wanted = f"--listen-client-urls={endpoint}".encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and wanted in scenario.argv(int(entry.name)):
            return int(entry.name)
    raise AssertionError(f"no etcd process serves {endpoint}")


async def test_a_frozen_store_makes_the_shard_not_ready_until_it_answers_again(
    stack: Stack, bin_dir: Path
) -> None:
    await scenario.serving_shard(stack, bin_dir)
    etcd = store_pid(stack.info.etcd_endpoint)
    os.kill(etcd, signal.SIGSTOP)
    try:

        async def says_store_down() -> dict[str, Any] | None:
            shard = await stack.shard("root")
            return shard if scenario.condition(shard, "Stalled").get("reason") == "StoreNotReady" else None

        shard = await wait_for("Stalled=True/StoreNotReady", says_store_down, timeout=60)
    finally:
        os.kill(etcd, signal.SIGCONT)
    ready, stalled = scenario.condition(shard, "Ready"), scenario.condition(shard, "Stalled")
    assert (ready["status"], ready["reason"]) == ("False", "StoreNotReady")
    assert stalled["status"] == "True"
    # kcp checks the store twice (`etcd`, `etcd-readiness`); whichever fails first is the one named.
    store = re.escape(f"cannot reach the store ({stack.info.etcd_endpoint}): ")
    store_line = store + r"\[-\]etcd(-readiness)? failed"
    assert re.search(store_line, stalled["message"]), stalled["message"]
    event = await scenario.wait_event(stack, "root", "StoreNotReady")
    assert event["type"] == "Warning"

    shard = await scenario.wait_ready(stack, timeout=60)  # thawed: serving again, by itself
    assert scenario.condition(shard, "Ready")["reason"] == "Serving"
    assert scenario.condition(shard, "Stalled")["status"] == "False"
