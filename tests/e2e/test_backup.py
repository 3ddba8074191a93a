"""`roll.backup: true`: the store is snapshotted (etcdctl, in a Job on the node) before the new slot starts.

The snapshot is checked with etcd's own tool, `etcdctl snapshot status`. A backup that fails stops the
roll before anything changed: no new slot, the old one serving, not one failed client request. The fault
is real: a file sits where the backup folder must be, so the Job cannot create it.
"""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kcpshard.k8s.api import JOBS, KCPSHARDS, KCPSLOTS, NotFound
from kcpshard.k8s.builders import shard_state_dir
from kcpshard_testkit import scenario
from kcpshard_testkit.kcpbin import make_kcp
from kcpshard_testkit.stack import Stack

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(300)]

FAST = scenario.FAST


def _backups(stack: Stack) -> Path:
    """Where the shard's backups go, on the node."""
    return Path(f"{shard_state_dir(stack.namespace, 'root')}/backups")


async def _roll_with_backup(stack: Stack, binary: str) -> None:
    spec: dict[str, Any] = {"kcp": {"binary": binary}, "roll": {"backup": True, "readyTimeoutSeconds": 30}}
    await stack.api.patch(KCPSHARDS, stack.namespace, "root", {"spec": spec})


async def test_roll_with_backup_snapshots_the_store_first(stack: Stack, bin_dir: Path) -> None:
    port, _ = await scenario.serving_shard(stack, bin_dir)
    async with scenario.traffic(stack, port) as load:
        await _roll_with_backup(stack, make_kcp(bin_dir, "kcp-2", **FAST))
        shard = await scenario.wait_last_roll(stack, "root")
        await scenario.more_requests(load)
    status = shard["status"]
    last = status["lastRoll"]
    print(last)
    assert last["result"] == "Succeeded", last
    assert status["activeSlot"] == "b"
    backup = last["backup"]
    for key in ("job", "path", "seconds", "sizeBytes"):
        assert key in backup, (key, backup)
    assert backup["job"].startswith("root-backup-")
    assert backup["seconds"] >= 0 and backup["sizeBytes"] > 0
    assert "backedUp" in last["timestamps"]
    assert last["timestamps"]["backedUp"] <= last["timestamps"]["slotStarting"]
    assert "backup" in last["durations"]

    # The snapshot on the node: where the shard's backups go, private, and a valid etcd snapshot.
    snapshot = Path(backup["path"])
    assert snapshot.parent == _backups(stack), snapshot
    assert snapshot.name.endswith(f"-{backup['job']}.db")
    assert snapshot.is_file()
    assert stat.S_IMODE(snapshot.stat().st_mode) == 0o600
    assert snapshot.stat().st_size == backup["sizeBytes"]
    etcdctl = shutil.which("etcdctl") or "/usr/bin/etcdctl"
    checked = subprocess.run(
        [etcdctl, "snapshot", "status", "-w", "json", str(snapshot)],
        capture_output=True,
        text=True,
        env={"ETCDCTL_API": "3"},
        timeout=30,
    )
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["totalKey"] > 0  # the shard's objects are in it

    event = await scenario.wait_event(stack, "root", "BackingUp")
    assert f"(Job {backup['job']})" in event["message"], event["message"]
    job = await stack.api.get(JOBS, stack.namespace, backup["job"])
    assert (job.get("status") or {}).get("succeeded") == 1
    await scenario.wait_settled(stack)
    assert load.report.failed == 0, load.report.failures


async def test_failed_backup_stops_the_roll_before_anything_changes(stack: Stack, bin_dir: Path) -> None:
    port = await scenario.create_shard(
        stack, kcp={"version": "v0.32.1", "binary": make_kcp(bin_dir, "kcp-1", **FAST)}
    )
    first = await scenario.wait_ready(stack)
    # A file where the backup folder must be: etcdctl's Job cannot create the folder.
    blocker = _backups(stack)
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a folder\n")
    created_before = [
        e["message"] for e in await scenario.events(stack, "root") if e.get("reason") == "SlotCreated"
    ]
    async with scenario.traffic(stack, port) as load:
        await _roll_with_backup(stack, make_kcp(bin_dir, "kcp-2", **FAST))
        shard = await scenario.wait_stalled(stack, timeout=90)
        await scenario.more_requests(load)
    stalled = scenario.condition(shard, "Stalled")
    print(stalled)
    assert stalled["reason"] == "BackupFailed", stalled
    message = stalled["message"]
    assert message.startswith("slot a serves revision"), message
    assert "the store backup (Job root-backup-" in message, message
    assert "cannot prepare backup dir" in message and "backups" in message, message
    assert "File exists" in message, message
    status = shard["status"]
    assert status["activeSlot"] == "a"
    assert status["activeRevision"] == first["status"]["activeRevision"]
    assert status["lastRoll"]["result"] == "Aborted" and status["lastRoll"]["reason"] == "BackupFailed"
    event = await scenario.wait_event(stack, "root", "BackupFailed")
    assert event["type"] == "Warning" and event["message"] == message
    # No slot b was ever created: no KcpSlot, no Job, no SlotCreated Event since the roll started.
    with pytest.raises(NotFound):
        await stack.api.get(KCPSLOTS, stack.namespace, "root-b")
    b_jobs = await stack.api.list(
        JOBS, stack.namespace, label_selector="kcpshard.dev/shard=root,kcpshard.dev/slot=b"
    )
    assert b_jobs["items"] == []
    created_after = [
        e["message"] for e in await scenario.events(stack, "root") if e.get("reason") == "SlotCreated"
    ]
    assert created_after == created_before, created_after
    assert all("slot a" in m for m in created_after), created_after
    assert await scenario.slot_names(stack) == ["root-a"]
    assert len(scenario.kcp_processes(stack)) == 1
    assert load.report.failed == 0, load.report.failures
