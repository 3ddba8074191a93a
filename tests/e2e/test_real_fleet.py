"""End to end on a sharded kcp of real binaries: a root shard and two non-root shards (KcpShards the operator
rolls), kcp's cache server and kcp's front-proxy (`kcpshard_testkit.fleet`), upgraded as a fleet from one
`kubectl apply` (the older kcp minor to the newer on all three shards at once).

A workspace on each shard; through kcp's front-proxy a client reads in each of them and a watching client
writes and watches ConfigMaps in each, during every roll. The root rolls first, the others wait
(`WaitingForRootShard`) until it serves the newer kcp and then roll, each blue/green; no watch event is
missed, no read fails (kcp's shutdown answer, a 503 with Retry-After, is retried as client-go retries it),
and a create is lost only as the old kcp stops (WRITES_LOST_PER_ROLL says why). The shards run with no
shutdown delay (`fleet.SHUTDOWN_DELAY_SECONDS`), which narrows that window.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from tests.conftest import Images
from tests.e2e.conftest import new_cluster

from kcpshard.api import conditions as cond
from kcpshard_testkit import scenario
from kcpshard_testkit.fleet import Fleet
from kcpshard_testkit.kubectl import ListWatch
from kcpshard_testkit.leasewatch import LeaseWatch
from kcpshard_testkit.load import KubeStyleLoad
from kcpshard_testkit.realkcp import NEWER, OLDER, RealKcp, on_the_node, real_kcp
from kcpshard_testkit.stack import Stack
from kcpshard_testkit.waiting import wait_for
from kcpshard_testkit.watcher import WatchedWrites

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(2400)]

ROLL_TIMEOUT = 900  # three real kcp rolls, two of them side by side, on a busy 2-core machine
# kcp's front-proxy keeps one HTTP/2 connection to a shard's front, which stays on the old kcp until that kcp
# closes it; a request that reaches the old kcp as it stops is answered 503 "apiserver is shutting down"
# with Retry-After: 1 (k8s.io/apiserver pkg/server/filters/waitgroup.go), which client-go retries
# (rest/with_retry.go, checkWait: any 5xx or 429 with Retry-After), and so do KubeStyleLoad and WatchedWrites.
SHUTTING_DOWN = "apiserver is shutting down"
# kcp closes its quota admission at SIGTERM (pkg/server/server.go, the pre-shutdown hook closing
# quotaAdmissionStopCh; v0.30.0 and v0.31.2), so a create that reaches the old kcp as it stops fails: 502
# from kcp's front-proxy, or 504. With no shutdown delay none was lost in two quiet runs, one was (a 502)
# in a run beside a cold Go build. Lost for client-go too; set to 0 once kcp admits until it has drained.
WRITES_LOST_PER_ROLL = 1
LOST_WRITES = {"create: HTTP 502", "create: HTTP 504"}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def cluster(tmp_path_factory: pytest.TempPathFactory, images: Images) -> AsyncIterator[Stack]:
    """A cluster of its own: on a cluster a session's tests had used, the first start of a non-root
    shard (kcp v0.30.0) once stayed unready for 300 s under CI's load, and the cause was not found (the
    slot's log went with its namespace). Here the fleet runs as it did when it passed."""
    async with new_cluster(tmp_path_factory, images) as stack:
        yield stack


def kcp_spec(kcp: RealKcp) -> dict[str, str]:
    """The binary as users put it on their node (README), at `/var/lib/kcpshard/bin/kcp-<version>`."""
    return {"version": kcp.version, "binary": on_the_node(kcp)}


class Clients:
    """Through kcp's front-proxy, per workspace: a reading client and a watching writer; per shard, its
    controller lease watched through its own front (the leaderless gap of its roll)."""

    def __init__(
        self, fleet: Fleet, workspaces: dict[str, str], admins: dict[str, tuple[str, bytes]]
    ) -> None:
        self.loads = {
            shard: KubeStyleLoad(
                fleet.url, fleet.token, fleet.ca_pem, f"/clusters/root:{ws}/api/v1/namespaces", concurrency=1
            )
            for shard, ws in workspaces.items()
        }
        self.watches = {
            shard: WatchedWrites(fleet.url, fleet.token, fleet.ca_pem, cluster=f"root:{ws}", rate=2.0)
            for shard, ws in workspaces.items()
        }
        self.leases = {
            shard: LeaseWatch(fleet.front(shard), token, ca, interval=0.25)
            for shard, (token, ca) in admins.items()
        }

    async def start(self) -> None:
        for lease in self.leases.values():
            await lease.start()
        for watch in self.watches.values():
            await watch.start()
        for load in self.loads.values():
            await load.start()

        async def warmed() -> bool:
            return all(load.report.ok >= 10 for load in self.loads.values())

        await wait_for("clients answered through kcp's front-proxy", warmed, timeout=60)

    async def stop(self) -> None:
        for load in self.loads.values():
            await scenario.more_requests(load)  # the fleet still answers after the upgrade
            await load.stop()
        for watch in self.watches.values():
            await watch.stop()
        for lease in self.leases.values():
            await lease.stop()


