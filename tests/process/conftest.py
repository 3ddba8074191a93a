"""Fixtures shared by the process tests: real etcd, the stand-in kcp, the emulated API server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from kcpshard_testkit.apiserver import EmulatedApiServer
from kcpshard_testkit.etcd import EtcdServer
from kcpshard_testkit.fakekcp.process import KcpProcess

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
