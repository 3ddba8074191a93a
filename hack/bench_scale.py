"""`make bench-scale`: N shards changed at once, and what the operator and the machine pay for it.

For each N in SHARDS (default "10 25 50"), on a fresh stack (the real control plane and the real node, the
pods in containers, the stand-in kcp from the test image; `bench_stack.py`): create N shards, wait until
all are Ready, then patch every shard's spec at once (concurrently) and wait until each one's last roll
is for the new generation. Records the wall time (first patch to last roll's end), the operator's peak
RSS, CPU seconds and API requests (kube-apiserver's audit log) per roll, the spread of the rolls'
operatorShare and total, and the machine: the stack's processes' RSS by kind (in all and per process:
a slot agent's is per slot) at the peak seen (sampled every second during the rolls), their CPU seconds
by kind and the load average. An N whose rolling pods exceed the node's pod capacity (the kubelet's
maxPods) is recorded as not fitting, not run. A step that does not finish in time is recorded as the N's
failure (the shards left and their conditions) and stops the larger Ns; a roll that ended otherwise
than Succeeded is recorded, and the next N runs.
Figures, not assertions; writes .bench/scale.json.
"""

from __future__ import annotations

import asyncio
import collections
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

from api_requests import AuditLog
from bench_machine import Machine, cpu_seconds, peak_rss_mib
from bench_stack import bench_stack, find_audit, stand_in_kcp

from kcpshard.k8s.api import KCPSHARDS, NODES, PODS
from kcpshard_testkit import scenario
from kcpshard_testkit.controlplane import AUDIT_ENV
from kcpshard_testkit.stack import Stack
from kcpshard_testkit.waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]
PODS_PER_ROLLING_SHARD = 3  # the front's pod and both slots' while the shard rolls


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
        # an operator that exited (e.g. at import) makes no progress: say so now, not at the timeout
        assert stack.operator is None or stack.operator.popen.poll() is None, f"see {stack.operator.log}"
        listed = await stack.api.list(KCPSHARDS, stack.namespace)
        shards.update({s["metadata"]["name"]: s for s in listed["items"]})
        for name in done:
            if done[name] is None and name in shards and probe_done(shards[name]):
                done[name] = shards[name]
        return all(v is not None for v in done.values())

    try:
        await wait_for(what, all_done, timeout=timeout, interval=1.0)
    except (TimeoutError, AssertionError) as exc:
        reason = str(exc) if isinstance(exc, TimeoutError) else f"the operator exited: {exc}"
        pending = sorted(name for name, v in done.items() if v is None)
        first = where(shards[pending[0]]) if pending[0] in shards else {"shard": pending[0]}
        return {"what": reason, "pending": pending, **first}
    return None


async def _pods_short(stack: Stack, shards: int) -> dict[str, Any] | None:
    """None if `shards` rolling at once fit the node's pod capacity (the kubelet's maxPods), else why not:
    a pod over it waits Pending, and so would its roll."""
    node = await stack.api.get(NODES, None, stack.info.node)
    capacity = int(node["status"]["allocatable"]["pods"])
    pods = (await stack.api.list(PODS, None, field_selector=f"spec.nodeName={stack.info.node}"))["items"]
    used = sum(1 for pod in pods if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))
    need = PODS_PER_ROLLING_SHARD * shards
    if used + need <= capacity:
        return None
    return {"what": f"{shards} shards rolling need {need} pods; the node takes {capacity} ({used} in use)"}


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
    async with bench_stack(workdir) as stack:
        assert stack.operator is not None
        operator_pid = stack.operator.popen.pid
        short = await _pods_short(stack, shards)
        if short:
            result["failure"] = short
            return result
        audit = AuditLog(find_audit(workdir))
        kcp = stand_in_kcp(stack)
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

        machine = Machine(stack, operator_pid)
        await machine.first()
        stop_sampling = asyncio.Event()
        sampler = asyncio.create_task(machine.run(stop_sampling))
        cpu0 = cpu_seconds(operator_pid)
        log_offset = stack.operator.log.stat().st_size
        audit.mark()
        started = time.time()
        patched = await asyncio.gather(
            *(
                stack.api.patch(KCPSHARDS, stack.namespace, n, {"spec": {"extraArgs": ["-v=1"]}})
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
        stop_sampling.set()
        await sampler
        await asyncio.to_thread(machine.sample)
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
            # per process of each kind at that peak: a slot agent's is per slot, a front agent's per shard
            "rssMiBPerProcessByKind": machine.per_process_by_kind,
            "cpuSecondsByKind": machine.cpu_by_kind(),
            "loadAverageMax": machine.load_max,
            "memAvailableMinMiB": round(machine.available_min_mib),
            "podListingsTimedOut": machine.refresh_failures,
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

    each = r.get("rssMiBPerProcessByKind") or {}
    kinds = ", ".join(
        f"{k} {v:.0f} ({each[k]['mean']:.0f} each)" if k in each else f"{k} {v:.0f}"
        for k, v in (r.get("peakRssMiBByKind") or {}).items()
    )
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
        "| peak RSS MiB by kind (per process) | CPU s by kind | run s | first failure |"
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
