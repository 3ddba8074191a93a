"""One cluster with a real node for this folder's tests: containerd, the kubelet and the scheduler beside
the real control plane, the product image and the test image (the product plus the stand-in kcp) imported,
and the operator running as deploy/base's Deployment in a container."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
import pytest_asyncio

from kcpshard_testkit.image import ImageRef, build_image
from kcpshard_testkit.stack import NodeImages, Stack, running_stack


@dataclass(frozen=True)
class Images:
    product: ImageRef
    test: ImageRef  # the product plus the stand-in kcp (`kcpshard-fake-kcp`)


@pytest.fixture(scope="session")
def images() -> Images:
    """The images of `hack/image.sh` (`make test` builds them first; cached by a key of what goes in)."""
    return Images(build_image("product"), build_image("test"))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory, images: Images) -> AsyncIterator[Stack]:
    node = NodeImages(tars=(images.product.tar, images.test.tar), operator=images.product.name)
    async with running_stack(tmp_path_factory.mktemp("node-cluster"), node=node) as stack:
        yield stack
