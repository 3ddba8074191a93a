"""The three ways to roll a shard, side by side, under the same clients through the same front.

- blueGreen: this operator's roll (a spec change);
- single: the operator's Single shape (stop the old kcp, then start the new one);
- stopStart: what a user has without this operator: the serving kcp process stopped (SIGTERM, its
  shutdown delay) and started again in place (in the slot's container) with the same command line, same
  port, same front. The operator and the slot's host agent are paused (SIGSTOP) meanwhile, so nothing
  but the restart acts: as a Deployment's pod deleted and coming back on the same node would.

Each run has a kube-style client (requests/s, failures, latencies), a watching client (list then watch,
resumed from the last resourceVersion, against a writer creating ConfigMaps) and a lease watch (the
leaderless gap, from the lease's own times) running through the front; for the operator's rolls also
the operator's CPU seconds and its API requests (kube-apiserver's audit log). Figures, not assertions.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import signal
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from api_requests import AuditLog
from bench_machine import cpu_seconds
from bench_scale import spread

from kcpshard.agent.procnet import listening_ports
from kcpshard.api import conditions as cond
from kcpshard.k8s.api import KCPSHARDS, KCPSLOTS
from kcpshard.kcp.kubeconfig import ShardAdmin
from kcpshard_testkit import scenario
from kcpshard_testkit.leasewatch import GAP_PARTS, Handover, LeaseWatch, gap_parts, parse_micro_time
from kcpshard_testkit.load import KubeStyleLoad, LoadReport, kube_client
from kcpshard_testkit.realkcp import real_kcp_processes
from kcpshard_testkit.stack import Stack
from kcpshard_testkit.waiting import wait_for
from kcpshard_testkit.watcher import WatchedWrites, WatchReport

WAYS = ("blueGreen", "single", "stopStart")
BEFORE_SECONDS = 5.0  # the client's latency before a roll, measured over this long


@dataclasses.dataclass
class RollRun:
    """One roll, one way, as the clients and the operator saw it."""

    way: str
    before: LoadReport
    during: LoadReport
    watch: WatchReport
    handovers: list[Handover]
    total_seconds: float
    report: dict[str, Any] | None = None  # the operator's roll report (blueGreen, single)
    slot: dict[str, Any] | None = None  # the new slot's KcpSlot status (for the share's breakdown)
    cpu_seconds: float | None = None
    requests: dict[str, int] | None = None
    gap_parts: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def leaderless_gap(self) -> float | None:
        return self.handovers[-1].gap_seconds if self.handovers else None


class OldSlotTimes:
    """Polls the serving slot's KcpSlot through a roll for its host agent's `stoppingAt` and `exitedAt`
    (the roll retires the object at its end, so they are read while it lasts)."""

    def __init__(self, stack: Stack, slot: str | None) -> None:
        self.stack, self.slot = stack, slot
        self.status: dict[str, Any] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.slot is not None:
            self._task = asyncio.create_task(self._poll())

    async def _poll(self) -> None:
        while True:
            with contextlib.suppress(Exception):  # gone (retired) or the API busy: keep what was read
                obj = await self.stack.api.get(KCPSLOTS, self.stack.namespace, f"root-{self.slot}")
                self.status = obj.get("status") or {}
            await asyncio.sleep(0.1)

    async def stop(self) -> tuple[datetime | None, datetime | None]:
        """The old kcp's SIGTERM and exit, as its host agent wrote them (None: not seen)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        return parse_micro_time(self.status.get("stoppingAt")), parse_micro_time(self.status.get("exitedAt"))


class Clients:
    """The three clients of one run, through the front."""

    def __init__(self, url: str, token: str, ca_pem: bytes, max_retries: int) -> None:
        self.load = KubeStyleLoad(url, token, ca_pem, max_retries=max_retries)
        self.watch = WatchedWrites(url, token, ca_pem)
        self.lease = LeaseWatch(url, token, ca_pem)

    async def start(self) -> None:
        await self.lease.start()
        await self.watch.start()
        await self.load.start()

    async def stop(self) -> tuple[LoadReport, WatchReport, list[Handover]]:
        load = await self.load.stop()
        watch = await self.watch.stop()
        return load, watch, await self.lease.stop()


