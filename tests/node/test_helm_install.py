"""The operator installed with the real `helm` from deploy/helm/kcpshard-operator on a cluster with a real
node, then a shard rolled blue/green by it in containers, with a client through the front."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from kcpshard.k8s.api import KCPSHARDS
from kcpshard_testkit import scenario
from kcpshard_testkit.incluster import OPERATOR_NAMESPACE, install_operator_with_helm
from kcpshard_testkit.stack import NodeImages, Stack, running_stack, shard_manifest
from kcpshard_testkit.tcp import free_port

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(600)]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def helm_cluster(tmp_path_factory: pytest.TempPathFactory, images: Any) -> AsyncIterator[Stack]:
    node = NodeImages(tars=(images.product.tar, images.test.tar), operator=images.product.name)
    async with running_stack(tmp_path_factory.mktemp("helm-cluster"), node=node, operator=False) as stack:
        yield stack


async def test_helm_installs_the_operator_which_rolls_a_shard(helm_cluster: Stack, images: Any) -> None:
    out = await install_operator_with_helm(Path(helm_cluster.info.kubeconfig), image=images.product.name)
    assert "STATUS: deployed" in out, out
    releases = json.loads(helm_cluster.kubectl("-n", OPERATOR_NAMESPACE, "get", "secrets", "-l", "owner=helm",
                                               "-o", "json").stdout)["items"]  # fmt: skip
    assert [r["metadata"]["labels"]["name"] for r in releases] == ["kcpshard"]

    port = free_port()
    kcp = {"version": "v0.32.1", "binary": "kcpshard-fake-kcp", "image": images.test.name}
    manifest = shard_manifest("charted", etcd=helm_cluster.info.etcd_endpoint, front_port=port,
                              node=helm_cluster.info.node, kcp=kcp)  # fmt: skip
    await helm_cluster.api.create(KCPSHARDS, "default", manifest)
    await scenario.wait_ready(helm_cluster, "charted", timeout=240)

    async with scenario.traffic(helm_cluster, port, "charted") as load:
        await helm_cluster.api.patch(
            KCPSHARDS, "default", "charted", {"spec": {"kcp": {"version": "v0.32.2"}}}
        )

        shard = await scenario.wait_last_roll(helm_cluster, "charted", timeout=240)
        await scenario.more_requests(load)
    assert shard["status"]["lastRoll"]["result"] == "Succeeded", shard["status"]["lastRoll"]
    assert shard["status"]["lastRoll"]["toSlot"] == "b"
    print(f"helm-installed operator's roll: {load.report.ok} answered, {load.report.failed} failed")
    assert load.report.failed == 0, load.report
