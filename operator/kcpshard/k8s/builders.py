"""Builders of the Kubernetes objects the operator owns. Pure functions: spec in, dict out."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from kcpshard.api.models import API_VERSION, DeletionPolicy, KcpShardSpec, Shape, SlotName
from kcpshard.api.spec import agent_stop_timeout
from kcpshard.k8s.names import (
    LABEL_COMPONENT,
    LABEL_REVISION,
    LABEL_SHARD,
    LABEL_SLOT,
    LABEL_START,
    admin_kubeconfig_secret_name,
    agent_name,
    shared_secret_name,
    slot_admin_secret_name,
    slot_job_name,
    slot_object_name,
)
from kcpshard.k8s.owners import owner_reference
from kcpshard.kcp.flags import (
    KINE_ENDPOINT_ENV,
    KINE_ENDPOINT_KEY,
    KINE_URL,
    SlotPaths,
    front_url,
    kcp_start_args,
)

MANAGED_BY = "kcpshard-operator"
STATE_ROOT = "/var/lib/kcpshard"
# The tag of a local `docker build -t kcpshard:0.1.0 .`; the operator takes --image for a pushed one.
DEFAULT_IMAGE = "kcpshard:0.1.0"


def labels(shard: str, component: str, **extra: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "kcp",
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/instance": shard,
        LABEL_SHARD: shard,
        LABEL_COMPONENT: component,
        **extra,
    }


def shard_state_dir(namespace: str, shard: str) -> str:
    return f"{STATE_ROOT}/{namespace}/{shard}"


def slot_root_dir(namespace: str, shard: str, slot: SlotName) -> str:
    return f"{shard_state_dir(namespace, shard)}/{slot.value}"


def hold_timeout_seconds(spec: KcpShardSpec) -> int:
    """How long a serving slot's kcp serves on after a SIGTERM that was not the operator's
    (agent/slot_hold.py): a replacement's start to ready and the flip fit in it, or the recovery roll
    itself has failed by then. A Single shard has no other slot to take over."""
    if spec.shape == Shape.SINGLE:
        return 0
    return spec.roll.ready_timeout_seconds + spec.roll.flip_timeout_seconds


def kcpslot(
    shard_obj: dict[str, Any], slot: SlotName, revision: str, start: int, *, roll_id: str | None = None
) -> dict[str, Any]:
    meta = shard_obj["metadata"]
    spec: dict[str, Any] = {"shard": meta["name"], "slot": slot.value, "revision": revision, "start": start}
    if roll_id:
        spec["roll"] = roll_id
    return {
        "apiVersion": API_VERSION,
        "kind": "KcpSlot",
        "metadata": {
            "name": slot_object_name(meta["name"], slot),
            "namespace": meta["namespace"],
            "labels": labels(meta["name"], "slot", **{LABEL_SLOT: slot.value, LABEL_REVISION: revision}),
            "ownerReferences": [owner_reference(shard_obj)],
        },
        "spec": spec,
    }


def state_volume() -> tuple[dict[str, Any], dict[str, Any]]:
    volume = {"name": "state", "hostPath": {"path": STATE_ROOT, "type": "DirectoryOrCreate"}}
    mount = {"name": "state", "mountPath": STATE_ROOT}
    return volume, mount


def agent_security_context(*, bind_below_1024: bool = False) -> dict[str, Any]:
    """The container securityContext of the agents (host agent, front agent, backup): root, nothing more.

    They need root, not more: they write under the hostPath /var/lib/kcpshard, which the kubelet
    creates owned by root with mode 0755, and kcp (the host agent's child) writes its root directory
    there. A non-root agent would need that folder chowned on the node first, which a pod can only do
    with CAP_CHOWN. They run with hostNetwork because kcp binds a free port on the node, reached by the
    front on 127.0.0.1, and the front listens on the shard's address. Every capability is dropped (root
    still owns what it creates), except NET_BIND_SERVICE for a front on a port below 1024. The root
    filesystem stays writable: HAProxy's runtime socket and the backup's etcd TLS files live in /tmp.
    The operator itself runs as non-root (deploy/base/operator.yaml).
    """
    capabilities: dict[str, Any] = {"drop": ["ALL"]}
    if bind_below_1024:
        capabilities["add"] = ["NET_BIND_SERVICE"]
    return {
        "runAsUser": 0,
        "runAsNonRoot": False,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": capabilities,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def downward_env() -> list[dict[str, Any]]:
    return [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
    ]


def slot_job(
    shard_obj: dict[str, Any],
    spec: KcpShardSpec,
    slot_obj: dict[str, Any],
    *,
    image: str = DEFAULT_IMAGE,
    agent_command: tuple[str, ...] = ("kcpshard",),
) -> dict[str, Any]:
    """The host-agent Job of one slot: the agent seeds the root, runs kcp and reports on the KcpSlot."""
    meta = shard_obj["metadata"]
    shard, namespace = meta["name"], meta["namespace"]
    slot = SlotName(slot_obj["spec"]["slot"])
    revision = slot_obj["spec"]["revision"]
    name = slot_job_name(shard, slot, revision, int(slot_obj["spec"].get("start", 0)))
    root = slot_root_dir(namespace, shard, slot)
    paths = SlotPaths(
        root_dir=root,
        cache_kubeconfig=f"{root}/cache.kubeconfig" if spec.shard.cache_kubeconfig_secret_ref else None,
        root_shard_kubeconfig=(
            f"{root}/root-shard.kubeconfig" if spec.shard.root_shard_kubeconfig_secret_ref else None
        ),
    )
    stop_timeout = agent_stop_timeout(spec)
    hold_timeout = hold_timeout_seconds(spec)
    volume, mount = state_volume()
    command = [
        *agent_command,
        "agent",
        "slot",
        "--namespace",
        namespace,
        "--slot",
        slot_obj["metadata"]["name"],
        "--secret",
        shared_secret_name(shard),
        "--root-dir",
        root,
        "--job-name",
        name,
        "--stop-timeout",
        str(stop_timeout),
        "--hold-timeout",
        str(hold_timeout),
        *_agent_store_args(spec),
        *_agent_secret_args(spec),
        "--admin-secret",
        slot_admin_secret_name(slot_obj["metadata"]["name"]),
        "--front-url",
        front_url(spec),
        "--",
        spec.kcp.binary,
        "start",
        *kcp_start_args(spec, paths, etcd_override=KINE_URL if spec.store.kine is not None else None),
    ]
    start = str(slot_obj["spec"].get("start", 0))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels(
                shard, "slot", **{LABEL_SLOT: slot.value, LABEL_REVISION: revision, LABEL_START: start}
            ),
            "ownerReferences": [owner_reference(slot_obj)],
        },
        "spec": {
            # One try: a failed slot is the roll's business, not the Job controller's.
            "backoffLimit": 0,
            "template": {
                "metadata": {
                    "labels": labels(shard, "slot", **{LABEL_SLOT: slot.value, LABEL_REVISION: revision}),
                },
                "spec": {
                    "restartPolicy": "Never",
                    "nodeName": spec.node,
                    "hostNetwork": True,
                    "serviceAccountName": agent_name(shard),
                    # Above the hold and kcp's shutdown delay, so kcp drains before the kubelet kills.
                    "terminationGracePeriodSeconds": hold_timeout + stop_timeout + 10,
                    "containers": [
                        {
                            "name": "agent",
                            "image": spec.kcp.image or image,
                            "command": command,
                            "env": [*downward_env(), {"name": "JOB_NAME", "value": name}, *_kine_env(spec)],
                            "volumeMounts": [mount],
                            "securityContext": agent_security_context(),
                        }
                    ],
                    "volumes": [volume],
                },
            },
        },
    }


def _kine_env(spec: KcpShardSpec) -> list[dict[str, Any]]:
    """kine's DSN, straight from its Secret into the container's env (never on a command line)."""
    kine = spec.store.kine
    if kine is None:
        return []
    ref = kine.endpoint_secret_ref
    key_ref = {"name": ref.name, "key": ref.key or KINE_ENDPOINT_KEY}
    return [{"name": KINE_ENDPOINT_ENV, "valueFrom": {"secretKeyRef": key_ref}}]


def _agent_store_args(spec: KcpShardSpec) -> list[str]:
    """The host agent checks that the store answers before it starts kcp; with kine, it runs kine first."""
    if spec.store.kine is not None:
        return ["--kine", spec.store.kine.binary]
    if spec.store.etcd is None:
        return []
    # Give up well within the ready timeout, so the roll stalls as StoreUnreachable, not ReadyTimeout.
    wait = max(1, min(20, spec.roll.ready_timeout_seconds // 3))
    endpoints = [arg for url in spec.store.etcd.endpoints for arg in ("--store-endpoint", url)]
    tls = spec.store.etcd.tls_secret_ref
    # The agent writes its files where kcp's --etcd-cafile/certfile/keyfile point, and checks with them.
    secret = ["--store-tls-secret", tls.name] if tls is not None else []
    return [*endpoints, *secret, "--store-wait", str(wait)]


def _agent_secret_args(spec: KcpShardSpec) -> list[str]:
    """Non-root shards: the host agent writes these Secrets where the kcp flags point (mode 0600)."""
    out: list[str] = []
    for flag, ref in (
        ("--cache-kubeconfig-secret", spec.shard.cache_kubeconfig_secret_ref),
        ("--root-shard-kubeconfig-secret", spec.shard.root_shard_kubeconfig_secret_ref),
    ):
        if ref is not None:
            out += [flag, f"{ref.name}:{ref.key}" if ref.key else ref.name]
    return out


TEMPLATE_HASH = "kcpshard.dev/template-hash"


def template_hash(workload: dict[str, Any]) -> str:
    """Hash of what the operator asked for; the API server adds defaults, so compare this, not the specs."""
    text = json.dumps(workload["spec"], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def shared_secret(shard_obj: dict[str, Any], spec: KcpShardSpec) -> dict[str, Any]:
    """The shard's root material, filled by its first slot; kept unless deletionPolicy is Delete."""
    meta = shard_obj["metadata"]
    metadata: dict[str, Any] = {
        "name": shared_secret_name(meta["name"]),
        "namespace": meta["namespace"],
        "labels": labels(meta["name"], "shared-material"),
    }
    if spec.deletion_policy is DeletionPolicy.DELETE:
        metadata["ownerReferences"] = [owner_reference(shard_obj, controller=False)]
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": metadata, "data": {}}


def admin_kubeconfig_secret(shard_obj: dict[str, Any], kubeconfig_b64: str) -> dict[str, Any]:
    """The kcp-admin kubeconfig of the serving slot, for consumers; it goes with the shard."""
    meta = shard_obj["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": admin_kubeconfig_secret_name(meta["name"]),
            "namespace": meta["namespace"],
            "labels": labels(meta["name"], "kcp-admin"),
            "ownerReferences": [owner_reference(shard_obj, controller=False)],
        },
        "data": {"kubeconfig": kubeconfig_b64},
    }
