"""`make bench-scale`: N shards changed at once, and what the operator and the machine pay for it.

For each N in SHARDS (default "10 25 50"), on a fresh stack (real control plane, stand-in kcp): create N
shards, wait until all are Ready, then patch every shard's spec at once (concurrently) and wait until
each one's last roll is for the new generation. Records the wall time (first patch to last roll's end),
the operator's peak RSS, CPU seconds and API requests (kube-apiserver's audit log) per roll, the spread
of the rolls' operatorShare and total, and the machine: the stack's processes' RSS by kind at the peak
seen (sampled every second during the rolls), their CPU seconds by kind and the load average. A step
that does not finish in time is recorded as the N's failure (the shards left and their conditions) and
stops the larger Ns; a roll that ended otherwise than Succeeded is recorded, and the next N runs.
Figures, not assertions; writes .bench/scale.json.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from api_requests import FAST_KCP, AuditLog, find_audit

from kcpshard.k8s.api import KCPSHARDS
from kcpshard_testkit import scenario
from kcpshard_testkit.controlplane import AUDIT_ENV
from kcpshard_testkit.kcpbin import make_kcp
from kcpshard_testkit.stack import Stack, processes_under, running_stack
from kcpshard_testkit.waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 1024 * 1024


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def kind_of(pid: int, args: list[bytes], operator_pid: int) -> str:
    exe = os.path.basename(args[0]).decode(errors="replace")
    if pid == operator_pid:
        return "operator"
    if any(a.endswith(b"kcpshard-fake-kcp") for a in args):
        return "stand-in kcp"
    if b"agent" in args:
        return "slot agent" if b"slot" in args else "front agent" if b"front" in args else "other agent"
    if exe.startswith("haproxy"):
        return "haproxy"
    if b"dev" in args and b"up" in args:
        return "devenv + runner"
    return exe if exe in ("kube-apiserver", "etcd", "kube-controller-manager") else "other"


@dataclasses.dataclass
class Machine:
    """The stack's processes, sampled: RSS by kind at the peak total, CPU seconds by kind since `start`."""

    workdir: Path
    operator_pid: int
    kinds: dict[int, str] = dataclasses.field(default_factory=dict)
    cpu_base: dict[int, float] = dataclasses.field(default_factory=dict)
    cpu_last: dict[int, float] = dataclasses.field(default_factory=dict)
    peak_mib: float = 0.0
    peak_by_kind: dict[str, float] = dataclasses.field(default_factory=dict)
    count_by_kind: dict[str, int] = dataclasses.field(default_factory=dict)
    load_max: float = 0.0
    available_min_mib: float = float("inf")
    primed: bool = False  # after the first sample, a new pid started during the rolls: all its CPU counts

    def sample(self) -> None:
        rss: collections.defaultdict[str, float] = collections.defaultdict(float)
        count: collections.Counter[str] = collections.Counter()
        for pid in {self.operator_pid, *processes_under(self.workdir)}:
            if pid not in self.kinds:
                args = scenario.argv(pid)
                if not args or not args[0]:
                    continue
                self.kinds[pid] = kind_of(pid, args, self.operator_pid)
            try:
                cpu = cpu_seconds(pid)
                pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
            except (OSError, IndexError, ValueError):
                continue
            self.cpu_base.setdefault(pid, 0.0 if self.primed else cpu)
            self.cpu_last[pid] = cpu
            rss[self.kinds[pid]] += pages * PAGE / MIB
            count[self.kinds[pid]] += 1
        if sum(rss.values()) > self.peak_mib:
            self.peak_mib = sum(rss.values())
            self.peak_by_kind = {k: round(v, 1) for k, v in sorted(rss.items(), key=lambda kv: -kv[1])}
            self.count_by_kind = dict(count.most_common())
        self.load_max = max(self.load_max, float(Path("/proc/loadavg").read_text().split()[0]))
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                self.available_min_mib = min(self.available_min_mib, int(line.split()[1]) / 1024)

    def first(self) -> None:
        self.sample()
        self.primed = True

    def cpu_by_kind(self) -> dict[str, float]:
        spent: collections.defaultdict[str, float] = collections.defaultdict(float)
        for pid, last in self.cpu_last.items():
            spent[self.kinds[pid]] += last - self.cpu_base[pid]
        return {k: round(v, 1) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])}

    async def run(self, interval: float = 1.0) -> None:
        while True:
            self.sample()
            await asyncio.sleep(interval)


