"""One cluster with a real node for this folder's tests: containerd, the kubelet and the scheduler beside
the real control plane, the product image and the test image (the product plus the stand-in kcp) imported,
and the operator running as deploy/base's Deployment in a container of the product image."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from tests.conftest import Images

from kcpshard_testkit.stack import NodeImages, Stack, running_stack


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory, images: Images) -> AsyncIterator[Stack]:
    node = NodeImages(tars=(images.product.tar, images.test.tar), operator=images.product.name)
    async with running_stack(tmp_path_factory.mktemp("node-cluster"), node=node) as stack:
        yield stack
