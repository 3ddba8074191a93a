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
    PODS,
    ROLEBINDINGS,
    ROLES,
    SECRETS,
    SERVICEACCOUNTS,
    ApiClient,
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
    running = [p["metadata"]["name"] for p in pods.get("items", []) if _alive(p)]
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
