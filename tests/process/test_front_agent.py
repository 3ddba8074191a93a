"""The front agent with a real HAProxy against the real API server, each test's shard in the test's
namespace: as a subprocess (`python -m kcpshard.agent.front`), and in-process for the corner cases (where
a test reads the agent's own patches and log, or replaces one of its functions).

The tests play the operator: they write `status.front.desiredBackend`/`desiredPort`/`drain` and check that
the agent reports what it applied and that traffic through the front reaches the right echo server.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import pytest

from kcpshard.agent import front_pair
from kcpshard.agent.front import FrontAgent
from kcpshard.agent.haproxy import runtime_socket_path
from kcpshard.k8s.api import KCPSHARDS, PODS, SERVICEACCOUNTS, ApiClient, ResourceRef
from kcpshard.k8s.credentials import Credentials, load_credentials
from kcpshard.k8s.names import LABEL_COMPONENT, LABEL_SHARD, SERVING_GATE
from kcpshard_testkit import scenario
from kcpshard_testkit.tcp import Client, Echo, eventually, free_port
from kcpshard_testkit.waiting import wait_for

SHARD = "alpha"
HAPROXY = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin") or ""

pytestmark = [
    pytest.mark.skipif(not HAPROXY, reason="haproxy is not installed (Debian package haproxy)"),
    pytest.mark.timeout(90),
]


class Agent:
    """The front agent in its own process group (HAProxy runs in that group too)."""

    def __init__(self, proc: subprocess.Popen[bytes], log_path: Path, state_dir: Path) -> None:
        self.proc, self.log_path, self.state_dir = proc, log_path, state_dir

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
async def front_port() -> int:
    return free_port()


def spawn_agent(
    kubeconfig: Path, namespace: str, state_dir: Path, log_path: Path, extra: tuple[str, ...] = ()
) -> Agent:
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kcpshard.agent.front",
                "--namespace",
                namespace,
                "--shard",
                SHARD,
                "--state-dir",
                str(state_dir),
                "--haproxy",
                HAPROXY,
                "--kubeconfig",
                str(kubeconfig),
                "--report-interval",
                "0.2",
                *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Agent(proc, log_path, state_dir)


@pytest.fixture
async def agent(
    kubeconfig: Path, namespace: str, api: ApiClient, tmp_path: Path, front_port: int
) -> AsyncIterator[Agent]:
    await api.create(KCPSHARDS, namespace, shard_body(namespace, front_port))
    running = spawn_agent(kubeconfig, namespace, tmp_path / "front", tmp_path / "agent.log")
    try:
        yield running
    finally:
        running.kill_group()


def shard_body(namespace: str, port: int) -> dict[str, Any]:
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "KcpShard",
        "metadata": {"name": SHARD, "namespace": namespace},
        "spec": {
            "kcp": {"version": "v0.32.1"},
            "node": "local",
            "store": {"etcd": {"endpoints": ["http://127.0.0.1:2379"]}},
            "front": {"address": "127.0.0.1", "port": port},
        },
    }


async def front_status(api: ApiClient) -> dict[str, Any]:
    """The shard's status.front, read in `api`'s namespace (the test's: see the `api` fixture)."""
    obj = await api.get(KCPSHARDS, api.default_namespace, SHARD)
    return dict((obj.get("status") or {}).get("front") or {})


async def operator_writes(api: ApiClient, front: dict[str, Any], **status: Any) -> None:
    """What the operator does: a merge patch on /status with its own keys."""
    body = {"status": {"front": front, **status}}
    await api.patch(KCPSHARDS, api.default_namespace, SHARD, body, subresource="status")


async def answer(port: int, text: str) -> str:
    client = await Client.connect(port)
    try:
        return await client.ask(text)
    finally:
        client.close()


async def test_front_agent_follows_desired_backend_and_drains(
    api: ApiClient, agent: Agent, echoes: tuple[Echo, Echo], front_port: int
) -> None:
    a, b = echoes

    async def reported_connections() -> bool:
        return (await front_status(api)).get("connections") == {"a": 0, "b": 0}

    await eventually(reported_connections)

    await operator_writes(api, {"desiredBackend": "a", "desiredPort": a.port}, activeSlot="a")

    async def observed_a() -> bool:
        front = await front_status(api)
        return front.get("observedBackend") == "a" and front.get("observedPort") == a.port

    await eventually(observed_a)
    front = await front_status(api)
    assert front["desiredBackend"] == "a" and front["observedAt"]  # the operator's key survived
    assert (await api.get(KCPSHARDS, api.default_namespace, SHARD))["status"]["activeSlot"] == "a"

    on_a = await Client.connect(front_port)
    assert await on_a.ask("one") == "a:one"

    await operator_writes(api, {"desiredBackend": "b", "desiredPort": b.port})

    async def observed_b() -> bool:
        front = await front_status(api)
        return front.get("observedBackend") == "b" and front.get("observedPort") == b.port

    await eventually(observed_b)
    assert await answer(front_port, "new") == "b:new"
    assert await on_a.ask("two") == "a:two"  # established before the flip: still on a

    async def one_on_a() -> bool:
        return (await front_status(api)).get("connections", {}).get("a") == 1

    await eventually(one_on_a)

    await operator_writes(api, {"drain": "a"})
    assert await on_a.closed_by_peer()

    async def a_drained() -> bool:
        return (await front_status(api)).get("connections", {}).get("a") == 0

    await eventually(a_drained)
    assert await answer(front_port, "after") == "b:after"


async def test_front_agent_restarts_a_dead_haproxy_and_stops_on_sigterm(
    api: ApiClient, agent: Agent, echoes: tuple[Echo, Echo], front_port: int
) -> None:
    _, b = echoes
    await operator_writes(api, {"desiredBackend": "b", "desiredPort": b.port})

    async def serves_b() -> bool:
        return await answer(front_port, "x") == "b:x"

    async def confirmed() -> bool:  # reported once both processes serve it, as the operator waits for
        return (await front_status(api)).get("observedBackend") == "b"

    await eventually(confirmed)
    assert await serves_b()

    first, second = await _haproxy_pid(agent.state_dir, 0), await _haproxy_pid(agent.state_dir, 1)
    assert first != second  # two processes share the front port
    os.kill(first, signal.SIGKILL)
    await eventually(lambda: holds(scenario.exited(first)))
    # The other one still listens: every new connection is answered while the first comes back.
    for n in range(20):
        assert await answer(front_port, str(n)) == f"b:{n}"

    async def restarts_reported(count: int) -> bool:
        front = await front_status(api)
        return front.get("restarts") == count and "error" not in front and front.get("observedBackend") == "b"

    await eventually(lambda: restarts_reported(1))
    assert (await front_status(api))["lastRestart"].startswith("haproxy-0 exited with signal SIGKILL at ")
    replaced = await _haproxy_pid(agent.state_dir, 0)
    assert replaced != first
    assert "restarting it" in agent.log()

    # Both at once: nothing listens until the agent brings them back, with the desired backend again.
    os.kill(replaced, signal.SIGKILL)
    os.kill(second, signal.SIGKILL)
    await eventually(serves_b)
    await eventually(lambda: restarts_reported(3))
    assert agent.proc.poll() is None  # the agent itself never exited

    agent.proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(agent.proc.wait, 15) == 0
    with pytest.raises(OSError):
        await Client.connect(front_port)  # HAProxy went with the agent
    assert "Traceback" not in agent.log()


async def test_front_agent_reports_a_taken_port_and_serves_once_it_is_free(
    kubeconfig: Path, namespace: str, api: ApiClient, tmp_path: Path, echoes: tuple[Echo, Echo]
) -> None:
    a, _ = echoes
    taken = socket.socket()
    try:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        await api.create(KCPSHARDS, namespace, shard_body(namespace, port))
        agent = spawn_agent(kubeconfig, namespace, tmp_path / "front", tmp_path / "agent.log")
        try:

            async def error_reported() -> bool:
                return "error" in await front_status(api)

            await eventually(error_reported)
            front = await front_status(api)
            assert front["error"] == (
                f"cannot listen on 127.0.0.1:{port}: the address is already in use on node local "
                "(another process holds the port)"
            )
            assert "observedAt" not in front
            assert agent.proc.poll() is None  # still running, retrying

            taken.close()

            async def listening() -> bool:
                front = await front_status(api)
                return "error" not in front and bool(front.get("observedAt"))

            await eventually(listening)
            await operator_writes(api, {"desiredBackend": "a", "desiredPort": a.port})

            async def serves_a() -> bool:
                return await answer(port, "x") == "a:x"

            await eventually(serves_a)
            assert agent.proc.poll() is None
        finally:
            agent.kill_group()
    finally:
        taken.close()
    assert "Traceback" not in agent.log()


async def _haproxy_pid(state_dir: Path, member: int) -> int:
    info = await _runtime(runtime_socket_path(state_dir / f"haproxy-{member}"), "show info")
    return int(next(line.split(":", 1)[1] for line in info.splitlines() if line.startswith("Pid:")))


async def _runtime(socket_path: Path, cmd: str) -> str:
    reader, writer = await asyncio.open_unix_connection(str(socket_path))
    writer.write(cmd.encode() + b"\n")
    await writer.drain()
    data = await reader.read()
    writer.close()
    return data.decode()


# -- in-process ------------------------------------------------------------------------------------------


class RecordingApi(ApiClient):
    """The agent's client of the real API server: it keeps every patch the agent sends, as sent."""

    def __init__(self, credentials: Credentials) -> None:
        super().__init__(credentials)
        self.patches: list[tuple[ResourceRef, str, str | None, dict[str, Any]]] = []

    async def patch(
        self,
        ref: ResourceRef,
        namespace: str | None,
        name: str,
        patch: Any,
        *,
        kind: Literal["merge", "json", "strategic"] = "merge",
        subresource: str | None = None,
    ) -> dict[str, Any]:
        self.patches.append((ref, kind, subresource, copy.deepcopy(patch)))
        return await super().patch(ref, namespace, name, patch, kind=kind, subresource=subresource)

    def front_patches(self) -> list[dict[str, Any]]:
        """The status.front of each patch, checking that each is a merge patch of the shard's /status."""
        fronts = []
        for ref, kind, subresource, patch in self.patches:
            assert (ref, kind, subresource) == (KCPSHARDS, "merge", "status"), (ref, kind, subresource)
            assert set(patch) == {"status"} and set(patch["status"]) == {"front"}, patch
            fronts.append(dict(patch["status"]["front"]))
        return fronts


@pytest.fixture
async def agent_api(kubeconfig: Path) -> AsyncIterator[RecordingApi]:
    client = RecordingApi(load_credentials(kubeconfig))
    yield client
    await client.aclose()


async def holds(value: bool) -> bool:
    return value


@contextlib.asynccontextmanager
async def running_agent(api: RecordingApi, state_dir: Path, **kw: Any) -> AsyncIterator[FrontAgent]:
    """The agent in this process; stopped (and its HAProxy with it) on exit."""
    agent = FrontAgent(
        api,
        api.default_namespace,
        SHARD,
        state_dir,
        binary=HAPROXY,
        report_interval=0.05,
        **kw,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        yield agent
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 15) == 0


async def serving_gate(api: ApiClient, pod: str, status: str) -> bool:
    """The pod's readiness gate, as the agent in it set it."""
    found = await api.get(PODS, api.default_namespace, pod)
    gates = [c for c in found.get("status", {}).get("conditions") or [] if c["type"] == SERVING_GATE]
    return [c["status"] for c in gates] == [status]


async def front_reports(api: ApiClient, **expected: Any) -> bool:
    front = await front_status(api)
    return all(front.get(key) == value for key, value in expected.items())


@pytest.fixture
async def in_process(
    api: ApiClient, agent_api: RecordingApi, namespace: str, tmp_path: Path, front_port: int
) -> AsyncIterator[FrontAgent]:
    await api.create(KCPSHARDS, namespace, shard_body(namespace, front_port))
    async with running_agent(agent_api, tmp_path / "front") as agent:
        await eventually(lambda: front_reports(api, connections={"a": 0, "b": 0}))
        yield agent


async def test_agent_patches_only_its_own_keys(
    api: ApiClient,
    agent_api: RecordingApi,
    in_process: FrontAgent,
    echoes: tuple[Echo, Echo],
    front_port: int,
) -> None:
    a, _ = echoes
    await operator_writes(api, {"desiredBackend": "a", "desiredPort": a.port}, activeSlot="a")
    await eventually(lambda: front_reports(api, observedBackend="a"))
    assert await answer(front_port, "hi") == "a:hi"
    allowed = {"observedBackend", "observedPort", "observedAt", "connections"}
    patches = agent_api.front_patches()
    assert patches
    for front in patches:
        assert set(front) <= allowed
        assert not any(isinstance(v, list) for v in front.values())
    front = await front_status(api)
    assert front["observedPort"] == a.port
    assert front["desiredBackend"] == "a"
    assert (await api.get(KCPSHARDS, api.default_namespace, SHARD))["status"]["activeSlot"] == "a"


async def test_agent_drains_the_old_slot_but_never_the_desired_one(
    api: ApiClient,
    in_process: FrontAgent,
    echoes: tuple[Echo, Echo],
    front_port: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    a, b = echoes
    caplog.set_level(logging.INFO, logger="kcpshard.agent.front")
    await operator_writes(api, {"desiredBackend": "a", "desiredPort": a.port})
    await eventually(lambda: front_reports(api, observedBackend="a"))
    on_a = await Client.connect(front_port)
    assert await on_a.ask("1") == "a:1"
    await operator_writes(api, {"desiredBackend": "b", "desiredPort": b.port})
    await eventually(lambda: front_reports(api, observedBackend="b"))
    on_b = await Client.connect(front_port)
    assert await on_b.ask("2") == "b:2"
    await eventually(lambda: front_reports(api, connections={"a": 1, "b": 1}))

    await operator_writes(api, {"drain": "b"})  # the desired backend: refused
    await eventually(lambda: holds("not draining slot b" in caplog.text))
    assert await on_b.ask("3") == "b:3"

    await operator_writes(api, {"drain": "a"})
    assert await on_a.closed_by_peer()
    await eventually(lambda: front_reports(api, connections={"a": 0, "b": 1}))
    assert await on_b.ask("4") == "b:4"
    on_b.close()


async def test_agent_ignores_a_desired_backend_that_is_not_a_slot(
    api: ApiClient, in_process: FrontAgent, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kcpshard.agent.front")
    await operator_writes(api, {"desiredBackend": "c", "desiredPort": 1234})
    await eventually(lambda: holds("ignoring desiredBackend='c'" in caplog.text))
    assert "observedBackend" not in await front_status(api)


async def test_agent_reports_observed_at_as_soon_as_haproxy_listens(
    api: ApiClient, in_process: FrontAgent, front_port: int
) -> None:
    front = await front_status(api)
    assert front["observedAt"]  # no backend yet: the operator still sees a listening front
    assert "observedBackend" not in front and "error" not in front
    client = await Client.connect(front_port)  # accepted: HAProxy listens
    client.close()


async def test_agent_reports_a_killed_haproxy_restarts_it_and_clears_the_error(
    api: ApiClient,
    agent_api: RecordingApi,
    namespace: str,
    tmp_path: Path,
    echoes: tuple[Echo, Echo],
    front_port: int,
) -> None:
    """One HAProxy process (pair=1): its death leaves nothing listening, and the front says so."""
    a, _ = echoes
    await api.create(KCPSHARDS, namespace, shard_body(namespace, front_port))
    async with running_agent(agent_api, tmp_path / "front", pair=1) as agent:
        await operator_writes(api, {"desiredBackend": "a", "desiredPort": a.port})
        await eventually(lambda: front_reports(api, observedBackend="a"))
        pid = agent.members[0].pid
        seen = len(agent_api.patches)
        os.kill(pid or 0, signal.SIGKILL)

        async def serves_a() -> bool:
            return await answer(front_port, "again") == "a:again"

        await eventually(serves_a)  # the desired backend is applied to the new HAProxy without any new write

        async def recovered() -> bool:
            front = await front_status(api)
            return "error" not in front and front.get("restarts") == 1

        await eventually(recovered)
        assert agent.members[0].pid != pid
    errors = [front["error"] for front in agent_api.front_patches()[seen:] if "error" in front]
    assert errors == ["haproxy exited with signal SIGKILL; restarting it", None]


async def test_one_of_the_pair_killed_is_no_error_and_counts_a_restart(
    api: ApiClient,
    agent_api: RecordingApi,
    in_process: FrontAgent,
    echoes: tuple[Echo, Echo],
    front_port: int,
) -> None:
    a, _ = echoes
    await operator_writes(api, {"desiredBackend": "a", "desiredPort": a.port})
    await eventually(lambda: front_reports(api, observedBackend="a"))
    pids = [m.pid for m in in_process.members]
    assert None not in pids and len(set(pids)) == 2
    os.kill(pids[1] or 0, signal.SIGKILL)
    await eventually(lambda: front_reports(api, restarts=1))
    assert (await front_status(api))["lastRestart"].startswith("haproxy-1 exited with signal SIGKILL")
    assert in_process.members[1].pid not in pids
    assert await answer(front_port, "still") == "a:still"
    assert not any("error" in front for front in agent_api.front_patches())


async def test_agent_retries_a_taken_port_with_backoff_and_logs_it_once(
    api: ApiClient,
    agent_api: RecordingApi,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kcpshard.agent.front")
    attempts: list[int] = []
    real_check = front_pair.check_bindable

    def counting_check(address: str, port: int) -> None:
        attempts.append(port)
        real_check(address, port)

    monkeypatch.setattr(front_pair, "check_bindable", counting_check)
    taken = socket.socket()
    try:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        await api.create(KCPSHARDS, namespace, shard_body(namespace, port))
        async with running_agent(agent_api, tmp_path / "front", start_backoff=(0.02, 0.05)):

            async def error_reported_and_retried() -> bool:
                return len(attempts) >= 4 and "error" in await front_status(api)

            await eventually(error_reported_and_retried)
            assert (await front_status(api))["error"].startswith(
                f"cannot listen on 127.0.0.1:{port}: the address is already"
            )
            assert caplog.text.count("cannot serve") == 1  # retried several times, logged once
            error_patches = [front for front in agent_api.front_patches() if "error" in front]
            assert len(error_patches) == 1  # an unchanged error is not written again

            taken.close()

            async def serves() -> bool:
                front = await front_status(api)
                return "error" not in front and "observedAt" in front

            await eventually(serves)
            assert "serves again" in caplog.text
    finally:
        taken.close()


async def front_pod(api: ApiClient, name: str) -> None:
    """A pod of the shard's front, as the operator's Deployment makes it, Running as a kubelet reports
    (no kubelet runs here: the test writes its status)."""
    namespace = api.default_namespace

    async def default_account() -> bool:  # the ServiceAccount admission refuses a pod until it exists
        return bool(await api.get(SERVICEACCOUNTS, namespace, "default"))

    await wait_for("the default ServiceAccount", default_account, timeout=30)
    labels = {LABEL_SHARD: SHARD, LABEL_COMPONENT: "front"}
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"containers": [{"name": "agent", "image": "kcpshard:test"}]},
    }
    await api.create(PODS, namespace, body)
    await api.patch(PODS, namespace, name, {"status": {"phase": "Running"}}, subresource="status")


async def test_an_agent_started_again_in_its_pod_counts_its_own_restart(
    api: ApiClient, agent_api: RecordingApi, namespace: str, tmp_path: Path, front_port: int
) -> None:
    await api.create(KCPSHARDS, namespace, shard_body(namespace, front_port))
    first, second = "alpha-front-x1", "alpha-front-x2"
    await front_pod(api, first)
    async with running_agent(agent_api, tmp_path / "front" / first, pod=first):
        await eventually(lambda: front_reports(api, connections={"a": 0, "b": 0}))
    assert "restarts" not in await front_status(api)  # a first start is no restart
    async with running_agent(agent_api, tmp_path / "front" / first, pod=first):
        await eventually(lambda: front_reports(api, restarts=1))
    last = (await front_status(api))["lastRestart"]
    assert last.startswith(f"front agent in pod {first} exited and was started again"), last
    # Another pod (a new state dir) starts afresh, and forgets the state of a pod that is gone.
    await api.delete(PODS, namespace, first)  # never scheduled: gone at once

    async def first_gone() -> bool:
        listed = await api.list(PODS, namespace, field_selector=f"metadata.name={first}")
        return not listed.get("items")

    await wait_for(f"pod {first} gone", first_gone, timeout=30)
    await front_pod(api, second)
    async with running_agent(agent_api, tmp_path / "front" / second, pod=second):
        await eventually(lambda: serving_gate(api, second, "True"))  # both of its HAProxy listen
    await eventually(lambda: serving_gate(api, second, "False"))  # and no more once it stopped
    assert (await front_status(api))["restarts"] == 1
    assert sorted(p.name for p in (tmp_path / "front").iterdir()) == [second]


async def test_a_replacement_front_starts_its_haproxy_with_the_desired_server(
    api: ApiClient,
    agent_api: RecordingApi,
    namespace: str,
    tmp_path: Path,
    echoes: tuple[Echo, Echo],
    front_port: int,
) -> None:
    """A new front pod shares the port with the one it replaces from its HAProxy's first instant: a
    connection the kernel hands it then must reach the slot, so it starts with the server, never without."""
    a, _ = echoes
    await api.create(KCPSHARDS, namespace, shard_body(namespace, front_port))
    await operator_writes(api, {"desiredBackend": "a", "desiredPort": a.port})
    async with running_agent(agent_api, tmp_path / "front") as agent:
        await eventually(lambda: front_reports(api, observedBackend="a", observedPort=a.port))
        for member in agent.members:
            assert f"server a 127.0.0.1:{a.port}\n" in member.config_path.read_text()
        assert await answer(front_port, "first") == "a:first"
