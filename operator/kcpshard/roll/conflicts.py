"""What one shard may not share with another: the front's port on a node, and its store. Pure.

The neighbours come from the operator's index of every shard (kept up to date from its watch), so a
round looks only at the shards that could contend (same front, same store endpoint), never lists them
all. Of two contenders the older keeps what it has; the younger stalls before anything starts.

Why a shared store is refused: two kcp processes of different shards on one keyspace each bootstrap
the same root objects and take the same controller lease, so the second shard's lease handover would
"see" the first shard's kcp as its new holder. With one store per shard, the only kcp that can hold a
shard's controller lease is one of its own slots (roll/lease.py relies on this).
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from kcpshard.api.models import KcpShardSpec
from kcpshard.roll.observed import Neighbour

WILDCARDS = frozenset({"0.0.0.0", "::"})
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
# kcp's --etcd-prefix when none is set (k8s.io/apiserver options.DefaultEtcdPathPrefix).
DEFAULT_ETCD_PREFIX = "/registry"


def etcd_endpoint_key(endpoint: str, node: str) -> str:
    """One etcd as an endpoint names it: scheme, host and port; a loopback address is the node's own."""
    parts = urlsplit(endpoint.strip())
    host = (parts.hostname or "").lower()
    try:
        port = parts.port or 2379
    except ValueError:
        port = 2379
    where = f"{node}/" if host in LOOPBACK or host == "" else ""
    if host in LOOPBACK:
        host = "loopback"
    return f"{where}{parts.scheme.lower()}://{host}:{port}"


def etcd_prefix_key(prefix: str | None) -> str:
    """The key prefix kcp writes under, without a trailing slash ("" is the whole keyspace)."""
    return (prefix or DEFAULT_ETCD_PREFIX).rstrip("/")


def kine_key(namespace: str, secret: str, key: str) -> str:
    """A kine store by the Secret key that holds its DSN (the DSN itself is secret: never compared)."""
    return f"{namespace}/{secret}/{key}"


def prefixes_overlap(a: str, b: str) -> bool:
    """Whether two key prefixes (from etcd_prefix_key) share keys: equal, or one nested in the other."""
    return a == b or a.startswith(b + "/") or b.startswith(a + "/") or "" in (a, b)


def store_of(spec: KcpShardSpec, namespace: str) -> tuple[tuple[str, ...], str, str | None]:
    """(etcd endpoint keys, prefix key, kine key) of a spec."""
    if spec.store.etcd is not None:
        endpoints = tuple(etcd_endpoint_key(e, spec.node) for e in spec.store.etcd.endpoints)
        return endpoints, etcd_prefix_key(spec.store.etcd.prefix), None
    if spec.store.kine is not None:
        ref = spec.store.kine.endpoint_secret_ref
        return (), "", kine_key(namespace, ref.name, ref.key or "")
    return (), "", None


def front_conflicts(
    spec: KcpShardSpec, me: tuple[str, str, str], neighbours: Iterable[Neighbour]
) -> list[str]:
    """Another KcpShard already fronts the same node and port: the younger one stalls.

    `me` is (creationTimestamp, namespace, name) of this shard: the older of two contenders keeps its port.
    """
    out = []
    for other in neighbours:
        if other.node != spec.node or other.front_port != spec.front.port:
            continue
        addresses = {other.front_address, spec.front.address}
        if len(addresses) > 1 and not addresses & WILDCARDS:
            continue  # two addresses on one node: both can listen on that port
        if (other.created, other.namespace, other.name) < me:
            out.append(
                f"front port {spec.front.port} on node {spec.node} is already used by KcpShard "
                f"{other.namespace}/{other.name}: choose another spec.front.port"
            )
    return out


def store_conflicts(
    spec: KcpShardSpec, me: tuple[str, str, str], neighbours: Iterable[Neighbour]
) -> list[str]:
    """An older KcpShard already keeps its data where this one would: the younger one stalls."""
    _, prefix, kine = store_of(spec, me[1])
    out = []
    for other in neighbours:
        if (other.created, other.namespace, other.name) >= me:
            continue
        if kine is not None and other.kine_ref == kine:
            out.append(
                f"store: the kine DSN in Secret key {kine} is already the store of KcpShard "
                f"{other.namespace}/{other.name}: give this shard a kine database of its own"
            )
            continue
        shared = [
            e
            for e in (spec.store.etcd.endpoints if spec.store.etcd else [])
            if etcd_endpoint_key(e, spec.node) in other.etcd_endpoints
        ]
        if shared and prefixes_overlap(prefix, other.etcd_prefix):
            out.append(
                f"store: etcd {shared[0]} with key prefix {prefix or '/'} overlaps the store of KcpShard "
                f"{other.namespace}/{other.name} (prefix {other.etcd_prefix or '/'}): two shards on one "
                f"keyspace overwrite each other's root objects; set spec.store.etcd.prefix to a path of "
                f"this shard's own (e.g. /{me[2]}), or give it its own etcd"
            )
    return out
