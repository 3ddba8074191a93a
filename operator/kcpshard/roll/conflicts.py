"""What one shard may not share with another: the front's port on a node. Pure.

The neighbours come from the operator's index of every shard (kept up to date from its watch), so a
round looks only at the shards that could contend, never lists them all. A store-overlap rule would
read the same neighbours, indexed by store endpoint.
"""

from __future__ import annotations

from collections.abc import Iterable

from kcpshard.api.models import KcpShardSpec
from kcpshard.roll.observed import Neighbour

WILDCARDS = frozenset({"0.0.0.0", "::"})


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
