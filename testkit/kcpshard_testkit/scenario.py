"""Steps and checks shared by the end-to-end tests: create a shard, wait for a condition, keep a
client sending requests through the front, and check what is left when a roll ends."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from kcpshard.api import conditions as cond
from kcpshard.k8s.api import EVENTS, JOBS, KCPSHARDS, KCPSLOTS
from kcpshard_testkit.kcpbin import make_kcp
from kcpshard_testkit.load import KubeStyleLoad, LoadReport
from kcpshard_testkit.podprocs import pod_processes
from kcpshard_testkit.stack import Stack, processes_under
from kcpshard_testkit.tcp import free_port
from kcpshard_testkit.waiting import wait_for


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    found = cond.find((obj.get("status") or {}).get("conditions"), type_)
    return dict(found) if found else {}


async def create_shard(stack: Stack, name: str = "root", **spec: Any) -> int:
    """Create a shard with a fresh front port; returns the port."""
    port = free_port()
    manifest = stack.manifest(name, port, **spec)
    await stack.api.create(KCPSHARDS, stack.namespace, manifest)
    return port


async def wait_ready(stack: Stack, name: str = "root", timeout: float = 90) -> dict[str, Any]:
    """Ready=True, no roll under way, observedGeneration current."""

    async def ready() -> dict[str, Any] | None:
        shard = await stack.shard(name)
        status = shard.get("status") or {}
        if (
            condition(shard, "Ready").get("status") == "True"
            and not status.get("rollout")
            and status.get("observedGeneration") == shard["metadata"]["generation"]
        ):
            return shard
        return None

    return await _wait_shard(stack, name, f"shard {name} Ready=True", ready, timeout)


async def wait_stalled(stack: Stack, name: str = "root", timeout: float = 90) -> dict[str, Any]:
    """Stalled=True and no roll under way."""

    async def stalled() -> dict[str, Any] | None:
        shard = await stack.shard(name)
        if condition(shard, "Stalled").get("status") == "True" and not (shard.get("status") or {}).get(
            "rollout"
        ):
            return shard
        return None

    return await _wait_shard(stack, name, f"shard {name} Stalled=True", stalled, timeout)


async def _wait_shard(
    stack: Stack, name: str, what: str, probe: Callable[[], Awaitable[dict[str, Any] | None]], timeout: float
) -> dict[str, Any]:
    """wait_for, and on timeout say where the shard stood (its conditions and roll step)."""
    try:
        return await wait_for(what, probe, timeout=timeout)
    except TimeoutError as exc:
        try:
            status = (await stack.shard(name)).get("status") or {}
        except Exception as read:  # the timeout is the news; the state is only a hint
            raise TimeoutError(f"{exc}; the shard could not be read: {read}") from exc
        seen = "; ".join(
            f"{c.get('type')}={c.get('status')} {c.get('reason')}: {c.get('message')}"
            for c in status.get("conditions") or []
        )
        step = (status.get("rollout") or {}).get("step")
        raise TimeoutError(f"{exc}; last seen: step={step}; {seen}") from exc


async def wait_last_roll(
    stack: Stack, name: str, to_revision: str | None = None, timeout: float = 120
) -> dict[str, Any]:
    """The shard once a roll (to `to_revision`, or any other than the current one) has ended."""
    before = ((await stack.shard(name)).get("status") or {}).get("lastRoll") or {}

    async def ended() -> dict[str, Any] | None:
        shard = await stack.shard(name)
        status = shard.get("status") or {}
        last = status.get("lastRoll") or {}
        if status.get("rollout") or not last:
            return None
        if to_revision is not None:
            return shard if last.get("toRevision") == to_revision else None
        return shard if last.get("timestamps") != before.get("timestamps") else None

    return await wait_for(f"a roll of shard {name} to end", ended, timeout=timeout)


async def wait_step(stack: Stack, name: str, step: str, timeout: float = 60) -> dict[str, Any]:
    async def at_step() -> dict[str, Any] | None:
        shard = await stack.shard(name)
        rollout = (shard.get("status") or {}).get("rollout") or {}
        return shard if rollout.get("step") == step else None

    return await wait_for(f"shard {name} at step {step}", at_step, timeout=timeout)


async def events(stack: Stack, name: str) -> list[dict[str, Any]]:
    """The shard's Events, oldest first."""
    listed = await stack.api.list(
        EVENTS, stack.namespace, field_selector=f"involvedObject.kind=KcpShard,involvedObject.name={name}"
    )
    items = listed.get("items", [])
    return sorted(
        items, key=lambda e: (e.get("lastTimestamp") or e.get("eventTime") or "", e["metadata"]["name"])
    )


async def event_reasons(stack: Stack, name: str) -> list[str]:
    return [e.get("reason", "") for e in await events(stack, name)]


async def wait_event(stack: Stack, name: str, reason: str, timeout: float = 30) -> dict[str, Any]:
    async def found() -> dict[str, Any] | None:
        for event in await events(stack, name):
            if event.get("reason") == reason:
                return event
        return None

    return await wait_for(f"a {reason} Event on shard {name}", found, timeout=timeout)


