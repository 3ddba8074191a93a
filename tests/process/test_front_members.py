"""The front agent driving HAProxy containers (`--members-dir`), as it does in a front pod: the test plays
the kubelet, running each member as `kcpshard agent haproxy-member` in a process of its own and starting
it again when it dies, and the preStop hook as `kcpshard agent haproxy-member-stop`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from tests.process.test_front_agent import (
    HAPROXY,
    Agent,
    answer,
    front_status,
    operator_writes,
    shard_body,
    spawn_agent,
)

from kcpshard.agent.haproxy import HAProxy
from kcpshard.agent.haproxy_member import member_dir, release_path
from kcpshard.k8s.api import KCPSHARDS, ApiClient
from kcpshard_testkit import scenario
from kcpshard_testkit.tcp import Echo, eventually, free_port

pytestmark = [
    pytest.mark.skipif(not HAPROXY, reason="haproxy is not installed (Debian package haproxy)"),
    pytest.mark.timeout(120),
]


class Kubelet:
    """The pod's two HAProxy containers as processes, each in a session of its own (not the agent's)."""

    def __init__(self, members_dir: Path, logs: Path) -> None:
        self.members_dir, self.logs = members_dir, logs
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def start(self, index: int) -> int:
        argv = [sys.executable, "-m", "kcpshard.cli", "agent", "haproxy-member"]
        argv += ["--dir", str(self.members_dir), "--member", str(index), "--haproxy", HAPROXY]
        with (self.logs / f"haproxy-{index}.log").open("ab") as out:
            self.procs[index] = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self.procs[index].pid

    def pre_stop(self, index: int, wait_seconds: float) -> subprocess.CompletedProcess[bytes]:
        argv = [sys.executable, "-m", "kcpshard.cli", "agent", "haproxy-member-stop"]
        argv += ["--dir", str(self.members_dir), "--member", str(index), "--wait-seconds", str(wait_seconds)]
        return subprocess.run(argv, capture_output=True, timeout=30)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[Kubelet]:
    running = Kubelet(tmp_path / "members", tmp_path)
    running.members_dir.mkdir()
    yield running
    running.stop_all()


@pytest.fixture
async def pod(
    kubeconfig: Path, namespace: str, api: ApiClient, tmp_path: Path, kubelet: Kubelet
) -> AsyncIterator[tuple[Agent, int]]:
    port = free_port()
    await api.create(KCPSHARDS, namespace, shard_body(namespace, port))
    kubelet.start(0)
    kubelet.start(1)  # both wait for the config the agent writes
    agent = _spawn(kubeconfig, namespace, tmp_path, kubelet)
    try:
        yield agent, port
    finally:
        agent.kill_group()


def _spawn(kubeconfig: Path, namespace: str, tmp_path: Path, kubelet: Kubelet) -> Agent:
    extra = ("--members-dir", str(kubelet.members_dir))
    return spawn_agent(kubeconfig, namespace, tmp_path / "front", tmp_path / "agent.log", extra)


def _member(kubelet: Kubelet, index: int) -> HAProxy:
    return HAProxy(member_dir(kubelet.members_dir, index), "127.0.0.1", 1)  # only its runtime socket


async def test_the_front_serves_on_while_its_agent_is_dead_and_the_next_agent_takes_it_over(
    kubeconfig: Path,
    namespace: str,
    api: ApiClient,
    tmp_path: Path,
    kubelet: Kubelet,
    pod: tuple[Agent, int],
    echoes: tuple[Echo, Echo],
) -> None:
    agent, port = pod
    a, b = echoes
    await operator_writes(api, {"desiredBackend": "b", "desiredPort": b.port})

    async def observed(slot: str) -> bool:
        return (await front_status(api)).get("observedBackend") == slot

    await eventually(lambda: observed("b"))
    pids = {index: proc.pid for index, proc in kubelet.procs.items()}
    for index, pid in pids.items():  # each member became HAProxy in its own process
        assert Path(f"/proc/{pid}/comm").read_text().strip() == "haproxy"
        assert await _member(kubelet, index).current_backend() == ("b", b.port)

    agent.kill_group()  # SIGKILL: no soft stop, no release
    assert not release_path(kubelet.members_dir).exists()
    for n in range(20):  # every new connection is answered with no agent at all
        assert await answer(port, str(n)) == f"b:{n}"

    release_path(kubelet.members_dir).touch()  # as an earlier agent of this pod that crashed leaves it
    again = _spawn(kubeconfig, namespace, tmp_path, kubelet)
    try:
        await operator_writes(api, {"desiredBackend": "a", "desiredPort": a.port})
        await eventually(lambda: observed("a"))
        assert not release_path(kubelet.members_dir).exists()  # this pod is not stopping
        assert {i: p.pid for i, p in kubelet.procs.items()} == pids  # taken over, not started again
        front = await front_status(api)
        # The agent's own restart is counted (its start marker); its HAProxys were not started again.
        assert front["restarts"] == 1 and "error" not in front, front
        assert front["lastRestart"].startswith("front agent exited and was started again"), front
        assert await answer(port, "x") == "a:x"

        # A member killed: the other serves; the agent counts it; the kubelet starts it again, and it
        # serves the desired backend from its config at once.
        os.kill(pids[0], signal.SIGKILL)
        kubelet.procs[0].wait()
        for n in range(10):
            assert await answer(port, str(n)) == f"a:{n}"

        async def counted() -> bool:
            return (await front_status(api)).get("restarts") == 2

        await eventually(counted)
        assert (await front_status(api))["lastRestart"].startswith("haproxy-0 stopped answering")
        kubelet.start(0)

        async def serves_again() -> bool:
            return await _member(kubelet, 0).current_backend() == ("a", a.port)

        await eventually(serves_again)
        # Killed and started again at once, maybe between two of the agent's passes: counted all the same.
        os.kill(pids[1], signal.SIGKILL)
        kubelet.procs[1].wait()
        kubelet.start(1)

        async def counted_again() -> bool:
            front = await front_status(api)
            return front.get("restarts") == 3 and front["lastRestart"].startswith("haproxy-1 ")

        await eventually(counted_again)

        # The pod deleted: the agent's SIGTERM (no other pod: no hold outside a pod) releases the front,
        # and each member's preStop then stops it softly. They serve until then.
        again.proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(again.proc.wait, 15) == 0
        assert release_path(kubelet.members_dir).exists()
        assert await answer(port, "y") == "a:y"
        stopped = await asyncio.to_thread(kubelet.pre_stop, 0, 30)
        assert stopped.returncode == 0, stopped.stderr
        assert kubelet.procs[0].wait(5) == 0  # HAProxy's soft stop: a clean exit
        assert await answer(port, "z") == "a:z"  # the other member still serves
        assert "Traceback" not in again.log()
    finally:
        again.kill_group()


async def test_a_member_waits_for_its_config_and_its_pre_stop_waits_for_the_release(
    kubelet: Kubelet,
) -> None:
    pid = kubelet.start(0)

    async def waiting() -> bool:
        return "waiting for the front agent" in (kubelet.logs / "haproxy-0.log").read_text()

    await eventually(waiting)
    assert kubelet.procs[0].poll() is None and not scenario.exited(pid)
    port = free_port()
    member = _member(kubelet, 0)
    HAProxy(member.state_dir, "127.0.0.1", port).write_config(None)

    async def answers() -> bool:
        return await member.current_backend() is None  # runs, with no server yet

    await eventually(answers)
    # No release: the hook gives up after its wait and stops HAProxy all the same.
    stopped = await asyncio.to_thread(kubelet.pre_stop, 0, 0.5)
    assert b"did not release the front" in stopped.stderr
    assert kubelet.procs[0].wait(5) == 0