async def test_real_fleet_upgrades_from_one_apply_root_first_blue_green(stack: Stack, tmp_path: Path) -> None:
    older, newer = real_kcp(OLDER), real_kcp(NEWER)
    fleet = Fleet(stack, tmp_path / "fleet")
    progress = ListWatch(Path(stack.info.kubeconfig))  # what a person follows: kubectl kcpshard list -A -w
    try:
        started = time.monotonic()
        await fleet.start(kcp_spec(older))
        workspaces = {shard: f"fleet-{shard}" for shard in fleet.shards}
        for shard, name in workspaces.items():
            ws = await fleet.workspace(name, shard)
            # placed on its shard, whose base URL (its front) kcp gives as the workspace's URL
            assert ws["spec"]["URL"] == f"{fleet.front(shard)}/clusters/root:{name}", ws["spec"]
        print(f"fleet on kcp {older.version} in {time.monotonic() - started:.0f}s")
        cache_before, shards_before = await fleet.cache_view(), await fleet.shard_objects()
        admins = {shard: await fleet.shard_admin_token(shard) for shard in fleet.shards}
        clients = Clients(fleet, workspaces, admins)
        await clients.start()
        await progress.start()
        applied = time.time()
        await fleet.apply(kcp_spec(newer))
        rolled = await asyncio.gather(
            *(scenario.wait_last_roll(stack, shard, timeout=ROLL_TIMEOUT) for shard in fleet.shards)
        )
        fleet_seconds = time.time() - applied
        await clients.stop()
        await progress.stop()
        cache_after, shards_after = await fleet.cache_view(), await fleet.shard_objects()
    finally:
        await progress.stop()
        await fleet.stop()

    ns = stack.namespace
    reports = {shard: body["status"]["lastRoll"] for shard, body in zip(fleet.shards, rolled, strict=True)}
    for shard, body in zip(fleet.shards, rolled, strict=True):
        last = reports[shard]
        gap = clients.leases[shard].handovers()
        load, watch = clients.loads[shard].report, clients.watches[shard].report
        print(
            f"{shard}: {last['result']} {last['fromSlot']}->{last['toSlot']}, "
            f"total {last['durations'].get('total')}s, "
            f"leaderless gap {gap[-1].gap_seconds if gap else None}s, durations {last['durations']}"
        )
        print(f"  through kcp's front-proxy: {load.summary()}")
        print(f"  watching: {watch.summary()}; errors {watch.first_errors}")
        changes = progress.changes(ns, shard, applied)
        print(f"  kubectl kcpshard list -A -w (s, STATUS, VERSION, STEP): {changes}")
        assert last["result"] == "Succeeded", last
        assert (last["shape"], last["fromSlot"], last["toSlot"]) == ("BlueGreen", "a", "b"), last
        assert body["status"]["activeSpec"]["kcp"]["version"] == newer.version
        assert changes[-1][2] == newer.version, changes  # the plugin's last row: the newer kcp
        assert gap, f"no handover of {shard}'s controller lease seen"
        # kcp's shutdown answer (503 with Retry-After) was retried, as client-go does
        assert load.failed == 0, (shard, load.failures)
        assert load.ok > 20
        assert watch.created > 20 and watch.missed_by_watch == 0 and watch.missed == 0, watch.summary()
        # a create's transport error is retried; an answer other than success, or giving up, fails it
        failed = {k: n for k, n in watch.errors.items() if k.startswith(("create: HTTP", "create: gave up"))}
        retried = watch.errors.get("create: retried after HTTP 503", 0)
        assert not retried or SHUTTING_DOWN in watch.first_errors["create: retried after HTTP 503"], watch
        assert set(failed) <= LOST_WRITES and sum(failed.values()) <= WRITES_LOST_PER_ROLL, (shard, failed)
        print(f"  retried after Retry-After: {load.retried_after} reads, {retried} writes; lost: {failed}")
    print(f"fleet {older.version} -> {newer.version} in {fleet_seconds:.1f}s from one apply")
    print(f"the cache server's view (objects by the shard that wrote them): before {cache_before}")
    print(f"  after {cache_after}")
    print(f"Shard objects (baseURL, resourceVersion): before {shards_before}, after {shards_after}")
    # Every slot advertises its shard's front: the front-proxy's index never saw a shard move.
    for shard in fleet.shards:
        assert shards_before[shard][0] == shards_after[shard][0] == fleet.front(shard)

    # Root first: the others held while the root rolled, and started once it served the newer kcp.
    root_flipped = cond.parse_time(reports[fleet.root]["timestamps"]["flipped"])
    root_finished = cond.parse_time(reports[fleet.root]["timestamps"]["finished"])
    for shard in fleet.shards[1:]:
        began = cond.parse_time(reports[shard]["timestamps"]["started"])
        print(
            f"{shard} started {(began - root_flipped).total_seconds():.1f}s after the root's flip, "
            f"{(began - root_finished).total_seconds():.1f}s after the root's roll ended"
        )
        assert "WaitingForRootShard" in [row["STEP"] for _, row in progress.of(ns, shard)], progress.rows
        assert began >= root_flipped, (shard, reports[shard]["timestamps"], reports[fleet.root]["timestamps"])