@contextlib.asynccontextmanager
async def traffic(
    stack: Stack, port: int, name: str = "root", warmup: int = 10, *, fresh_connections: bool = False
) -> AsyncIterator[KubeStyleLoad]:
    """A kube-style client sending requests through the front for as long as the block runs."""
    admin = await stack.shard_admin(name)
    load = KubeStyleLoad(
        f"https://127.0.0.1:{port}", admin.token, admin.ca_pem, fresh_connections=fresh_connections
    )
    await load.start()
    try:

        async def warmed() -> bool:
            return load.report.ok >= warmup

        await wait_for("client traffic through the front", warmed, timeout=30)
        yield load
    finally:
        await load.stop()


async def more_requests(load: KubeStyleLoad, count: int = 10) -> LoadReport:
    """Wait until the client got `count` more answers (the front still serves)."""
    target = load.report.ok + count

    async def enough() -> bool:
        return load.report.ok >= target

    await wait_for("more client requests through the front", enough, timeout=30)
    return load.report


def argv(pid: int) -> list[bytes]:
    """A process's command line as /proc has it; [] once it has exited."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def exited(pid: int) -> bool:
    """Every thread of `pid` ended (a zombie's sockets are closed). HAProxy runs a thread per core: its
    leader can be a zombie while another thread still holds the listener."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        states = [Path(f"/proc/{pid}/task/{t}/stat").read_text().rsplit(")", 1)[1].split()[0] for t in tasks]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return all(state in ("Z", "X") for state in states)


def processes(where: Stack | Path) -> dict[int, list[bytes]]:
    """Live processes of a stack's workloads, with their argv: on a real node those of its namespace's
    pods (`podprocs.py`); for a folder, those whose command line names it (processes a test started)."""
    pids = pod_processes(where) if isinstance(where, Stack) else list(processes_under(where))
    found = {pid: argv(pid) for pid in pids}
    return {pid: args for pid, args in found.items() if args}


def kcp_processes(where: Stack | Path) -> list[int]:
    """Pids of stand-in kcp processes of a stack's workloads (or started under the folder)."""
    # The program is argv[0] or, run by its interpreter, argv[1]: a host agent's own arguments name it too.
    return [
        pid
        for pid, args in processes(where).items()
        if any(a.endswith(b"kcpshard-fake-kcp") for a in args[:2])
    ]


def agent_pids(where: Stack | Path, kind: str) -> list[int]:
    """Pids of the `kcpshard agent <kind>` processes (slot, front, backup) of a stack's workloads."""
    return [pid for pid, args in processes(where).items() if b"agent" in args and kind.encode() in args]


async def slot_names(stack: Stack, name: str = "root") -> list[str]:
    listed = await stack.api.list(KCPSLOTS, stack.namespace, label_selector=f"kcpshard.dev/shard={name}")
    return sorted(
        s["metadata"]["name"] for s in listed["items"] if not s["metadata"].get("deletionTimestamp")
    )


async def slot_jobs(stack: Stack, name: str = "root") -> list[str]:
    listed = await stack.api.list(
        JOBS, stack.namespace, label_selector=f"kcpshard.dev/shard={name},kcpshard.dev/component=slot"
    )
    return sorted(
        j["metadata"]["name"] for j in listed["items"] if not j["metadata"].get("deletionTimestamp")
    )


async def wait_settled(
    stack: Stack,
    name: str = "root",
    timeout: float = 60,
    kcps: Callable[[Stack], list[int]] = kcp_processes,
) -> None:
    """One slot object, one slot Job and one kcp process (found by `kcps`) are left: the active ones."""

    async def settled() -> bool:
        return (
            len(await slot_names(stack, name)) == 1
            and len(await slot_jobs(stack, name)) == 1
            and len(kcps(stack)) == 1
        )

    await wait_for(f"shard {name} down to one slot, one Job, one kcp", settled, timeout=timeout)


async def flips_to(stack: Stack, name: str, slot: str) -> int:
    """How often the operator flipped the shard's front to `slot` (its Flip Events)."""
    said = f"serve slot {slot} "
    found = await events(stack, name)
    return sum(int(e.get("count") or 1) for e in found if e.get("reason") == "Flip" and said in e["message"])


FAST: dict[str, str | float | bool] = {"rsa_bits": 2048}  # the stand-in's sa.key: quicker than kcp's 4096


async def serving_shard(
    stack: Stack, bin_dir: Path, name: str = "root", **spec: Any
) -> tuple[int, dict[str, Any]]:
    """A shard on a fresh kcp binary (`kcp-1`), once it serves; returns its front port and the shard."""
    kcp = {"version": "v0.32.1", "binary": make_kcp(bin_dir, "kcp-1", rsa_bits=FAST["rsa_bits"])}
    port = await create_shard(stack, name, kcp=kcp, **spec)
    return port, await wait_ready(stack, name)
