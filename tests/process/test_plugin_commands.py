"""`kubectl kcpshard` run by the real kubectl (a `kubectl-kcpshard` executable on PATH) against the real
API server, in the test's namespace; the test writes the statuses each case needs (no operator runs).

promote, abort and retry set their annotation, or refuse and change nothing; failures are one line
and an exit code, never a traceback.
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
from kcpshard.api.annotations import ABORT, PROMOTE, RETRY
from kcpshard.k8s.api import KCPSHARDS, KCPSLOTS, NAMESPACES, ApiClient
from kcpshard_testkit.stack import shard_manifest

pytestmark = pytest.mark.timeout(120)

BIN = Path(sys.executable).parent
KUBECTL = str(BIN / "kubectl")
NOW = "2026-03-01T10:00:00Z"


def _interruptible() -> None:
    """Ctrl-C as in a terminal: a suite started as a shell's background job (`make test &`, nohup)
    inherits SIGINT ignored, and an ignored signal stays ignored across exec, so the watch would never
    stop on the SIGINT these tests send."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@dataclass
class Result:
    code: int
    out: str
    err: str


@dataclass
class Env:
    namespace: str
    api: ApiClient
    vars: dict[str, str]

    async def start(self, *args: str, **env: str) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            KUBECTL,
            "kcpshard",
            *args,
            env={**self.vars, **env},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_interruptible,
        )

    async def run(self, *args: str, **env: str) -> Result:
        proc = await self.start(*args, **env)
        async with asyncio.timeout(60):
            out, err = await proc.communicate()
        return Result(proc.returncode or 0, out.decode(), err.decode())

    async def shard(self, name: str = "root") -> dict[str, Any]:
        return await self.api.get(KCPSHARDS, self.namespace, name)

    async def set_status(self, name: str = "root", **status: Any) -> None:
        await self.api.patch(KCPSHARDS, self.namespace, name, {"status": status}, subresource="status")


@pytest.fixture
async def env(namespace: str, kubeconfig: Path, api: ApiClient, tmp_path: Path) -> Env:
    """The plugin's environment: the admin's kubeconfig, whose namespace is the test's, and a shard `root`."""
    home = tmp_path / "home"
    home.mkdir()
    variables = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "HOME": str(home),
        "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")]),
    }
    manifest = shard_manifest("root", etcd="http://127.0.0.1:1", front_port=6443, namespace=namespace)
    await api.create(KCPSHARDS, namespace, manifest)
    return Env(namespace, api, variables)


