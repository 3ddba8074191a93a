"""The PodDisruptionBudget of a shard (a pure builder): a node drain stops at what serves the shard.

A shard cannot move to another node in place (`spec.node` is immutable), and evicting its front or its
serving slot would take it down, so voluntary evictions of them are refused (`maxUnavailable: 0`): `kubectl
drain` waits there, naming the shard's pods. The operator's own changes delete pods and scale the front's
ReplicaSet, which a budget does not hold back; a pod that is not ready may still be evicted
(`unhealthyPodEvictionPolicy: AlwaysAllow`), so a broken pod never blocks a drain.
"""

from __future__ import annotations

from typing import Any

from kcpshard.k8s.builders import labels
from kcpshard.k8s.names import LABEL_COMPONENT, LABEL_SHARD, budget_name
from kcpshard.k8s.owners import owner_reference

SERVING_COMPONENTS = ["front", "slot"]


def disruption_budget(shard_obj: dict[str, Any]) -> dict[str, Any]:
    meta = shard_obj["metadata"]
    shard = meta["name"]
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": budget_name(shard),
            "namespace": meta["namespace"],
            "labels": labels(shard, "disruption-budget"),
            "ownerReferences": [owner_reference(shard_obj)],
        },
        "spec": {
            "maxUnavailable": 0,
            "selector": {
                "matchLabels": {LABEL_SHARD: shard},
                "matchExpressions": [
                    {"key": LABEL_COMPONENT, "operator": "In", "values": SERVING_COMPONENTS}
                ],
            },
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }
