"""`make bench`: this operator's roll against the alternatives, on this machine, in one run.

1. Rolls under load, three ways (hack/bench_rolls.py): blueGreen, single and stopStart, RUNS each
   (default 3), the same clients through the same front: requests, failures, the client-visible outage,
   latencies before and during, the leaderless gap, a watching client's missed events and relists.
2. The operator's own cost per roll: its API requests (kube-apiserver's audit log), CPU seconds, and
   where its share of the roll went.
3. Scale (hack/bench_scale.py): SCALE shards (default "10 25 50") rolled at once by one operator.
4. The front's cost: the same client straight to the slot's port and through HAProxy.
5. A picture of one blue/green roll: .bench/roll-timeline.png.

Everything runs on the real node (containerd and the kubelet, the pods in containers of the product
image; `bench_stack.py`), the operator as a process beside it. KCP=real (default; `make bench` builds it
first) runs section 1, 2 and 4 on real kcp, KCP=stand-in on the stand-in (in the test image); scale always
runs the stand-in (fifty real kcps do not fit two cores). Writes .bench/results.json and prints a
markdown table. Figures, not assertions: the tests do not time.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import bench_rolls
import bench_scale
from api_requests import AuditLog
from bench_machine import peak_rss_mib
from bench_rolls import RollRun, StopStart, measure, measured_load, share_breakdown, spec_roll, summary
from bench_stack import bench_stack, find_audit, real_kcp_spec, stand_in_kcp

from kcpshard.api import conditions as cond
from kcpshard.api.models import SlotName
from kcpshard.k8s import names
from kcpshard.k8s.api import KCPSLOTS
from kcpshard_testkit import scenario
from kcpshard_testkit.controlplane import AUDIT_ENV
from kcpshard_testkit.leasewatch import GAP_PARTS
from kcpshard_testkit.load import LoadReport
from kcpshard_testkit.realkcp import NEWER, real_kcp
from kcpshard_testkit.stack import Stack
from kcpshard_testkit.timeline import render_timeline

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / ".bench"
# The front's cost: this many client workers, this long each way (twice, alternated).
FRONT_CONCURRENCY = 4
FRONT_SECONDS = 10.0
READY_TIMEOUT = 300.0  # real kcp starts in tens of seconds on a busy 2-core machine


async def front_cost(stack: Stack, port: int, seconds: float) -> dict[str, float]:
    """The same client straight to the serving slot's port and through the front, alternated twice."""
    admin = await stack.shard_admin("root")
    active = SlotName((await stack.shard("root"))["status"]["activeSlot"])
    slot = await stack.api.get(KCPSLOTS, stack.namespace, names.slot_object_name("root", active))
    direct, front = LoadReport(), LoadReport()
    for _ in range(2):
        for total, target in ((direct, slot["status"]["port"]), (front, port)):
            url = f"https://127.0.0.1:{target}"
            run = await measured_load(url, admin.token, admin.ca_pem, seconds, FRONT_CONCURRENCY)
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


