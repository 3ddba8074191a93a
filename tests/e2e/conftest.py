"""The end-to-end tests on a real node: one cluster per test session (per pytest-xdist worker: a real
control plane, containerd and the kubelet), with the operator as deploy/base's Deployment running the
test image, so the slots and the front it makes run that image too and the stand-in kcp is on their
PATH. A test takes `stack`: the session's cluster in a namespace of the test's own (`namespaces.py`),
and `bin_dir`: a folder of the node's binary folder for its kcp wrappers (`make_kcp`), which the slots
see. A module whose tests start operators of their own says `OPERATOR_IN_CLUSTER = False`: the
in-cluster operator is scaled to 0 while it runs. The tests run in the session's event loop, as its
cluster does: `pytest.mark.asyncio(loop_scope="session")` in each module's `pytestmark`."""

from __future__ import annotations

import contextlib
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from tests.conftest import Images

from kcpshard_testkit.incluster import InClusterOperator
from kcpshard_testkit.kcpbin import NODE_BIN
from kcpshard_testkit.namespaces import close_namespace, namespace_for, open_namespace
from kcpshard_testkit.stack import NodeImages, Stack, running_stack


def _in_cluster(request: pytest.FixtureRequest) -> bool:
    """A module whose tests start operators of their own (`stack.start_operator`: several, behind a
    fault proxy, killed) says `OPERATOR_IN_CLUSTER = False`; the cluster runs none while it runs."""
    return bool(getattr(request.module, "OPERATOR_IN_CLUSTER", True))


@contextlib.asynccontextmanager
async def new_cluster(tmp_path_factory: pytest.TempPathFactory, images: Images) -> AsyncIterator[Stack]:
    """A cluster with a real node and the in-cluster operator."""
    node = NodeImages(tars=(images.product.tar, images.test.tar), operator=images.test.name)
    directory = tmp_path_factory.mktemp("e2e-cluster")
    async with running_stack(directory, node=node, operator=True) as stack:
        yield stack


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def session_cluster(tmp_path_factory: pytest.TempPathFactory, images: Images) -> AsyncIterator[Stack]:
    async with new_cluster(tmp_path_factory, images) as stack:
        yield stack


@pytest.fixture(scope="session")
def in_cluster_operator(session_cluster: Stack) -> InClusterOperator:
    return InClusterOperator(Path(session_cluster.info.kubeconfig))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def cluster(
    session_cluster: Stack, in_cluster_operator: InClusterOperator, request: pytest.FixtureRequest
) -> AsyncIterator[Stack]:
    """The session's cluster for one module; without its in-cluster operator if the module says so. (A
    module may define its own `cluster`, e.g. `new_cluster`, for a cluster of its own.)"""
    if _in_cluster(request):
        await in_cluster_operator.running()
    else:
        await in_cluster_operator.stopped()
    yield session_cluster


@pytest_asyncio.fixture(loop_scope="session")
async def stack(cluster: Stack, request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    stack = await open_namespace(cluster, namespace_for(request.node.name, request.node.nodeid))
    yield stack
    if not _in_cluster(request) and (stack.operator is None or stack.operator.popen.poll() is not None):
        stack.start_operator(log=f"operator-cleanup-{stack.namespace}.log")  # its finalizers need one
    try:
        await close_namespace(stack)
    finally:
        if stack.operator is not None:
            stack.operator.stop()


@pytest.fixture
def bin_dir(request: pytest.FixtureRequest) -> Iterator[Path]:
    directory = NODE_BIN / "tests" / f"{request.node.name[:40]}-{uuid.uuid4().hex[:8]}"
    yield directory
    shutil.rmtree(directory, ignore_errors=True)
