"""Fixtures shared by the process tests: real etcd, the stand-in kcp, and the real API server.

`control_plane` is one real control plane (etcd, kube-apiserver, kube-controller-manager, with the CRDs
and deploy/'s RBAC: `kcpshard-dev up --no-node`) per test session, that is per pytest-xdist worker. Each
test that takes `namespace` gets a namespace of its own there (deleted after it), and `kubeconfig` is the
admin's with that namespace as its context's, so agents started with it work in the test's namespace.
A test that must stop the API server starts a control plane of its own (`own_control_plane`)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from kcpshard.k8s.api import ApiClient
from kcpshard_testkit.devenv import DevEnvInfo, control_plane_process
from kcpshard_testkit.etcd import EtcdServer
from kcpshard_testkit.fakekcp.process import KcpProcess
from kcpshard_testkit.kubectl import kubectl_binary
from kcpshard_testkit.namespaces import namespace_for
from kcpshard_testkit.tcp import Echo
from kcpshard_testkit.tls import namespaced_kubeconfig


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


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevEnvInfo]:
    with control_plane_process(tmp_path_factory.mktemp("control-plane")) as info:
        yield info


@pytest.fixture
def own_control_plane(tmp_path: Path) -> Iterator[DevEnvInfo]:
    """A control plane for this test alone (it may stop it: `os.kill(info.pid, SIGTERM)`)."""
    with control_plane_process(tmp_path / "own-control-plane") as info:
        yield info


def _kubectl(info: DevEnvInfo, *args: str) -> None:
    env = {**os.environ, "KUBECONFIG": info.kubeconfig}
    subprocess.run([kubectl_binary(), *args], env=env, check=True, capture_output=True, timeout=60)


@pytest.fixture
def namespace(control_plane: DevEnvInfo, request: pytest.FixtureRequest) -> Iterator[str]:
    name = namespace_for(request.node.name, request.node.nodeid)
    _kubectl(control_plane, "create", "namespace", name)
    yield name
    _kubectl(control_plane, "delete", "namespace", name, "--wait=false")


@pytest.fixture
def kubeconfig(control_plane: DevEnvInfo, namespace: str, tmp_path: Path) -> Path:
    """The admin's kubeconfig, its context in the test's namespace (mode 0600)."""
    return namespaced_kubeconfig(Path(control_plane.kubeconfig), namespace, tmp_path / "kubeconfig")


@pytest.fixture
async def api(kubeconfig: Path) -> AsyncIterator[ApiClient]:
    """A client of the real API server, as the admin."""
    client = ApiClient.from_kubeconfig(kubeconfig)
    yield client
    await client.aclose()


@pytest.fixture
async def echoes() -> AsyncIterator[tuple[Echo, Echo]]:
    """Two echo servers standing in for slots a and b: each answers `<slot>:<what was sent>`."""
    a, b = await Echo("a").start(), await Echo("b").start()
    yield a, b
    await a.stop()
    await b.stop()