async def three_ways(workdir: Path, runs: int, real: bool, results: dict[str, Any]) -> list[RollRun]:
    """Sections 1, 2 and 4 on one stack and one shard; returns the blue/green runs (for the picture)."""
    async with bench_stack(workdir) as stack:
        spec = real_kcp_spec(real_kcp(NEWER)) if real else stand_in_kcp(stack)
        results["machine"]["kcp"] = f"{'real' if real else 'stand-in'} kcp {spec['version']}"
        port = await scenario.create_shard(stack, kcp=spec)
        await scenario.wait_ready(stack, timeout=READY_TIMEOUT)
        print(f"shard serving on port {port}; the front's cost ...", flush=True)
        results["front"] = await front_cost(stack, port, FRONT_SECONDS)
        audit = AuditLog(find_audit(workdir))
        done: dict[str, list[RollRun]] = {way: [] for way in bench_rolls.WAYS}
        n = 0
        for way in ("blueGreen", "single"):
            for _ in range(runs):
                n += 1
                change: dict[str, Any] = {"extraArgs": [f"-v={n % 2 + 1}"]}
                if way == "single":
                    change["shape"] = "Single"
                print(f"{way} roll {len(done[way]) + 1} ...", flush=True)
                done[way].append(await measure(stack, port, way, rolling(stack, change), audit))
        stop_start = StopStart(stack, real, f"https://127.0.0.1:{port}", workdir / "restarted-kcp.log")
        try:
            for i in range(runs):
                print(f"stopStart {i + 1} ...", flush=True)
                done["stopStart"].append(await measure(stack, port, "stopStart", stop_start, audit))
        finally:
            await stop_start.end()
        assert stack.operator is not None
        rss = peak_rss_mib(stack.operator.popen.pid)
    for way, way_runs in done.items():
        results[way] = summary(way_runs)
    bg = done["blueGreen"]
    requests = [sum((r.requests or {}).values()) for r in bg]
    by_kind: dict[str, float] = {}
    for r in bg:
        for key, value in (r.requests or {}).items():
            by_kind[key] = by_kind.get(key, 0) + value / len(bg)
    breakdowns = [share_breakdown(r) for r in bg]
    results["operatorCost"] = {
        "requestsPerRoll": statistics.median(requests),
        "requestsByVerb": {k: round(v, 1) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "cpuSecondsPerRoll": statistics.median(r.cpu_seconds or 0.0 for r in bg),
        "shareBreakdown": {
            k: round(statistics.median(b.get(k, 0.0) for b in breakdowns), 3) for k in breakdowns[0]
        },
        "peakRssMiB": round(rss, 1),
    }
    return bg


def rolling(stack: Stack, change: dict[str, Any]) -> Callable[[], Awaitable[dict[str, Any]]]:
    return lambda: spec_roll(stack, change)


def picture(bg: list[RollRun], out: Path) -> None:
    """The blue/green run with the median total, as a timeline."""
    run = sorted(bg, key=lambda r: r.total_seconds)[len(bg) // 2]
    assert run.report is not None
    ts = run.report["timestamps"]
    marks: dict[str, datetime] = {"flip": cond.parse_time(ts["flipped"])}
    if "oldExited" in ts:
        marks["old exit"] = cond.parse_time(ts["oldExited"])
    if run.handovers:
        marks["new lease holder"] = run.handovers[-1].first_renewal
    title = f"one blue/green roll: {run.during.ok} requests, {run.during.failed} failed"
    render_timeline(run.report, run.during, marks, out, title)


def _gap_part(results: dict[str, Any], part: str) -> Callable[[str], str]:
    """A part of the leaderless gap (the old kcp's last renewal, SIGTERM, exit, the lease deleted, the
    new holder's acquisition), median (min-max); n/a where the way has no such part."""

    def cell(way: str) -> str:
        value = (results[way].get("leaderlessGapParts") or {}).get(part)
        return "n/a" if value is None else f"{value['median']:g} s ({value['min']:g}-{value['max']:g})"

    return cell


def table(results: dict[str, Any]) -> str:
    def med(way: str, key: str, unit: str = "") -> str:
        value = results[way].get(key)
        if value is None:
            return "n/a"
        if isinstance(value, dict):
            return f"{value['median']:g}{unit} ({value['min']:g}-{value['max']:g})"
        return f"{value}{unit}"

    def step(way: str, name: str) -> str:
        value = (results[way].get("rollDurations") or {}).get(name)
        return "n/a" if not value else f"{value['median']:g} s ({value['min']:g}-{value['max']:g})"

    rows = [
        ("requests sent / failed", lambda w: f"{results[w]['sent']} / {results[w]['failed']}"),
        (
            "retried (Retry-After / closed keep-alive)",
            lambda w: f"{results[w].get('retriedAfter', 0)} / {results[w]['retriedClosed']}",
        ),
        ("client-visible outage", lambda w: med(w, "outageSeconds", " s")),
        ("longest time without an answer", lambda w: med(w, "longestNoAnswerSeconds", " s")),
        ("total roll time", lambda w: med(w, "totalSeconds", " s")),
        ("p50 before / during (ms)", lambda w: f"{med(w, 'p50MsBefore')} / {med(w, 'p50Ms')}"),
        ("p99 before / during (ms)", lambda w: f"{med(w, 'p99MsBefore')} / {med(w, 'p99Ms')}"),
        ("p99.9 during (ms)", lambda w: med(w, "p999Ms")),
        ("leaderless gap", lambda w: med(w, "leaderlessGapSeconds", " s")),
        *((f"  gap: {part}", _gap_part(results, part)) for part in GAP_PARTS),
        (
            "watch: missed / relists / created",
            lambda w: (
                f"{results[w]['watchEventsMissed']} / {results[w]['watchRelists']} / "
                f"{results[w]['watchCreated']}"
            ),
        ),
        ("watch: longest time unwatched", lambda w: med(w, "watchLongestGapSeconds", " s")),
        ("operator's share", lambda w: med(w, "operatorShareSeconds", " s")),
        ("the node starting the slot", lambda w: med(w, "containerStartSeconds", " s")),
        ("the roll's probe", lambda w: step(w, "probe")),
        ("operator CPU", lambda w: med(w, "operatorCpuSeconds", " s")),
    ]
    ways = bench_rolls.WAYS
    lines = ["| | " + " | ".join(ways) + " |", "|---" * (len(ways) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(cell(w) for w in ways) + " |" for name, cell in rows]
    return "\n".join(lines)


async def bench(workdir: Path, runs: int, real: bool, scale: list[int]) -> dict[str, Any]:
    results: dict[str, Any] = {"machine": _machine()}
    bg = await three_ways(workdir / "rolls", runs, real, results)
    OUT.mkdir(exist_ok=True)
    picture(bg, OUT / "roll-timeline.png")
    results["scale"] = []
    _write(results)  # the rolls' figures are kept even if the scale runs do not end
    for n in scale:
        print(f"scale: {n} shards ...", flush=True)
        results["scale"].append(await bench_scale.scale_run(workdir / f"scale{n}", n))
        _write(results)
    return results


def _write(results: dict[str, Any]) -> None:
    (OUT / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")


def report(results: dict[str, Any]) -> None:
    machine = results["machine"]
    print(
        f"\n## Rolls under load ({machine['kcp']}, on the real node; median (min-max) "
        f"of {results['blueGreen']['runs']} runs each)\n"
    )
    print(table(results))
    cost = results["operatorCost"]
    print(
        f"\nThe operator per blue/green roll: {cost['requestsPerRoll']} API requests, "
        f"{cost['cpuSecondsPerRoll']:.2f} CPU seconds, peak RSS {cost['peakRssMiB']} MiB; its share went to "
        + ", ".join(f"{k} {v} s" for k, v in cost["shareBreakdown"].items())
    )
    front = results["front"]
    print(
        f"\nThe front's cost ({FRONT_CONCURRENCY} workers, 2 x {FRONT_SECONDS:g} s each way): straight to "
        f"the slot {front['directRps']} requests/s (p99 {front['p99MsDirect']} ms), through the front "
        f"{front['frontRps']} requests/s (p99 {front['p99MsFront']} ms): ratio {front['ratio']}"
    )
    if results["scale"]:
        print("\n## Scale (stand-in kcp, one operator, all shards changed at once)\n")
        print(bench_scale.table(results["scale"]))
    print(f"\nmachine: {machine}")


def _machine() -> dict[str, Any]:
    memory = next(
        int(line.split()[1]) // 1024
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal")
    )
    machine = {"cores": os.cpu_count(), "memoryMiB": memory, "python": platform.python_version()}
    return machine | {"node": "real (containerd, kubelet)"}


def main() -> int:
    os.environ[AUDIT_ENV] = "1"  # the dev environment (a subprocess) inherits it
    runs = int(os.environ.get("RUNS", "3"))
    real = os.environ.get("KCP", "real") == "real"
    scale = [int(n) for n in os.environ.get("SCALE", "10 25 50").split()]
    workdir = Path(tempfile.mkdtemp(prefix="kcpshard-bench-"))
    results = asyncio.run(bench(workdir, runs, real, scale))
    report(results)
    print(f"wrote {OUT / 'results.json'} and {OUT / 'roll-timeline.png'}; logs: {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
