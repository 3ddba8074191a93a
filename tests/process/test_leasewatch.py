"""LeaseWatch against two stand-in kcps on one etcd: the leader stops, the other takes the lease."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from kcpshard.kcp.client import LEASE_PATH
from kcpshard.kcp.kubeconfig import shard_admin
from kcpshard_testkit.etcd import EtcdServer
from kcpshard_testkit.fakekcp.process import KcpProcess, wait_for
from kcpshard_testkit.leasewatch import LeaseWatch

# Shortened timings for tests only (as in test_fakekcp_leader.py); kcp's are 60 s / 5 s / 2 s.
QUICK = {
    "KCP_FAKE_RSA_BITS": "2048",
    "KCP_FAKE_STARTUP_SECONDS": "0.1",
    "KCP_FAKE_LEASE_DURATION_SECONDS": "3",
    "KCP_FAKE_RENEW_DEADLINE_SECONDS": "1",
    "KCP_FAKE_RETRY_PERIOD_SECONDS": "0.3",
}


def start(kcps: list[KcpProcess], root: Path, etcd: EtcdServer) -> KcpProcess:
    args = [
        "--secure-port=0",
        "--experimental-bind-free-port",
        f"--etcd-servers={etcd.endpoint}",
        "--enable-leader-election",
    ]
    k = KcpProcess(root, args, QUICK)
    kcps.append(k)
    k.start()
    k.wait_ready()
    return k


def holder(c: httpx.Client) -> str | None:
    r = c.get(LEASE_PATH)
    return r.json()["spec"]["holderIdentity"] if r.status_code == 200 else None


async def until(what: str, check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)


async def test_leader_stops_one_handover_with_a_gap(
    kcps: list[KcpProcess], etcd: EtcdServer, tmp_path: Path
) -> None:
    first = await asyncio.to_thread(start, kcps, tmp_path / "a", etcd)
    second = await asyncio.to_thread(start, kcps, tmp_path / "b", etcd)
    by_id = {await asyncio.to_thread(k.identity): k for k in (first, second)}
    assert len(by_id) == 2
    with first.client() as c:
        old_id = await asyncio.to_thread(wait_for, "a lease holder", lambda: holder(c))
    (new_id,) = set(by_id) - {old_id}
    old, new = by_id[old_id], by_id[new_id]
    # Watch through the kcp that stays, with its own CA and shard-admin token.
    admin = shard_admin((new.root / "admin.kubeconfig").read_text())
    watch = LeaseWatch(new.url, admin.token, admin.ca_pem, interval=0.05)
    await watch.start()
    try:
        await until("the old leader in the watch", lambda: watch.holder() == old_id)
        seen = len(watch.observations)
        await until("a renewal by the old leader", lambda: len(watch.observations) > seen)
        await asyncio.to_thread(old.stop)  # SIGTERM: kcp does not release the lease on exit
        await until("the other kcp to take the lease", lambda: watch.holder() == new_id)
        seen = len(watch.observations)
        await until("a renewal by the new leader", lambda: len(watch.observations) > seen)
    finally:
        found = await watch.stop()
    assert len(found) == 1, found
    (handover,) = found
    assert (handover.from_holder, handover.to_holder) == (old_id, new_id)
    assert handover.gap_seconds > 0
    assert handover.first_renewal > handover.last_renewal
    assert handover.gap_seconds == (handover.first_renewal - handover.last_renewal).total_seconds()
    assert watch.polls > watch.failed_polls
