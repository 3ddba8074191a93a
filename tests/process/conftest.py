"""Fixtures shared by the process tests: real etcd, the stand-in kcp, the emulated API server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from kcpshard.k8s.api import ApiClient
from kcpshard_testkit.apiserver import EmulatedApiServer
from kcpshard_testkit.etcd import EtcdServer
from kcpshard_testkit.fakekcp.process import KcpProcess
from kcpshard_testkit.tcp import Echo

CRDS = Path(__file__).resolve().parents[2] / "crds"


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    server = EtcdServer(tmp_path / "etcd")
    server.start_sync()
    try:
        yield server
    finally:
        server.stop_sync()


@pytest.fixture
def kcps() -> Iterator[list[KcpProcess]]:
    started: list[KcpProcess] = []
    yield started
    for k in started:
        k.stop()


@pytest.fixture
async def apiserver(tmp_path: Path) -> AsyncIterator[EmulatedApiServer]:
    """The emulated API server with this project's CRDs."""
    server = EmulatedApiServer(tmp_path / "api", crd_paths=[CRDS / "kcpshards.yaml", CRDS / "kcpslots.yaml"])
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def api(apiserver: EmulatedApiServer) -> AsyncIterator[ApiClient]:
    """A client of the emulated API server, as the admin."""
    client = ApiClient.from_kubeconfig(apiserver.kubeconfig_path)
    yield client
    await client.aclose()


@pytest.fixture
async def echoes() -> AsyncIterator[tuple[Echo, Echo]]:
    """Two echo servers standing in for slots a and b: each answers `<slot>:<what was sent>`."""
    a, b = await Echo("a").start(), await Echo("b").start()
    yield a, b
    await a.stop()
    await b.stop()
