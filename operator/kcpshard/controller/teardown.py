"""Deleting a KcpShard: stop its slots and front before the finalizer lets the object go.

Garbage collection alone would remove the objects but not wait for the processes: `kubectl delete`
would return while kcp still runs its shutdown delay on the node. Here the finalizer's handler deletes
the workloads, then keeps the shard until no pod of it is left.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import kopf

from kcpshard.k8s import names
from kcpshard.k8s.api import (
    BUDGETS,
    DEPLOYMENTS,
    JOBS,
    KCPSLOTS,
    LEASES,
    NODES,
    PODS,
    ROLEBINDINGS,
    ROLES,
    SECRETS,
    SERVICEACCOUNTS,
    ApiClient,
    ApiError,
    NotFound,
)
from kcpshard.k8s.names import lease_name


async def tear_down(
    api: ApiClient,
    namespace: str,
    name: str,
    spec: dict[str, Any],
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger],
) -> str:
    """Delete what the shard runs; raise kopf.TemporaryError while its pods are still stopping."""
    selector = f"{names.LABEL_SHARD}={name}"
    for ref in (KCPSLOTS, JOBS):
        listed = await api.list(ref, namespace, label_selector=selector)
        for obj in listed.get("items", []):
            if not obj["metadata"].get("deletionTimestamp"):
                with contextlib.suppress(NotFound):
                    await api.delete(ref, namespace, obj["metadata"]["name"], propagation_policy="Background")
    with contextlib.suppress(NotFound):
        await api.delete(DEPLOYMENTS, namespace, names.front_name(name), propagation_policy="Background")
    pods = await api.list(PODS, namespace, label_selector=selector)
    alive = [p for p in pods.get("items", []) if _alive(p)]
    missing = await _missing_nodes(api, {p["spec"].get("nodeName") or "" for p in alive} - {""})
    running = [p["metadata"]["name"] for p in alive if _may_run(p, missing)]
    if running:
        raise kopf.TemporaryError(
            f"waiting for {len(running)} pod(s) of the shard to stop: {', '.join(sorted(running))}", delay=1
        )
    for secret in (names.admin_kubeconfig_secret_name(name),):
        with contextlib.suppress(NotFound):
            await api.delete(SECRETS, namespace, secret)
    with contextlib.suppress(NotFound):
        await api.delete(LEASES, namespace, lease_name(name))
    # The budget and the agents' identity now rather than by garbage collection later: a shard made again
    # at once under the same name must not find them deleted under its new pods.
    for ref, owned in (
        (BUDGETS, names.budget_name(name)),
        (ROLEBINDINGS, names.agent_name(name)),
        (ROLES, names.agent_name(name)),
        (SERVICEACCOUNTS, names.agent_name(name)),
    ):
        with contextlib.suppress(NotFound):
            await api.delete(ref, namespace, owned)
    shared = names.shared_secret_name(name)
    if spec.get("deletionPolicy") == "Delete":
        with contextlib.suppress(NotFound):
            await api.delete(SECRETS, namespace, shared)
        return f"stopped every slot and the front; deleted Secret {shared} (deletionPolicy: Delete)"
    return f"stopped every slot and the front; kept Secret {shared} (root material; deletionPolicy: Retain)"


def _alive(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _may_run(pod: dict[str, Any], missing_nodes: set[str]) -> bool:
    """Whether a pod not yet ended may run a process: not when it never got a node, or its node does not
    exist (a spec.node with no such node): no kubelet will start it, and waiting for it to end would wait
    for kube-controller-manager's pod garbage collection (40 s and more)."""
    node = pod["spec"].get("nodeName")
    return bool(node) and node not in missing_nodes


async def _missing_nodes(api: ApiClient, nodes: set[str]) -> set[str]:
    """The nodes of `nodes` that do not exist. One that cannot be read (no right to get nodes) counts as
    existing: the finalizer then waits, as it would for any pod."""
    missing = set()
    for node in nodes:
        try:
            await api.get(NODES, None, node)
        except NotFound:
            missing.add(node)
        except ApiError as exc:
            if exc.status != 403:
                raise
    return missing
