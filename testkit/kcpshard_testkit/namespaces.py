"""A namespace per test on a shared test cluster.

The end-to-end tests share one cluster with a real node per test session (per pytest-xdist worker;
starting one takes about 40 s), and most of them name their shard `root`. Each test gets a namespace of
its own, so its shards, Secrets and Events, its shards' folders on the node
(`/var/lib/kcpshard/<namespace>/<shard>`) and their keys in the store's etcd
(`/shards/<namespace>/<shard>`) are its own. When it ends, its shards are deleted through the operator's
finalizer (cleared by force when the operator cannot finish, e.g. the test broke it), then the
namespace (waiting until its pods are gone, not for the namespace itself), and the shards' folders and
keys are removed.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import shutil

import httpx

from kcpshard.k8s.api import KCPSHARDS, KCPSLOTS, NAMESPACES, NODES, PODS, ResourceRef
from kcpshard_testkit.stack import Stack
from kcpshard_testkit.waiting import wait_for

log = logging.getLogger(__name__)


def namespace_for(test_name: str, test_id: str) -> str:
    """A namespace name for a test: `t-<its words>-<hash of its id>`, a DNS label (at most 63)."""
    digest = hashlib.sha256(test_id.encode()).hexdigest()[:6]
    words = re.sub(r"[^a-z0-9]+", "-", test_name.removeprefix("test_").lower())[:48].strip("-")
    return f"t-{words}-{digest}"


async def open_namespace(cluster: Stack, namespace: str) -> Stack:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    await cluster.api.create(NAMESPACES, None, body)
    return cluster.in_namespace(namespace)


async def _names(stack: Stack, ref: ResourceRef) -> list[str]:
    listed = await stack.api.list(ref, stack.namespace)
    return [item["metadata"]["name"] for item in listed.get("items", ())]


async def _left_after(stack: Stack, what: str, ref: ResourceRef, timeout: float) -> list[str]:
    """Wait until no `ref` is left in the namespace; returns what still was at the timeout."""

    async def none_left() -> bool:
        return not await _names(stack, ref)

    try:
        await wait_for(f"every {what} in {stack.namespace} gone", none_left, timeout=timeout)
    except TimeoutError:
        return await _names(stack, ref)
    return []


def _unfinalize(stack: Stack, kind: str, names: list[str]) -> None:
    patch = '{"metadata":{"finalizers":null}}'
    for name in names:
        stack.kubectl("-n", stack.namespace, "patch", kind, name, "--type=merge", "-p", patch, check=False)


def _delete_store_prefix(endpoint: str, prefix: str) -> None:
    """Every key under `prefix` in the store's etcd (its v3 JSON gateway: no client binary needed)."""
    key = prefix.encode()
    end = key[:-1] + bytes([key[-1] + 1])
    body = {"key": base64.b64encode(key).decode(), "range_end": base64.b64encode(end).decode()}
    httpx.post(f"{endpoint}/v3/kv/deleterange", json=body, timeout=10).raise_for_status()


async def _release_pods_of_missing_nodes(stack: Stack) -> None:
    """Force-delete the pods bound to a node that does not exist (a test's `node: no-such-node`): no
    kubelet will confirm their end, and kube-controller-manager's pod GC waits 40 s before it does."""
    nodes = {item["metadata"]["name"] for item in (await stack.api.list(NODES, None))["items"]}
    orphans = [
        pod["metadata"]["name"]
        for pod in (await stack.api.list(PODS, stack.namespace))["items"]
        if pod["spec"].get("nodeName") and pod["spec"]["nodeName"] not in nodes
    ]
    if orphans:
        stack.kubectl(
            "-n", stack.namespace, "delete", "pods", *orphans, "--force", "--grace-period=0", check=False
        )


async def close_namespace(stack: Stack, timeout: float = 120) -> None:
    namespace = stack.namespace
    stack.kubectl("-n", namespace, "delete", "kcpshards", "--all", "--wait=false", check=False)
    stuck = await _left_after(stack, "KcpShard", KCPSHARDS, timeout)
    if stuck:
        log.warning("KcpShards %s in %s did not finish deleting: finalizers cleared", stuck, namespace)
        _unfinalize(stack, "kcpshards", stuck)
        _unfinalize(stack, "kcpslots", await _names(stack, KCPSLOTS))
    stack.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    await _release_pods_of_missing_nodes(stack)

    # Its pods are what the next test could meet (ports and processes on the node); the rest of the
    # namespace goes with kube-controller-manager's namespace controller, some seconds later, and a
    # terminating namespace admits nothing new. Waiting for the whole namespace cost about 5 s a test.
    if await _left_after(stack, "pod", PODS, timeout):
        log.warning("namespace %s still has pods: they are deleted by force", namespace)
        stack.kubectl("-n", namespace, "delete", "pods", "--all", "--force", "--grace-period=0", check=False)
    shutil.rmtree(stack.workload_root, ignore_errors=True)
    _delete_store_prefix(stack.info.etcd_endpoint, f"/shards/{namespace}/")
