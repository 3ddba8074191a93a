"""What the benchmarks read of the machine: a process's CPU seconds and peak RSS, and a sampler of a
stack's processes by kind (the operator, the pods' agents, HAProxys and kcps, the control plane)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import os
import statistics
import subprocess
import time
from pathlib import Path

from kcpshard_testkit import scenario
from kcpshard_testkit.podprocs import pod_processes
from kcpshard_testkit.stack import Stack

TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 1024 * 1024
POD_REFRESH = 5.0  # seconds between two looks for the pods' containers


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
    if any(a.endswith(b"kcpshard-fake-kcp") for a in args[:2]):
        return "stand-in kcp"
    if exe.startswith("kcp"):
        return "kcp"  # real kcp, /var/lib/kcpshard/bin/kcp-<version>
    if exe.startswith("haproxy"):
        return "haproxy"
    if b"agent" in args:
        return "slot agent" if b"slot" in args else "front agent" if b"front" in args else "other agent"
    if exe.startswith("containerd-shim"):
        return "containerd-shim"
    if b"kcpshard_testkit.devenv" in args:
        return "devenv"
    return exe or "other"  # the control plane, the kubelet, containerd: by their program's name


def _descendants(roots: set[int]) -> set[int]:
    """`roots` and every process below them (a pod's agent and the kcp it started)."""
    below: collections.defaultdict[int, list[int]] = collections.defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                below[int(stat.rsplit(")", 1)[1].split()[1])].append(int(entry))
    found, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(below.get(pid, ()))
    return found


@dataclasses.dataclass
class Machine:
    """The stack's processes, sampled: RSS by kind at the peak total, CPU seconds by kind since `start`.

    The pods' processes come from containerd (`podprocs.py`: a kubectl and a ctr call, so only every
    POD_REFRESH seconds; the processes below them each sample), the cluster's own (control plane,
    kubelet, containerd, its shims) from their command lines, which name the stack's folder."""

    stack: Stack
    operator_pid: int
    kinds: dict[int, str] = dataclasses.field(default_factory=dict)
    cpu_base: dict[int, float] = dataclasses.field(default_factory=dict)
    cpu_last: dict[int, float] = dataclasses.field(default_factory=dict)
    peak_mib: float = 0.0
    peak_by_kind: dict[str, float] = dataclasses.field(default_factory=dict)
    count_by_kind: dict[str, int] = dataclasses.field(default_factory=dict)
    per_process_by_kind: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    load_max: float = 0.0
    available_min_mib: float = float("inf")
    primed: bool = False  # after the first sample, a new pid started during the rolls: all its CPU counts
    pod_roots: set[int] = dataclasses.field(default_factory=set)
    cluster: set[int] = dataclasses.field(default_factory=set)
    refreshed: float = float("-inf")
    refresh_failures: int = 0  # looks for the pods' containers that timed out

    def _pids(self) -> set[int]:
        if time.monotonic() - self.refreshed >= POD_REFRESH:
            try:
                self.pod_roots = set(pod_processes(self.stack))
            except (subprocess.SubprocessError, OSError) as exc:
                # containerd or the API server too busy to list (50 shards rolling at once): the pods
                # seen last are sampled meanwhile, and the next refresh asks again.
                self.refresh_failures += 1
                print(f"  (pods not listed this time: {type(exc).__name__}; sampling the last ones)")
            self.cluster = set(scenario.processes(self.stack.directory))
            self.refreshed = time.monotonic()
        return {self.operator_pid, *self.cluster, *_descendants(self.pod_roots)}

    def sample(self) -> None:
        rss: collections.defaultdict[str, list[float]] = collections.defaultdict(list)
        for pid in self._pids():
            # each time: a kcp wrapper (sh) execs the stand-in under the same pid
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
            rss[self.kinds[pid]].append(pages * PAGE / MIB)
        total = sum(sum(v) for v in rss.values())
        if total > self.peak_mib:
            self.peak_mib = total
            ordered = sorted(rss.items(), key=lambda kv: -sum(kv[1]))
            self.peak_by_kind = {k: round(sum(v), 1) for k, v in ordered}
            self.count_by_kind = {k: len(v) for k, v in ordered}
            self.per_process_by_kind = {
                k: {"mean": round(statistics.mean(v), 1), "max": round(max(v), 1)} for k, v in ordered
            }
        self.load_max = max(self.load_max, float(Path("/proc/loadavg").read_text().split()[0]))
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                self.available_min_mib = min(self.available_min_mib, int(line.split()[1]) / 1024)

    async def first(self) -> None:
        await asyncio.to_thread(self.sample)
        self.primed = True

    def cpu_by_kind(self) -> dict[str, float]:
        spent: collections.defaultdict[str, float] = collections.defaultdict(float)
        for pid, last in self.cpu_last.items():
            spent[self.kinds[pid]] += last - self.cpu_base[pid]
        return {k: round(v, 1) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])}

    async def run(self, stop: asyncio.Event, interval: float = 1.0) -> None:
        """Sample until `stop` is set (not cancelled: a sample in its thread would go on beside the last)."""
        while not stop.is_set():
            await asyncio.to_thread(self.sample)  # kubectl and ctr must not stall the rolls' polling
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
