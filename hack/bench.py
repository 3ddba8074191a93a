"""`make bench`: time blue/green rolls on this machine and print the figures.

Creates a shard, then rolls it ROLLS times (default 3) while a client sends requests
through the front, and prints each roll's report durations, their median, the client's
counts and the operator's peak memory. Then SINGLE_ROLLS (default 2) rolls in the Single
shape: the planned outage each had, and what a client saw of it.
Figures, not assertions: the tests do not time.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from kcpshard.api.models import SlotName
from kcpshard.k8s import names
from kcpshard.k8s.api import KCPSHARDS, KCPSLOTS
from kcpshard.testing.devenv import default_api
from kcpshard.testing.load import KubeStyleLoad, LoadReport
from kcpshard.testing.stack import Stack, running_stack, shard_manifest, stack_api
from kcpshard.testing.tcp import free_port
from kcpshard.testing.waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]
# The front's cost: this many client workers, this long each way (twice, alternated).
FRONT_CONCURRENCY = 4
FRONT_SECONDS = 10.0
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


async def _load(url: str, token: str, ca_pem: bytes, seconds: float) -> LoadReport:
    """A kube-style client (FRONT_CONCURRENCY workers) against `url` for `seconds`."""
    load = KubeStyleLoad(url, token, ca_pem, concurrency=FRONT_CONCURRENCY)
    await load.start()
    await asyncio.sleep(seconds)  # a measurement window
    return await load.stop()


async def front_cost(stack: Stack, port: int, seconds: float) -> dict[str, float]:
    """The same client straight to the serving slot's port and through the front, alternated twice."""
    admin = await stack.shard_admin("root")
    active = SlotName((await stack.shard("root"))["status"]["activeSlot"])
    slot = await stack.api.get(KCPSLOTS, "default", names.slot_object_name("root", active))
    direct, front = LoadReport(), LoadReport()
    for _ in range(2):
        for total, target in ((direct, slot["status"]["port"]), (front, port)):
            run = await _load(f"https://127.0.0.1:{target}", admin.token, admin.ca_pem, seconds)
            total.ok, total.failed = total.ok + run.ok, total.failed + run.failed
            total.seconds += run.seconds
            total.latencies += run.latencies
    direct_rps, front_rps = direct.ok / direct.seconds, front.ok / front.seconds
    return {
        "directRps": round(direct_rps, 1),
        "frontRps": round(front_rps, 1),
        "ratio": round(front_rps / direct_rps, 3),
        "p50MsDirect": round(direct.percentile(50) * 1000, 2),
        "p50MsFront": round(front.percentile(50) * 1000, 2),
        "p99MsDirect": round(direct.percentile(99) * 1000, 2),
        "p99MsFront": round(front.percentile(99) * 1000, 2),
        "failed": direct.failed + front.failed,
    }


async def bench(workdir: Path, rolls: int, singles: int) -> None:
    results: dict[str, Any] = {"machine": _machine()}
    async with running_stack(workdir, api=stack_api(default=default_api())) as stack:
        print(f"API server: {stack.info.api} (environment up in {stack.info.start_seconds:.1f} s)")
        results["machine"]["apiServer"] = stack.info.api
        port = free_port()
        await stack.api.create(
            KCPSHARDS, "default", shard_manifest("root", etcd=stack.info.etcd_endpoint, front_port=port)
        )
        first = await wait_for("the first slot", lambda: _rolled(stack, "a", 1), timeout=120)
        reports = [first]
        front = await front_cost(stack, port, FRONT_SECONDS)
        results["front"] = front
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
    print(
        f"\nThe front's cost (stand-in kcp, {FRONT_CONCURRENCY} workers, 2 x {FRONT_SECONDS:g} s each way):\n"
        "| | requests/s | p50 ms | p99 ms |\n|---|---|---|---|\n"
        f"| straight to the slot | {front['directRps']} | {front['p50MsDirect']} | {front['p99MsDirect']} |\n"
        f"| through the front | {front['frontRps']} | {front['p50MsFront']} | {front['p99MsFront']} |\n"
        f"ratio {front['ratio']}; failed {front['failed']}; during the rolls the slowest request took "
        f"{max(client.latencies, default=float('nan')) * 1000:.0f} ms"
    )
    results["blueGreen"] = {
        "sent": client.ok + client.failed,
        "failed": client.failed,
        "p99Ms": round(client.percentile(99) * 1000, 2),
        "slowestMs": round(max(client.latencies, default=float("nan")) * 1000, 1),
        "totalSeconds": statistics.median(r["durations"]["total"] for r in rolled),
        "operatorShareSeconds": statistics.median(r["durations"]["operatorShare"] for r in rolled),
    }
    out = ROOT / ".bench" / "results.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")


def _machine() -> dict[str, Any]:
    memory = next(
        (
            int(line.split()[1]) // 1024
            for line in Path("/proc/meminfo").read_text().splitlines()
            if "MemTotal" in line
        ),
        None,
    )
    return {"cores": os.cpu_count(), "memoryMiB": memory, "kcp": "stand-in"}


def main() -> int:
    rolls = int(os.environ.get("ROLLS", "3"))
    singles = int(os.environ.get("SINGLE_ROLLS", "2"))
    workdir = Path(tempfile.mkdtemp(prefix="kcpshard-bench-"))
    asyncio.run(bench(workdir, rolls, singles))
    print(f"logs: {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
