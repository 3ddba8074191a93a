"""`make bench`: time blue/green rolls on this machine and print the figures.

Creates a shard, then rolls it ROLLS times (default 3) while a client sends requests
through the front, and prints each roll's report durations, their median, the client's
counts and the operator's peak memory. Then SINGLE_ROLLS (default 2) rolls in the Single
shape: the planned outage each had, and what a client saw of it.
Figures, not assertions: the tests do not time.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path

from kcpshard.k8s.api import KCPSHARDS
from kcpshard.testing.devenv import default_api
from kcpshard.testing.load import KubeStyleLoad
from kcpshard.testing.stack import Stack, running_stack, shard_manifest, stack_api
from kcpshard.testing.tcp import free_port
from kcpshard.testing.waiting import wait_for

KEYS = ("startToReady", "flip", "oldExit", "leaseHandover", "probe", "drain", "total", "operatorShare")


async def _rolled(stack: Stack, to_slot: str, generation: int) -> dict | None:
    shard = await stack.shard("root")
    status = shard.get("status") or {}
    last = status.get("lastRoll") or {}
    if (
        not status.get("rollout")
        and last.get("toSlot") == to_slot
        and status.get("observedGeneration") == generation
    ):
        return last
    return None


def _peak_rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


async def bench(workdir: Path, rolls: int, singles: int) -> None:
    async with running_stack(workdir, api=stack_api(default=default_api())) as stack:
        print(f"API server: {stack.info.api} (environment up in {stack.info.start_seconds:.1f} s)")
        port = free_port()
        await stack.api.create(
            KCPSHARDS, "default", shard_manifest("root", etcd=stack.info.etcd_endpoint, front_port=port)
        )
        first = await wait_for("the first slot", lambda: _rolled(stack, "a", 1), timeout=120)
        reports = [first]
        admin = await stack.shard_admin("root")
        load = KubeStyleLoad(f"https://127.0.0.1:{port}", admin.token, admin.ca_pem)
        await load.start()
        slot = "a"
        for i in range(rolls):
            slot = "b" if slot == "a" else "a"
            shard = await stack.api.patch(
                KCPSHARDS, "default", "root", {"spec": {"extraArgs": [f"-v={i + 1}"]}}
            )
            generation = shard["metadata"]["generation"]
            reports.append(
                await wait_for(
                    f"roll {i + 1}", lambda s=slot, g=generation: _rolled(stack, s, g), timeout=180
                )
            )
        client = await load.stop()
        # Single shape: the planned outage, and what a client sees of it.
        await stack.api.patch(KCPSHARDS, "default", "root", {"spec": {"shape": "Single"}})
        single_reports = []
        single_load = KubeStyleLoad(f"https://127.0.0.1:{port}", admin.token, admin.ca_pem, max_retries=1)
        await single_load.start()
        for i in range(singles):
            shard = await stack.api.patch(
                KCPSHARDS, "default", "root", {"spec": {"extraArgs": [f"-v={rolls + i + 1}"]}}
            )
            generation = shard["metadata"]["generation"]
            single_reports.append(
                await wait_for(
                    f"single roll {i + 1}", lambda g=generation: _rolled(stack, slot, g), timeout=180
                )
            )
        single_client = await single_load.stop()
        assert stack.operator is not None
        rss = _peak_rss_kib(stack.operator.popen.pid)

    print(f"{'roll':<8}" + "".join(f"{k:>15}" for k in KEYS))
    for i, report in enumerate(reports):
        name = "create" if i == 0 else f"roll {i}"
        row = "".join(f"{report['durations'].get(k, float('nan')):>15.3f}" for k in KEYS)
        print(f"{name:<8}{row}")
    rolled = reports[1:]
    medians = "".join(
        f"{statistics.median(r['durations'].get(k, float('nan')) for r in rolled):>15.3f}" for k in KEYS
    )
    print(f"{'median':<8}{medians}")
    print(f"client through the front: {client.summary()}")
    if single_reports:
        outages = [r["durations"].get("outage", float("nan")) for r in single_reports]
        totals = [r["durations"].get("total", float("nan")) for r in single_reports]
        each = ", ".join(f"{o:.3f}" for o in outages)
        print(
            f"Single shape, {len(single_reports)} rolls: outage median {statistics.median(outages):.3f} s "
            f"(each: {each}), total median {statistics.median(totals):.3f} s"
        )
        print(f"client during the Single rolls (no retries beyond one): {single_client.summary()}")
    if rss is not None:
        print(f"operator peak RSS: {rss / 1024:.1f} MiB")


def main() -> int:
    rolls = int(os.environ.get("ROLLS", "3"))
    singles = int(os.environ.get("SINGLE_ROLLS", "2"))
    workdir = Path(tempfile.mkdtemp(prefix="kcpshard-bench-"))
    asyncio.run(bench(workdir, rolls, singles))
    print(f"logs: {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
