"""`make api-requests`: the operator's requests to the API server, counted by the API server itself.

kube-apiserver's audit log (KCPSHARD_APISERVER_AUDIT turns it on in the test control plane) records
every request with its user, verb and resource; this keeps the operator's ServiceAccount's. For each N
in SHARDS (default "1 20") it makes N shards on the stand-in kcp (their pods in containers on the real
node, `bench_stack.py`), waits until all are Ready, then counts the operator's requests over WINDOW
seconds (default 60) of steady state, the rounds in them (a round lists its shard's KcpSlots exactly
once) and what its lists returned (objects and bytes, from the lists' responses in the log: a list of
every shard is one request whose size grows with N). With N=1 it also counts one roll's requests.

OPERATOR_SRC=<dir> runs the operator from another source tree (e.g. an older commit's `operator/`)
against this tree's stack and agents (this tree's image), for a before/after. Figures, not assertions;
writes .bench/api-requests.json.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench_stack import bench_stack, find_audit, stand_in_kcp

from kcpshard.k8s.api import KCPSHARDS
from kcpshard_testkit import scenario
from kcpshard_testkit.controlplane import AUDIT_ENV
from kcpshard_testkit.stack import Stack
from kcpshard_testkit.waiting import wait_for

OPERATOR_USER = "system:serviceaccount:kcpshard-system:kcpshard-operator"
ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass
class Requests:
    """The operator's requests in a stretch of the audit log: verb resource[/subresource] -> requests;
    for its lists, the objects and the bytes (compact JSON, as the audit log holds them) they returned."""

    counts: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    listed: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    listed_bytes: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)


class AuditLog:
    """The operator's requests in kube-apiserver's audit log, read from an offset on."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.inode: int | None = None

    def mark(self) -> None:
        stat = self.path.stat()
        self.offset, self.inode = stat.st_size, stat.st_ino

    def _lines(self) -> Iterator[bytes]:
        """From the mark on, across rotations: at 100 MB kube-apiserver renames the log to
        audit-<time>.log (same inode) and starts a new one."""
        rotated = sorted(self.path.parent.glob(f"{self.path.stem}-*{self.path.suffix}"))
        started = self.inode is None  # no mark: the whole current log
        for file in [*rotated, self.path] if self.inode is not None else [self.path]:
            offset = 0 if started else self.offset
            if not started and file.stat().st_ino != self.inode:
                continue  # before the mark
            started = True
            with file.open("rb") as f:
                f.seek(offset)
                yield from f

    def since_mark(self) -> Requests:
        """Each audit ID once (a watch logs two stages)."""
        seen: set[str] = set()
        out = Requests()
        for raw in self._lines():
            try:
                event = json.loads(raw)
            except ValueError:
                continue  # a line still being written
            if (event.get("user") or {}).get("username") != OPERATOR_USER or event["auditID"] in seen:
                continue
            seen.add(event["auditID"])
            ref = event.get("objectRef") or {}
            resource = ref.get("resource", event.get("requestURI", "?"))
            if ref.get("subresource"):
                resource += f"/{ref['subresource']}"
            out.counts[f"{event['verb']} {resource}"] += 1
            body = event.get("responseObject")
            if event["verb"] == "list" and isinstance(body, dict):
                out.listed[resource] += len(body.get("items") or [])
                out.listed_bytes[resource] += len(json.dumps(body, separators=(",", ":")))
        return out


def _rounds(counts: collections.Counter[str]) -> int:
    return counts["list kcpslots"]


def _top(counts: collections.Counter[str], n: int = 8) -> str:
    return ", ".join(f"{key} {value}" for key, value in counts.most_common(n))


async def _shards_ready(stack: Stack, names: list[str]) -> None:
    async def all_ready() -> bool:
        for name in names:
            shard = await stack.shard(name)
            if scenario.condition(shard, "Ready").get("status") != "True" or (shard.get("status") or {}).get(
                "rollout"
            ):
                return False
        return True

    await wait_for(f"{len(names)} shards Ready", all_ready, timeout=120 + 20 * len(names))


async def measure(workdir: Path, shards: int, window: float) -> dict[str, Any]:
    operator_env = {"PYTHONPATH": os.environ["OPERATOR_SRC"]} if os.environ.get("OPERATOR_SRC") else None
    async with bench_stack(workdir, operator_env) as stack:
        audit = AuditLog(find_audit(workdir))
        kcp = stand_in_kcp(stack)
        names = [f"shard{i:02d}" for i in range(shards)]
        for name in names:
            await scenario.create_shard(stack, name, kcp=kcp)
        await _shards_ready(stack, names)
        audit.mark()
        started = time.monotonic()
        await asyncio.sleep(window)  # a measurement window, not a wait for a condition
        elapsed = time.monotonic() - started
        window_requests = audit.since_mark()
        steady = window_requests.counts
        total = sum(steady.values())
        rounds = _rounds(steady)
        result: dict[str, Any] = {
            "shards": shards,
            "windowSeconds": round(elapsed, 1),
            "requests": total,
            "perSecond": round(total / elapsed, 2),
            "perShardPerSecond": round(total / elapsed / shards, 3),
            "rounds": rounds,
            "perRound": round(total / max(rounds, 1), 2),
            "listedObjectsPerRound": round(sum(window_requests.listed.values()) / max(rounds, 1), 1),
            "listedKiBPerRound": round(sum(window_requests.listed_bytes.values()) / 1024 / max(rounds, 1), 1),
            "byVerbResource": dict(steady.most_common()),
            "listedObjects": dict(window_requests.listed.most_common()),
            "listedBytes": dict(window_requests.listed_bytes.most_common()),
        }
        if shards == 1:
            audit.mark()
            binary = stand_in_kcp(stack, "kcp-2")["binary"]
            await stack.api.patch(KCPSHARDS, stack.namespace, names[0], {"spec": {"kcp": {"binary": binary}}})
            shard = await scenario.wait_last_roll(stack, names[0])
            roll = audit.since_mark().counts
            result["roll"] = {
                "result": shard["status"]["lastRoll"]["result"],
                "requests": sum(roll.values()),
                "rounds": _rounds(roll),
                "byVerbResource": dict(roll.most_common()),
            }
        return result


async def main() -> int:
    os.environ[AUDIT_ENV] = "1"  # the dev environment (a subprocess) inherits it
    shard_counts = [int(n) for n in os.environ.get("SHARDS", "1 20").split()]
    window = float(os.environ.get("WINDOW", "60"))
    source = os.environ.get("OPERATOR_SRC") or "this tree"
    results = []
    with tempfile.TemporaryDirectory(prefix="kcpshard-apireq-") as tmp:
        for n in shard_counts:
            results.append(await measure(Path(tmp) / f"n{n}", n, window))
    print(f"Operator's API requests (kube-apiserver audit log; operator from {source})\n")
    print(
        "| shards | window s | requests | per s | per shard per s | rounds | per round "
        "| objects listed per round | KiB listed per round | most requested |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        top = _top(collections.Counter(r["byVerbResource"]), 4)
        print(
            f"| {r['shards']} | {r['windowSeconds']} | {r['requests']} | {r['perSecond']} | "
            f"{r['perShardPerSecond']} | {r['rounds']} | {r['perRound']} | {r['listedObjectsPerRound']} | "
            f"{r['listedKiBPerRound']} | {top} |"
        )
    for r in results:
        listed = ", ".join(f"{k} {v}" for k, v in r["listedObjects"].items())
        print(f"\nObjects the operator's lists returned in the window, N={r['shards']}: {listed}")
    for r in results:
        if "roll" in r:
            roll = r["roll"]
            print(f"\nOne roll ({roll['result']}): {roll['requests']} requests in {roll['rounds']} rounds: ")
            print(_top(collections.Counter(roll["byVerbResource"]), 12))
    out = ROOT / ".bench" / "api-requests.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"operatorSource": source, "results": results}, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