def conditions(
    ready: cond.Status, reconciling: cond.Status, stalled: cond.Status, message: str = ""
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for type_, status in (("Ready", ready), ("Reconciling", reconciling), ("Stalled", stalled)):
        out = cond.set_condition(out, type_, status, "Because", message, at=NOW)
    return out


def rollout(step: str, shape: str = "BlueGreen") -> dict[str, Any]:
    return {
        "step": step,
        "fromSlot": "a",
        "toSlot": "b",
        "targetRevision": "r2",
        "fromRevision": "r1",
        "shape": shape,
        "startedAt": NOW,
        "timestamps": {"started": NOW},
    }


def report(result: str, to_revision: str, started: str, **extra: Any) -> dict[str, Any]:
    return {"result": result, "toRevision": to_revision, "timestamps": {"started": started}, **extra}


async def test_the_plugin_is_found_by_kubectl_and_says_its_version(env: Env) -> None:
    res = await env.run("version")
    assert res.code == 0, res.err
    assert res.out.splitlines() == ["kubectl-kcpshard: v0.1.0", "  API: kcpshard.dev/v1alpha1"]
    listed = await asyncio.create_subprocess_exec(
        KUBECTL,
        "plugin",
        "list",
        env=env.vars,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, _ = await listed.communicate()
    assert str(BIN / "kubectl-kcpshard") in out.decode()


async def test_promote_sets_its_annotation_during_a_roll(env: Env) -> None:
    refused = await env.run("promote", "root")
    assert refused.code == 1
    assert refused.err == "error: kcpshard root has no roll under way: nothing to promote\n"
    assert PROMOTE not in ((await env.shard())["metadata"].get("annotations") or {})

    await env.set_status(conditions=conditions("False", "True", "False"), rollout=rollout("WaitingReady"))
    done = await env.run("promote", "root")
    assert done.code == 0, done.err
    value = (await env.shard())["metadata"]["annotations"][PROMOTE]
    assert done.out == f'kcpshard "root" promote requested ({PROMOTE}={value})\n'
    cond.parse_time(value)  # a timestamp: a second promote is a new request
    again = await env.run("promote", "root")
    assert (await env.shard())["metadata"]["annotations"][PROMOTE] > value, again.err


@pytest.mark.parametrize("step", ["Starting", "WaitingReady", "Flipping"])
async def test_abort_before_the_flip_sets_its_annotation(env: Env, step: str) -> None:
    await env.set_status(conditions=conditions("False", "True", "False"), rollout=rollout(step))
    res = await env.run("abort", "root")
    assert res.code == 0, res.err
    assert ABORT in (await env.shard())["metadata"]["annotations"]
    assert res.out.startswith('kcpshard "root" abort requested')


@pytest.mark.parametrize("step", ["StoppingOld", "HandingOverLease", "Probing", "Draining", "Retiring"])
async def test_abort_after_the_flip_is_refused(env: Env, step: str) -> None:
    await env.set_status(conditions=conditions("False", "True", "False"), rollout=rollout(step))
    res = await env.run("abort", "root")
    assert res.code == 1
    assert res.out == ""
    assert res.err.startswith(f"error: the roll of kcpshard root is past the flip (step {step}): ")
    assert "the store has moved on" in res.err and res.err.count("\n") == 1
    assert ABORT not in ((await env.shard())["metadata"].get("annotations") or {})


async def test_retry_only_a_stalled_roll(env: Env) -> None:
    await env.set_status(conditions=conditions("True", "False", "False"))
    refused = await env.run("retry", "root")
    assert (refused.code, refused.err) == (1, "error: kcpshard root is not stalled: nothing to retry\n")
    await env.set_status(conditions=conditions("False", "False", "True", "the roll failed"))
    done = await env.run("retry", "root")
    assert done.code == 0, done.err
    assert RETRY in (await env.shard())["metadata"]["annotations"]


async def test_history_newest_first_or_the_last_roll(env: Env) -> None:
    empty = await env.run("history", "root")
    assert (empty.code, empty.out) == (0, "kcpshard root has no rolls yet\n")
    last = report("Succeeded", "r1", "2026-03-01T10:00:00.1Z", toSlot="a", durations={"total": 4.5})
    await env.set_status(lastRoll=last)
    only = await env.run("history", "root")
    assert [line.split()[:2] for line in only.out.splitlines()] == [["#", "RESULT"], ["1", "Succeeded"]]
    newer = report("Aborted", "r2", "2026-03-02T10:00:00.1Z", reason="ReadyTimeout", fromSlot="a", toSlot="b")
    await env.set_status(history=[newer, last], lastRoll=newer)
    both = (await env.run("history", "root")).out.splitlines()
    assert both[1].split()[:2] == ["1", "Aborted"] and both[1].split()[-1] == "ReadyTimeout"
    assert both[2].split()[:2] == ["2", "Succeeded"] and "4.50s" in both[2]


async def test_status_once_without_a_terminal(env: Env) -> None:
    await env.set_status(
        conditions=conditions("False", "True", "False", "slot b created; next: WaitingReady"),
        rollout=rollout("WaitingReady"),
        activeSlot="a",
        front={"observedBackend": "a", "observedPort": 4001},
    )
    slot = {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "KcpSlot",
        "metadata": {"name": "root-b", "namespace": env.namespace, "labels": {"kcpshard.dev/shard": "root"}},
        "spec": {"shard": "root", "slot": "b", "revision": "r2"},
    }
    await env.api.create(KCPSLOTS, env.namespace, slot)
    res = await env.run("status", "root")
    assert res.code == 0, res.err
    assert "\x1b[" not in res.out  # no terminal, no terminal codes
    lines = res.out.splitlines()
    assert "Status:          ◌ Progressing" in lines
    assert "Serving:         slot a (front a:4001)" in lines
    assert "  ◌ WaitingReady" in [line[:16] for line in lines]
    assert "Slot b (new):" in lines


async def test_status_watch_without_a_terminal_appends_a_block_per_change(env: Env) -> None:
    await env.set_status(conditions=conditions("False", "True", "False", "one"), rollout=rollout("Starting"))
    proc = await env.start("status", "root", "-w")
    assert proc.stdout is not None
    seen: list[str] = []

    async def read_until(text: str) -> None:
        async with asyncio.timeout(30):
            while not any(text in line for line in seen):
                seen.append((await proc.stdout.readline()).decode())  # type: ignore[union-attr]

    try:
        await read_until("Steps (Starting):")
        await env.set_status(
            conditions=conditions("False", "True", "False", "two"), rollout=rollout("WaitingReady")
        )
        await read_until("Steps (WaitingReady):")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        await proc.wait()
    text = "".join(seen)
    assert "\x1b[" not in text
    first, second = text.split("\n\nName:")
    assert "Message:         one" in first and "Steps (Starting):" in first
    assert "Message:         two" in second and "Steps (WaitingReady):" in second


async def _every_shard(api: ApiClient) -> set[tuple[str, str]]:
    items = (await api.list(KCPSHARDS, None)).get("items") or []
    return {(item["metadata"]["namespace"], item["metadata"]["name"]) for item in items}


@pytest.fixture
async def team(env: Env) -> AsyncIterator[str]:
    """A second namespace, deleted after the test (the name sorts right after the test's own)."""
    name = f"{env.namespace}-team"
    await env.api.create(
        NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    yield name
    await env.api.delete(NAMESPACES, None, name)


async def test_list_one_namespace_all_and_watch(env: Env, team: str) -> None:
    other = shard_manifest("beta", etcd="http://127.0.0.1:1", front_port=6444, namespace=team)
    await env.api.create(KCPSHARDS, team, other)
    mine = await env.run("list")
    assert [line.split()[0] for line in mine.out.splitlines()] == ["NAME", "root"]
    assert (await env.run("list", "-n", team)).out.splitlines()[1].split()[0] == "beta"
    # The API server is shared with the tests that ran before: the shards of their namespaces (maybe
    # being deleted now) are listed too. Every shard of every namespace is, and nothing else.
    before = await _every_shard(env.api)
    every = (await env.run("list", "-A")).out.splitlines()
    after = await _every_shard(env.api)
    assert every[0].split()[:2] == ["NAMESPACE", "NAME"]
    rows = [(line.split()[0], line.split()[1]) for line in every[1:]]
    assert rows == sorted(rows)
    assert before & after <= set(rows) <= before | after
    assert [row for row in rows if row[0] in (env.namespace, team)] == [
        (env.namespace, "root"),
        (team, "beta"),
    ]
    root = next(line for line in every[1:] if line.split()[:2] == [env.namespace, "root"])
    assert root.split()[2] == "Progressing"  # no status yet: the operator has not seen it

    proc = await env.start("list", "-w")
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(30):
            assert (await proc.stdout.readline()).decode().split()[0] == "NAME"
            assert (await proc.stdout.readline()).decode().split()[:2] == ["root", "Progressing"]
            await env.set_status(conditions=conditions("True", "False", "False", "serving"), activeSlot="a")
            changed = (await proc.stdout.readline()).decode().split()
        assert changed[:3] == ["root", "Healthy", "a"]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        await proc.wait()


async def test_failures_are_one_line_and_an_exit_code(env: Env, tmp_path: Path) -> None:
    missing = await env.run("status", "nope")
    assert missing.code == 1
    assert missing.err == 'Error from server (NotFound): kcpshards.kcpshard.dev "nope" not found\n'

    config = tmp_path / "unreachable.kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: x, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "contexts: [{name: x, context: {cluster: x, user: x}}]\nusers: [{name: x, user: {token: t}}]\n"
    )
    down = await env.run("status", "root", "--kubeconfig", str(config))
    assert down.code == 1
    assert down.err.startswith("error: cannot reach https://127.0.0.1:9: ") and down.err.count("\n") == 1
    assert "Traceback" not in down.err

    broken = await env.run("list", KUBECONFIG=str(tmp_path / "absent"))
    assert (broken.code, broken.err) == (1, f"error: no file of $KUBECONFIG exists: {tmp_path / 'absent'}\n")

    usage = await env.run("frobnicate")
    assert usage.code == 2 and "invalid choice: 'frobnicate'" in usage.err
