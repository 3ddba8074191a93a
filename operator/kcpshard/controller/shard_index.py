"""The operator's index of every KcpShard, kept by kopf from its watch (`@kopf.index` in handlers.py).

A round asks it which shards could contend with its own (the same front port on the same node)
instead of listing every shard in the cluster: the work per round stays the same as shards are added.
kopf fills the index from its first listing before any handler runs, and keeps it from every event.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kcpshard.api.models import KcpShardSpec
from kcpshard.roll.observed import Neighbour

# ("front", node, port). A store-overlap check would add ("store", endpoint) keys the same way.
IndexKey = tuple[str, str, int]


def index_entries(body: Mapping[str, Any]) -> dict[IndexKey, Neighbour]:
    """The keys a shard is found under; none while it is being deleted (it gives its port up)."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    front = spec.get("front") or {}
    node, port = spec.get("node"), front.get("port")
    if meta.get("deletionTimestamp") or not isinstance(node, str) or not isinstance(port, int):
        return {}
    neighbour = Neighbour(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        created=str(meta.get("creationTimestamp") or ""),
        node=node,
        front_address=str(front.get("address") or "127.0.0.1"),
        front_port=port,
    )
    return {("front", node, port): neighbour}


class ShardIndex:
    def __init__(self, index: Mapping[IndexKey, Iterable[Neighbour]] | None = None) -> None:
        self._index: Mapping[IndexKey, Iterable[Neighbour]] = index if index is not None else {}

    def neighbours(self, namespace: str, name: str, spec: KcpShardSpec) -> tuple[Neighbour, ...]:
        """The other shards that front the same port on the same node."""
        key = ("front", spec.node, spec.front.port)
        if key not in self._index:
            return ()
        return tuple(n for n in self._index[key] if (n.namespace, n.name) != (namespace, name))
