"""A real HAProxy 2.6 in front of two TCP echo servers on 127.0.0.1."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import socket
import stat
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kcpshard.agent.haproxy import HAProxy, check_bindable
from kcpshard.agent.haproxy_config import HAProxyBindError, HAProxyError, render_config
from kcpshard_testkit.tcp import Client, Echo, eventually, free_port

HAPROXY = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin") or ""
pytestmark = [
    pytest.mark.skipif(not HAPROXY, reason="haproxy is not installed (Debian package haproxy)"),
    pytest.mark.timeout(60),
]


@pytest.fixture
async def front(tmp_path: Path) -> AsyncIterator[HAProxy]:
    proxy = HAProxy(tmp_path / "front", "127.0.0.1", free_port())
    await proxy.start()
    yield proxy
    await proxy.stop()


@pytest.mark.parametrize("backend", [None, ("b", 4321)], ids=["no-server", "starting-backend"])
def test_rendered_config_passes_haproxy_check(tmp_path: Path, backend: tuple[str, int] | None) -> None:
    cfg = tmp_path / "haproxy.cfg"
    text = render_config(
        bind_address="127.0.0.1", bind_port=6443, socket_path=tmp_path / "s.sock", backend=backend
    )
    cfg.write_text(text)
    result = subprocess.run([HAPROXY, "-c", "-f", str(cfg)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


async def test_start_binds_the_port_with_a_private_admin_socket(front: HAProxy) -> None:
    assert front.alive
    assert stat.S_IMODE(os.stat(front.socket_path).st_mode) == 0o600
    client = await Client.connect(front.bind_port)  # accepted: HAProxy listens
    client.close()
    assert await front.current_backend() is None  # both servers start disabled
    assert await front.connections() == {"a": 0, "b": 0}


async def test_flip_keeps_established_connections_and_drain_closes_them(
    front: HAProxy, echoes: tuple[Echo, Echo]
) -> None:
    a, b = echoes
    await front.set_backend("a", a.port)
    assert await front.current_backend() == ("a", a.port)
    on_a = await Client.connect(front.bind_port)
    assert await on_a.ask("one") == "a:one"

    await front.set_backend("b", b.port)
    assert await front.current_backend() == ("b", b.port)
    # The established connection still reaches a; new ones go to b.
    assert await on_a.ask("two") == "a:two"
    on_b = await Client.connect(front.bind_port)
    assert await on_b.ask("three") == "b:three"

    async def counted() -> bool:
        return await front.connections() == {"a": 1, "b": 1}

    await eventually(counted)

    assert await front.drain("a") == 1
    assert await on_a.closed_by_peer()
    assert await on_b.ask("four") == "b:four"  # draining a leaves b alone

    async def a_empty() -> bool:
        return (await front.connections())["a"] == 0

    await eventually(a_empty)
    on_b.close()


async def test_set_backend_is_idempotent_and_can_flip_back(front: HAProxy, echoes: tuple[Echo, Echo]) -> None:
    a, b = echoes
    await front.set_backend("a", a.port)
    await front.set_backend("a", a.port)
    await front.set_backend("b", b.port)
    await front.set_backend("a", b.port)  # slot a reused on another port, as a re-created slot would be
    assert await front.current_backend() == ("a", b.port)
    client = await Client.connect(front.bind_port)
    assert await client.ask("x") == "b:x"
    client.close()


async def test_unknown_slot_is_refused(front: HAProxy) -> None:
    with pytest.raises(HAProxyError, match="unknown slot"):
        await front.set_backend("c", 1234)


async def test_taken_port_fails_with_a_clear_message_from_haproxy_output(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        proxy = HAProxy(tmp_path, "127.0.0.1", port)
        with pytest.raises(HAProxyBindError) as failed:
            await proxy.start()  # no pre-check here: the message comes from HAProxy's own alert
        assert not proxy.alive
    assert failed.value.code == errno.EADDRINUSE
    assert failed.value.message("node-1") == (
        f"cannot listen on 127.0.0.1:{port}: the address is already in use on node node-1 "
        "(another process holds the port)"
    )


def test_check_bindable_names_a_taken_port_and_passes_a_free_one() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        with pytest.raises(HAProxyBindError, match=f"127.0.0.1:{port}: the address is already in use"):
            check_bindable("127.0.0.1", port)
    check_bindable("127.0.0.1", port)  # released: free again


async def test_describe_exit_after_sigkill(front: HAProxy) -> None:
    assert front.pid is not None
    os.kill(front.pid, signal.SIGKILL)
    assert await front.wait() == -signal.SIGKILL
    assert not front.alive
    assert front.describe_exit() == "haproxy exited with signal SIGKILL"


async def test_missing_binary_names_the_package(tmp_path: Path) -> None:
    proxy = HAProxy(tmp_path, "127.0.0.1", free_port(), binary="haproxy-not-installed")
    with pytest.raises(HAProxyError, match="install the Debian package haproxy"):
        await proxy.start()


async def test_stop_leaves_no_process_and_restart_works(tmp_path: Path) -> None:
    proxy = HAProxy(tmp_path, "127.0.0.1", free_port())
    await proxy.start()
    pid = proxy.pid
    assert pid is not None
    await proxy.stop()
    assert not proxy.alive
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # gone and reaped, not a zombie
    assert not proxy.socket_path.exists()
    await proxy.start()  # same object, same port: the agent restarts HAProxy this way
    try:
        assert proxy.alive and await proxy.connections() == {"a": 0, "b": 0}
    finally:
        await proxy.stop()
