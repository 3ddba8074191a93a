"""Fixtures shared by the process tests of the stand-in kcp."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kcpshard.testing.etcd import EtcdServer
from kcpshard.testing.fakekcp.process import KcpProcess


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
