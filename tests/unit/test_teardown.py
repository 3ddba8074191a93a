"""Deleting a KcpShard: its finalizer waits for the shard's pods that may still run a process, and not for
pods no kubelet will ever start (never scheduled, or bound to a node that does not exist)."""

from __future__ import annotations

from typing import Any

import kopf
import pytest

from fakes import LOG, RecordingApi
from kcpshard.controller.teardown import tear_down
from kcpshard.k8s import names
from kcpshard.k8s.api import NODES, PODS, ApiError


def pod(name: str, phase: str = "Running", node: str | None = "node-1") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {names.LABEL_SHARD: "root"}},
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase},
    }


async def test_a_pod_running_on_a_node_holds_the_finalizer() -> None:
    api = RecordingApi()
    api.put(NODES, {"metadata": {"name": "node-1"}})
    api.put(PODS, pod("root-a-1"))
    api.put(PODS, pod("root-b-1", phase="Succeeded"))  # ended: nothing to wait for
    with pytest.raises(kopf.TemporaryError, match=r"waiting for 1 pod\(s\) of the shard to stop: root-a-1$"):
        await tear_down(api, "default", "root", {}, LOG)


async def test_pods_no_kubelet_will_start_do_not_hold_it() -> None:
    api = RecordingApi()
    api.put(PODS, pod("root-front-x", phase="Pending", node="no-such-node"))
    api.put(PODS, pod("root-front-y", phase="Pending", node=None))  # never scheduled
    done = await tear_down(api, "default", "root", {}, LOG)
    assert done.startswith("stopped every slot and the front"), done
    assert ("get", "nodes", "no-such-node") in api.requests


async def test_a_node_the_operator_may_not_read_counts_as_existing() -> None:
    api = RecordingApi()
    api.put(PODS, pod("root-a-1"))
    api.fail("get", "nodes", error=ApiError(403, "Forbidden", "nodes is forbidden"))
    with pytest.raises(kopf.TemporaryError, match="root-a-1"):
        await tear_down(api, "default", "root", {}, LOG)
