"""`make demo FLEET=1`: a sharded kcp on real binaries upgraded as a fleet from one `kubectl apply`.

A root shard and two non-root shards (KcpShards), kcp's cache server and kcp's front-proxy
(`kcpshard_testkit.fleet`), all on kcp v0.30.0; a workspace on each shard with a client reading in it
through kcp's front-proxy; then one apply moves every shard to v0.31.2. The root rolls first, the others
wait (WaitingForRootShard) and then roll, each blue/green; `kubectl kcpshard list -A -w` shows it as it
goes, then each roll's report and what the clients saw. tests/e2e/test_real_fleet.py asserts the same run.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from kcpshard.api import conditions as cond
from kcpshard_testkit.fleet import Fleet
from kcpshard_testkit.image import build_image
from kcpshard_testkit.kubectl import ListWatch
from kcpshard_testkit.load import KubeStyleLoad
from kcpshard_testkit.namespaces import close_namespace, open_namespace
from kcpshard_testkit.realkcp import NEWER, OLDER, on_the_node, real_kcp
from kcpshard_testkit.stack import NodeImages, Stack, running_stack
from kcpshard_testkit.waiting import wait_for

TIMEOUT = 900.0


def say(text: str) -> None:
    print(f"\n=== {text}", flush=True)


async def rolled(stack: Stack, fleet: Fleet, timeout: float) -> None:
    """Until every shard of the fleet has rolled to its spec: seen, no roll under way, none waiting."""

    async def done() -> bool:
        for name in fleet.shards:
            body = await stack.shard(name)
            status = body.get("status") or {}
            reason = (cond.find(status.get("conditions"), "Reconciling") or {}).get("reason")
            if (
                status.get("observedGeneration") != body["metadata"]["generation"]
                or status.get("rollout")
                or reason == "WaitingForRootShard"
            ):
                return False
        return True

    await wait_for("the fleet rolled", done, timeout=timeout, interval=0.5)


async def demo(workdir: Path) -> None:
    older, newer = real_kcp(OLDER), real_kcp(NEWER)
    say("the images from the Dockerfile, then the cluster with the operator in it")
    product, test = build_image("product"), build_image("test")
    node = NodeImages(tars=(product.tar, test.tar), operator=product.name)
    async with running_stack(workdir / "cluster", node=node) as cluster:
        stack = await open_namespace(cluster, "fleet")
        fleet = Fleet(stack, workdir / "fleet")
        try:
            say(f"kcp's cache server, three KcpShards on kcp {older.version}, kcp's front-proxy")
            await fleet.start({"version": older.version, "binary": on_the_node(older)})
            print(stack.kubectl("get", "kcpshards").stdout, flush=True)
            loads = {}
            for shard in fleet.shards:
                ws = await fleet.workspace(f"demo-{shard}", shard)
                print(f"workspace root:demo-{shard} on shard {shard}: {ws['spec']['URL']}", flush=True)
                path = f"/clusters/root:demo-{shard}/api/v1/namespaces"
                loads[shard] = KubeStyleLoad(fleet.url, fleet.token, fleet.ca_pem, path, concurrency=1)
                await loads[shard].start()
            say(f"clients read in each workspace through kcp's front-proxy ({fleet.url})")

            say(f"one kubectl apply: every shard to kcp {newer.version}")
            print("kubectl kcpshard list -A -w: a row per change", flush=True)
            listing = ListWatch(Path(stack.info.kubeconfig), echo=True)
            await listing.start()
            applied = time.monotonic()
            await fleet.apply({"version": newer.version, "binary": on_the_node(newer)})
            try:
                await rolled(stack, fleet, TIMEOUT)
            finally:
                await listing.stop()
            seconds = time.monotonic() - applied

            say("the rolls (status.lastRoll) and the clients")
            for shard in fleet.shards:
                last = (await stack.shard(shard))["status"]["lastRoll"]
                d = last["durations"]
                print(
                    f"{shard:<6} {last['result']} {last['fromSlot']}->{last['toSlot']}  "
                    f"total {d['total']:.1f}s  kcp start to ready {d.get('kcpStartToReady', 0):.1f}s  "
                    f"lease handover {d['leaseHandover']:.1f}s"
                )
                report = await loads[shard].stop()
                print(f"       {report.summary()}", flush=True)
                for failure in report.failures[
                    :3
                ]:  # kcp's answers while it stops (tests/e2e/test_real_fleet.py)
                    print(f"       failed: {failure[:160]}", flush=True)
            say(f"the fleet rolled from one apply in {seconds:.1f}s")
        finally:
            await fleet.stop()
            await close_namespace(stack)


if __name__ == "__main__":  # the same as `make demo FLEET=1`
    import demo as demos

    sys.exit(demos.run(demo, "kcpshard-demo-fleet-"))