async def measured_load(
    url: str, token: str, ca_pem: bytes, seconds: float, concurrency: int = 2
) -> LoadReport:
    """The kube-style client against `url` for `seconds`."""
    load = KubeStyleLoad(url, token, ca_pem, concurrency=concurrency)
    await load.start()
    await asyncio.sleep(seconds)  # a measurement window
    return await load.stop()


async def _under_way(clients: Clients) -> None:
    """Until the watching client has its watch open and the others have answers: a roll that starts
    before would find no watch to break."""

    async def going() -> bool:
        return (
            clients.watch.report.watches >= 1
            and clients.load.report.ok >= 10
            and bool(clients.lease.holder())
        )

    await wait_for("the clients to be under way", going, timeout=60)


async def _lease_moved(lease: LeaseWatch, count: int, timeout: float) -> None:
    """Until the lease watch saw `count` handovers (a stopped kcp's lease outlives it: up to its duration)."""

    async def moved() -> bool:
        return len(lease.handovers()) >= count

    await wait_for("the controller lease to move to the new kcp", moved, timeout=timeout)


async def measure(
    stack: Stack, port: int, way: str, act: Callable[[], Awaitable[dict[str, Any] | None]], audit: AuditLog
) -> RollRun:
    """One roll: the clients before and during it, and what `act` (the roll, until it ended) returned."""
    admin = await stack.shard_admin("root")
    url = f"https://127.0.0.1:{port}"
    before = await measured_load(url, admin.token, admin.ca_pem, BEFORE_SECONDS)
    # Single and stop-start have an outage by design: the client tries once more, not ten times.
    clients = Clients(url, admin.token, admin.ca_pem, max_retries=10 if way == "blueGreen" else 2)
    await clients.start()
    await _under_way(clients)
    assert stack.operator is not None
    cpu0 = cpu_seconds(stack.operator.popen.pid)
    audit.mark()
    serving = ((await stack.shard("root")).get("status") or {}).get("activeSlot")
    old_slot = OldSlotTimes(stack, serving if way != "stopStart" else None)
    old_slot.start()
    started = time.monotonic()
    report = await act()
    total = time.monotonic() - started
    operator_cpu = cpu_seconds(stack.operator.popen.pid) - cpu0 if way != "stopStart" else None
    requests = dict(audit.since_mark().counts) if way != "stopStart" else None
    await _lease_moved(clients.lease, 1, timeout=180)
    observations = list(clients.lease.observations)
    load, watch, handovers = await clients.stop()
    sigterm_at, exited_at = await old_slot.stop()
    parts = {}
    if handovers:
        parts = gap_parts(handovers[-1], observations, sigterm_at=sigterm_at, exited_at=exited_at)
    slot = None
    if report is not None:
        total = report["durations"]["total"]
        kcpslot = await stack.api.get(KCPSLOTS, stack.namespace, f"root-{report['toSlot']}")
        slot = kcpslot.get("status") or {}
    return RollRun(way, before, load, watch, handovers, total, report, slot, operator_cpu, requests, parts)


async def spec_roll(stack: Stack, change: dict[str, Any]) -> dict[str, Any]:
    """Patch the shard's spec and wait until its roll ended; the roll's report."""
    shard = await stack.api.patch(KCPSHARDS, stack.namespace, "root", {"spec": change})
    generation = shard["metadata"]["generation"]

    async def rolled() -> dict[str, Any] | None:
        status = (await stack.shard("root")).get("status") or {}
        last = status.get("lastRoll") or {}
        done = not status.get("rollout") and status.get("observedGeneration") == generation
        return last if done and last.get("toRevision") == status.get("activeRevision") else None

    report = await wait_for("the roll", rolled, timeout=600)
    if report.get("result") != "Succeeded":
        raise RuntimeError(f"the roll ended {report.get('result')}: {report.get('message')}")
    return report


