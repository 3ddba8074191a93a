"""The identity a shard's agents act with: a ServiceAccount of the shard's own, and a Role that reaches
only that shard's objects (pure builders; the operator applies them before any of the shard's pods).

kcp runs as a child of the host agent, in its container, where the token is mounted: a compromised kcp, or
a bug in one shard's agent, reaches what this Role allows and nothing of another shard. RBAC cannot limit
`create` or `list` by name, so those two stay namespace-wide: creating a Secret (a slot publishes its
kcp-admin kubeconfig) reads nothing, and listing pods (a replacement front looks for the pod it replaces)
reads no Secret. Nor can it name the front's pods (their names are the Deployment's), so patching pod
status (the front agent sets its pod's readiness gate) is namespace-wide too: it can change no spec,
image or volume, only what a pod reports.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kcpshard.api.models import KcpShardSpec, SlotName
from kcpshard.k8s.builders import labels
from kcpshard.k8s.names import (
    agent_name,
    shared_secret_name,
    slot_admin_secret_name,
    slot_object_name,
)
from kcpshard.k8s.owners import owner_reference

RBAC = "rbac.authorization.k8s.io"


def _metadata(shard_obj: dict[str, Any]) -> dict[str, Any]:
    meta = shard_obj["metadata"]
    return {
        "name": agent_name(meta["name"]),
        "namespace": meta["namespace"],
        "labels": labels(meta["name"], "agent-identity"),
        # Goes with the shard, after its finalizer stopped the agents.
        "ownerReferences": [owner_reference(shard_obj, controller=True)],
    }


def service_account(shard_obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(shard_obj)}


def spec_secrets(spec: KcpShardSpec) -> list[str]:
    """The Secrets a spec names for its agents to read: store TLS, the kine DSN, a non-root shard's
    kubeconfigs."""
    refs = [
        spec.store.etcd.tls_secret_ref if spec.store.etcd is not None else None,
        spec.store.kine.endpoint_secret_ref if spec.store.kine is not None else None,
        spec.shard.cache_kubeconfig_secret_ref,
        spec.shard.root_shard_kubeconfig_secret_ref,
    ]
    return [ref.name for ref in refs if ref is not None]


def role(
    shard_obj: dict[str, Any], specs: Iterable[KcpShardSpec], jobs: Iterable[str] = ()
) -> dict[str, Any]:
    """The shard's Role: its KcpShard and KcpSlots, the Secrets its `specs` (the one a roll starts and the
    serving one) name with its own, and `jobs` (a backup Job records its result on itself)."""
    shard = shard_obj["metadata"]["name"]
    slots = [slot_object_name(shard, slot) for slot in SlotName]
    secrets = {shared_secret_name(shard), *(slot_admin_secret_name(s) for s in slots)}
    for spec in specs:
        secrets.update(spec_secrets(spec))
    rules: list[dict[str, Any]] = [
        _rule("kcpshard.dev", "kcpshards", ["get", "list", "watch"], [shard]),
        _rule("kcpshard.dev", "kcpshards/status", ["get", "update", "patch"], [shard]),
        _rule("kcpshard.dev", "kcpslots", ["get", "list", "watch"], slots),
        _rule("kcpshard.dev", "kcpslots/status", ["get", "update", "patch"], slots),
        _rule("", "secrets", ["get", "update"], sorted(secrets)),
        _rule("", "secrets", ["create"], None),
        _rule("", "pods", ["list"], None),
        _rule("", "pods/status", ["patch"], None),
    ]
    names = sorted(set(jobs))
    if names:  # an empty resourceNames would allow every Job
        rules.append(_rule("batch", "jobs", ["get", "patch"], names))
    return {"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": _metadata(shard_obj), "rules": rules}


def role_binding(shard_obj: dict[str, Any]) -> dict[str, Any]:
    meta = _metadata(shard_obj)
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "RoleBinding",
        "metadata": meta,
        "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": meta["name"]},
        "subjects": [{"kind": "ServiceAccount", "name": meta["name"], "namespace": meta["namespace"]}],
    }


def _rule(group: str, resource: str, verbs: list[str], names: list[str] | None) -> dict[str, Any]:
    rule: dict[str, Any] = {"apiGroups": [group], "resources": [resource], "verbs": verbs}
    if names is not None:
        rule["resourceNames"] = names
    return rule
