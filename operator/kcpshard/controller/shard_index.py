"""The operator's index of every KcpShard, kept by kopf from its watch (`@kopf.index` in handlers.py).

A round asks it which shards could contend with its own (the same front port on the same node, or
the same store) instead of listing every shard in the cluster: the work per round stays the same as
shards are added. kopf fills the index from its first listing before any handler runs, and keeps it
from every event.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kcpshard.api.models import KcpShardSpec
from kcpshard.roll.conflicts import etcd_endpoint_key, etcd_prefix_key, kine_key, store_of
from kcpshard.roll.observed import Neighbour

# ("front", node, port), ("etcd", endpoint key, 0) or ("kine", Secret key, 0).
IndexKey = tuple[str, str, int]


def _store(namespace: str, node: str, spec: Mapping[str, Any]) -> tuple[tuple[str, ...], str, str | None]:
    """The store of an unvalidated spec, as roll/conflicts.py names it (what does not parse is left out)."""
    store = spec.get("store") or {}
    etcd, kine = store.get("etcd"), store.get("kine")
    if isinstance(etcd, dict) and isinstance(etcd.get("endpoints"), list):
        endpoints = tuple(etcd_endpoint_key(e, node) for e in etcd["endpoints"] if isinstance(e, str))
        prefix = etcd.get("prefix")
        return endpoints, etcd_prefix_key(prefix if isinstance(prefix, str) else None), None
    ref = (kine or {}).get("endpointSecretRef") if isinstance(kine, dict) else None
    if isinstance(ref, dict) and isinstance(ref.get("name"), str):
        return (), "", kine_key(namespace, ref["name"], str(ref.get("key") or ""))
    return (), "", None


def index_entries(body: Mapping[str, Any]) -> dict[IndexKey, Neighbour]:
    """The keys a shard is found under; none while it is being deleted (it gives its port up)."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    front = spec.get("front") or {}
    node, port = spec.get("node"), front.get("port")
    if meta.get("deletionTimestamp") or not isinstance(node, str) or not isinstance(port, int):
        return {}
    namespace = str(meta.get("namespace") or "")
    endpoints, prefix, kine = _store(namespace, node, spec)
    neighbour = Neighbour(
        namespace=namespace,
        name=str(meta.get("name") or ""),
        created=str(meta.get("creationTimestamp") or ""),
        node=node,
        front_address=str(front.get("address") or "127.0.0.1"),
        front_port=port,
        etcd_endpoints=endpoints,
        etcd_prefix=prefix,
        kine_ref=kine,
    )
    keys: list[IndexKey] = [("front", node, port), *(("etcd", e, 0) for e in endpoints)]
    if kine is not None:
        keys.append(("kine", kine, 0))
    return dict.fromkeys(keys, neighbour)


class ShardIndex:
    def __init__(self, index: Mapping[IndexKey, Iterable[Neighbour]] | None = None) -> None:
        self._index: Mapping[IndexKey, Iterable[Neighbour]] = index if index is not None else {}

    def neighbours(self, namespace: str, name: str, spec: KcpShardSpec) -> tuple[Neighbour, ...]:
        """The other shards that front the same port on the same node, or share a store endpoint."""
        endpoints, _, kine = store_of(spec, namespace)
        keys: list[IndexKey] = [("front", spec.node, spec.front.port), *(("etcd", e, 0) for e in endpoints)]
        if kine is not None:
            keys.append(("kine", kine, 0))
        found: dict[tuple[str, str], Neighbour] = {}
        for key in keys:
            for n in self._index.get(key, ()):
                if (n.namespace, n.name) != (namespace, name):
                    found.setdefault((n.namespace, n.name), n)
        return tuple(found.values())