class StopStart:
    """The serving kcp stopped and started again in place, the operator and the slot's agent paused.

    In place means in the slot's container: the same argv, environment, working directory and user, in
    the container's mount and pid namespaces (nsenter into those of the paused agent, its parent), so it
    runs the image's files as the slot ran them; the network is the host's, as the pod's is."""

    def __init__(self, stack: Stack, real: bool, url: str, log: Path) -> None:
        self.stack, self.real, self.url, self.log = stack, real, url, log
        self.nsenter: asyncio.subprocess.Process | None = None  # the restarted kcp's parent
        self.restarted: int | None = None  # the restarted kcp
        self.paused: list[int] = []

    def _kcp(self) -> int:
        if self.restarted is not None:
            return self.restarted
        pids = real_kcp_processes(self.stack) if self.real else scenario.kcp_processes(self.stack)
        if len(pids) != 1:
            raise RuntimeError(f"expected one kcp process, found {len(pids)}")
        return pids[0]

    async def __call__(self) -> None:
        """Stop the serving kcp and start it again; returns once it answers /readyz through the front."""
        pid = self._kcp()
        # The slot's kcp binds a free port; started again in place it must take the same one.
        port = listening_ports(pid)[0]
        argv = [_same_port(a.decode(), port) for a in scenario.argv(pid) if a]
        argv = [a for a in argv if a != "--experimental-bind-free-port"]
        environ = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
        env = dict(line.split("=", 1) for line in environ if "=" in line)
        uid, gid = _ids(pid)
        if not self.paused:
            assert self.stack.operator is not None
            agent = _parent(pid)
            self.paused = [self.stack.operator.popen.pid, agent]
            for paused in self.paused:
                os.kill(paused, signal.SIGSTOP)
        os.kill(pid, signal.SIGTERM)

        async def gone() -> bool:
            return scenario.exited(pid)

        await wait_for("the old kcp to exit", gone, timeout=120)
        if self.nsenter is not None:
            await self.nsenter.wait()
        # -r/-w: the agent's root and working directory, which kcp inherited; --pid forks kcp into it.
        enter = [shutil.which("nsenter") or "nsenter", f"--target={self.paused[1]}", "--mount", "--pid"]
        enter += ["-r", "-w", f"--setuid={uid}", f"--setgid={gid}", "--"]
        with self.log.open("ab") as out:
            self.nsenter = await asyncio.create_subprocess_exec(
                *enter, *argv, env=env, stdout=out, stderr=asyncio.subprocess.STDOUT, start_new_session=True
            )
        self.restarted = await _exec_child(self.nsenter.pid, argv[0])
        admin = await self.stack.shard_admin("root")
        await wait_for("kcp started again to be ready", lambda: _ready(self.url, admin), timeout=300)

    async def end(self) -> None:
        """Stop the restarted kcp and let the paused processes go on (the stack is torn down next)."""
        if self.restarted is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.restarted, signal.SIGKILL)
        if self.nsenter is not None and self.nsenter.returncode is None:
            await self.nsenter.wait()
        for paused in self.paused:
            with contextlib.suppress(ProcessLookupError):
                os.kill(paused, signal.SIGCONT)


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _ids(pid: int) -> tuple[int, int]:
    """The process's effective uid and gid (the image's USER)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.split()
    return int(fields["Uid"][1]), int(fields["Gid"][1])


async def _exec_child(parent: int, program: str) -> int:
    """The pid of `parent`'s child once it runs `program` (nsenter forks, then the child execs kcp)."""

    async def child() -> int | None:
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and scenario.argv(int(entry.name))[:1] == [program.encode()]:
                with contextlib.suppress(OSError):
                    if _parent(int(entry.name)) == parent:
                        return int(entry.name)
        return None

    return await wait_for("the restarted kcp to start", child, timeout=30, interval=0.05)


def _same_port(arg: str, port: int) -> str:
    return f"--secure-port={port}" if arg.startswith("--secure-port=") else arg


async def _ready(url: str, admin: ShardAdmin) -> bool:
    try:
        async with kube_client(url, admin.token, admin.ca_pem, timeout=2) as client:
            resp = await client.get("/readyz")
    except httpx.HTTPError:
        return False
    return resp.status_code == 200