def spread(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {"min": min(values), "median": round(statistics.median(values), 3), "max": max(values)}


def where(shard: dict[str, Any]) -> dict[str, Any]:
    """A shard's state, for a failure: its Ready and Stalled conditions and roll step."""
    status = shard.get("status") or {}
    out: dict[str, Any] = {"shard": shard["metadata"]["name"]}
    for type_ in ("Ready", "Stalled"):
        c = scenario.condition(shard, type_)
        out[type_] = f"{c.get('status')} {c.get('reason')}: {c.get('message')}" if c else None
    out["step"] = (status.get("rollout") or {}).get("step")
    return out


async def wait_all(
    stack: Stack,
    what: str,
    done: dict[str, Any],
    timeout: float,
    probe_done: Callable[[dict[str, Any]], bool],
) -> dict[str, Any] | None:
    """Poll all shards (one list a second) until `probe_done(shard)` holds for each name in `done` (which
    it fills with the shard); on timeout return the first pending shard's state and the pending names."""
    shards: dict[str, dict[str, Any]] = {}

    async def all_done() -> bool:
        listed = await stack.api.list(KCPSHARDS, scenario.NAMESPACE)
        shards.update({s["metadata"]["name"]: s for s in listed["items"]})
        for name in done:
            if done[name] is None and name in shards and probe_done(shards[name]):
                done[name] = shards[name]
        return all(v is not None for v in done.values())

    try:
        await wait_for(what, all_done, timeout=timeout, interval=1.0)
    except TimeoutError as exc:
        pending = sorted(name for name, v in done.items() if v is None)
        first = where(shards[pending[0]]) if pending[0] in shards else {"shard": pending[0]}
        return {"what": str(exc), "pending": pending, **first}
    return None


def ready(shard: dict[str, Any]) -> bool:
    status = shard.get("status") or {}
    return (
        scenario.condition(shard, "Ready").get("status") == "True"
        and not status.get("rollout")
        and status.get("observedGeneration") == shard["metadata"]["generation"]
    )


async def scale_run(workdir: Path, shards: int) -> dict[str, Any]:
    result: dict[str, Any] = {"shards": shards, "allSucceeded": False}
    clock = time.monotonic()
    async with running_stack(workdir, api="real") as stack:
        assert stack.operator is not None
        operator_pid = stack.operator.popen.pid
        audit = AuditLog(find_audit(workdir))
        kcp = {"version": "v0.32.1", "binary": make_kcp(workdir / "bin", "kcp-1", rsa_bits=FAST_KCP)}
        names = [f"shard{i:02d}" for i in range(shards)]
        for name in names:
            await scenario.create_shard(stack, name, kcp=kcp)
        ready_shards: dict[str, Any] = dict.fromkeys(names)
        failure = await wait_all(stack, f"{shards} shards Ready", ready_shards, 120 + 20 * shards, ready)
        result["readySeconds"] = round(time.monotonic() - clock, 1)
        if failure:
            result["failure"] = failure
            return result
        before = {n: (s["status"].get("lastRoll") or {}).get("timestamps") for n, s in ready_shards.items()}

        machine = Machine(workdir, operator_pid)
        machine.first()
        sampler = asyncio.create_task(machine.run())
        cpu0 = cpu_seconds(operator_pid)
        log_offset = stack.operator.log.stat().st_size
        audit.mark()
        started = time.time()
        patched = await asyncio.gather(
            *(
                stack.api.patch(KCPSHARDS, scenario.NAMESPACE, n, {"spec": {"extraArgs": ["-v=1"]}})
                for n in names
            )
        )
        generation = {s["metadata"]["name"]: s["metadata"]["generation"] for s in patched}
        result["patchSeconds"] = round(time.time() - started, 2)

        def rolled(shard: dict[str, Any]) -> bool:
            status = shard.get("status") or {}
            last = status.get("lastRoll") or {}
            return (
                status.get("observedGeneration") == generation[shard["metadata"]["name"]]
                and not status.get("rollout")
                and bool(last)
                and last.get("timestamps") != before[shard["metadata"]["name"]]
            )

        rolls: dict[str, Any] = dict.fromkeys(names)
        failure = await wait_all(stack, f"{shards} rolls", rolls, 300 + 20 * shards, rolled)
        sampler.cancel()
        machine.sample()
        cpu = cpu_seconds(operator_pid) - cpu0
        requests = audit.since_mark().counts
        result["operatorRssMiB"] = round(peak_rss_mib(operator_pid), 1)
        result["operatorCpuSeconds"] = round(cpu, 1)
        reports = [s["status"]["lastRoll"] for s in rolls.values() if s is not None]
        if not failure:
            failure = next(
                (
                    {"shard": name, "result": s["status"]["lastRoll"]["result"]}
                    | {"message": s["status"]["lastRoll"].get("message")}
                    for name, s in rolls.items()
                    if s["status"]["lastRoll"]["result"] != "Succeeded"
                ),
                None,
            )
        # A roll's end: `finished`, or the stamp its result names (`aborted`, ...).
        ends = [r["timestamps"].get("finished") or r["timestamps"].get(r["result"].lower()) for r in reports]
        finished = [datetime.fromisoformat(end).timestamp() for end in ends if end]
        steps = {key for r in reports for key in r.get("durations") or {}}
        standbys = stack.operator.log.read_bytes()[log_offset:].count(b"; standing by")
        result |= {
            "allSucceeded": failure is None,
            "rolled": len(reports),
            "results": dict(collections.Counter(r["result"] for r in reports)),
            "wallSeconds": round(max(finished, default=time.time()) - started, 1),
            "cpuSecondsPerRoll": round(cpu / max(len(reports), 1), 2),
            "requests": sum(requests.values()),
            "requestsPerRoll": round(sum(requests.values()) / shards, 1),
            "topRequests": dict(requests.most_common(8)),
            "operatorShare": spread(_durations(reports, "operatorShare")),
            "total": spread(_durations(reports, "total")),
            "stepMedians": {k: round(statistics.median(_durations(reports, k)), 2) for k in sorted(steps)},
            # The operator lost a shard's Lease (a 409 or another holder) during the rolls: a round waits.
            "leaseStandbys": standbys,
            "peakRssMiBByKind": machine.peak_by_kind,
            "processesByKind": machine.count_by_kind,
            "cpuSecondsByKind": machine.cpu_by_kind(),
            "loadAverageMax": machine.load_max,
            "memAvailableMinMiB": round(machine.available_min_mib),
        }
        if failure:
            result["failure"] = failure
    result["runSeconds"] = round(time.monotonic() - clock, 1)
    return result


def _durations(reports: list[dict[str, Any]], key: str) -> list[float]:
    return [r["durations"][key] for r in reports if key in (r.get("durations") or {})]


def _row(r: dict[str, Any]) -> str:
    def s(key: str) -> str:
        v = r.get(key) or {}
        return f"{v['min']:.2f} / {v['median']:.2f} / {v['max']:.2f}" if v else ""

    kinds = ", ".join(f"{k} {v:.0f}" for k, v in (r.get("peakRssMiBByKind") or {}).items())
    cpu = ", ".join(f"{k} {v:.0f}" for k, v in list((r.get("cpuSecondsByKind") or {}).items())[:4])
    fail = json.dumps(r["failure"]) if r.get("failure") else ""
    cells = [r["shards"], r["allSucceeded"], r.get("wallSeconds", ""), r.get("operatorRssMiB", "")]
    cells += [r.get("operatorCpuSeconds", ""), r.get("cpuSecondsPerRoll", ""), r.get("requestsPerRoll", "")]
    cells += [s("operatorShare"), s("total"), kinds, cpu, r.get("runSeconds", ""), fail]
    return "| " + " | ".join(str(c) for c in cells) + " |"


def table(results: list[dict[str, Any]]) -> str:
    header = (
        "| shards | all succeeded | wall s | operator peak RSS MiB | operator CPU s | CPU s per roll "
        "| requests per roll | operatorShare s min/median/max | total s min/median/max "
        "| peak RSS MiB by kind | CPU s by kind | run s | first failure |"
    )
    return "\n".join([header, "|---" * 13 + "|", *(_row(r) for r in results)])


def main() -> int:
    os.environ[AUDIT_ENV] = "1"  # the dev environment (a subprocess) inherits it
    results = []
    workdir = Path(tempfile.mkdtemp(prefix="kcpshard-scale-"))
    out = ROOT / ".bench" / "scale.json"
    out.parent.mkdir(exist_ok=True)
    for n in [int(n) for n in os.environ.get("SHARDS", "10 25 50").split()]:
        print(f"N={n} ...", flush=True)
        results.append(asyncio.run(scale_run(workdir / f"n{n}", n)))
        out.write_text(json.dumps({"results": results}, indent=2) + "\n")
        if "pending" in (results[-1].get("failure") or {}):
            break  # a step did not finish in time: a larger N will not either
    print("\n" + table(results))
    print(f"\nwrote {out}; logs: {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