def summary(runs: list[RollRun]) -> dict[str, Any]:
    """Median, min and max of each figure over the runs of one way (results.json's shape)."""

    out: dict[str, Any] = {
        "runs": len(runs),
        "sent": sum(r.during.ok + r.during.failed for r in runs),
        "failed": sum(r.during.failed for r in runs),
        "retriedAfter": sum(r.during.retried_after for r in runs),
        "retriedClosed": sum(r.during.retried_closed for r in runs),
        # what the failed requests were (the first few of each run), so a failure can be looked into
        "failures": [f for r in runs for f in r.during.failures[:5]],
        "outageSeconds": spread([r.during.outage_seconds() for r in runs]),
        # the longest a client worker waited for any answer during the roll (Retry-After waits included)
        "longestNoAnswerSeconds": spread([r.during.longest_no_answer_seconds() for r in runs]),
        "p999Ms": spread([round(r.during.percentile(99.9) * 1000, 2) for r in runs]),
        "totalSeconds": spread([round(r.total_seconds, 3) for r in runs]),
        "p50MsBefore": spread([round(r.before.percentile(50) * 1000, 2) for r in runs]),
        "p99MsBefore": spread([round(r.before.percentile(99) * 1000, 2) for r in runs]),
        "p50Ms": spread([round(r.during.percentile(50) * 1000, 2) for r in runs]),
        "p99Ms": spread([round(r.during.percentile(99) * 1000, 2) for r in runs]),
        "watchEventsMissed": sum(r.watch.missed_by_watch for r in runs),
        "watchRelists": sum(r.watch.relists for r in runs),
        "watchLongestGapSeconds": spread([round(r.watch.longest_gap_seconds, 3) for r in runs]),
        "watchCreated": sum(r.watch.created for r in runs),
        "watchMaxLagSeconds": spread([round(r.watch.max_lag_seconds, 3) for r in runs]),
    }
    gaps = [r.leaderless_gap for r in runs if r.leaderless_gap is not None]
    if gaps:
        out["leaderlessGapSeconds"] = spread([round(g, 3) for g in gaps])
    part_names = [p for p in GAP_PARTS if any(p in r.gap_parts for r in runs)]
    if part_names:
        out["leaderlessGapParts"] = {
            p: spread([r.gap_parts[p] for r in runs if p in r.gap_parts]) for p in part_names
        }
    reports = [r.report for r in runs if r.report]
    steps = sorted({k for report in reports for k in report.get("durations") or {}})
    if steps:  # the roll report's own durations (probe, flip, oldExit, ...)
        durations = [report.get("durations") or {} for report in reports]
        out["rollDurations"] = {k: spread([d[k] for d in durations if k in d]) for k in steps}
    shares = [r.report["durations"].get("operatorShare") for r in runs if r.report]
    if shares and None not in shares:
        out["operatorShareSeconds"] = spread([float(s) for s in shares if s is not None])
    starts = [r.report["durations"].get("slotStart") for r in runs if r.report]
    if starts and None not in starts:  # the node's part: the slot's pod and agent up to kcp's start
        out["containerStartSeconds"] = spread([float(s) for s in starts if s is not None])
    cpus = [r.cpu_seconds for r in runs if r.cpu_seconds is not None]
    if cpus:
        out["operatorCpuSeconds"] = spread([round(c, 3) for c in cpus])
    return out


def share_breakdown(run: RollRun) -> dict[str, float]:
    """Where the operator's share of a roll went: what the operator did itself between the steps, and
    the front agent's flip. (The node starting the slot is the report's `slotStart`, outside the share.)"""
    if run.report is None or run.slot is None:
        return {}
    ts = {k: cond.parse_time(v) for k, v in run.report["timestamps"].items()}
    kcp_started, kcp_ready = run.slot.get("startedAt"), run.slot.get("readyAt")
    out: dict[str, float] = {}

    def span(name: str, start: Any, end: Any) -> None:
        if start is not None and end is not None:
            out[name] = round((end - start).total_seconds(), 3)

    span("createSlot", ts.get("slotStarting"), ts.get("slotCreated"))
    if kcp_started and kcp_ready:
        span("noticeReady", cond.parse_time(kcp_ready), ts.get("ready"))
    span("flip", ts.get("ready"), ts.get("flipped"))
    span("drainAndRetire", ts.get("probed"), ts.get("finished"))
    return out
