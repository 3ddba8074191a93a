"""The revision of a shard spec: what a slot runs.

Only the fields that change the kcp process count; `roll`, `shape` and
`deletionPolicy` change how the operator rolls, not what runs, so editing them
starts no roll.
"""

from __future__ import annotations

import hashlib
import json

from kcpshard.api.models import KcpShardSpec

_PROCESS_FIELDS = {
    "kcp",
    "node",
    "store",
    "front",
    "shard",
    "extra_args",
    "feature_gates",
    "shutdown_delay_seconds",
}


def revision_of(spec: KcpShardSpec) -> str:
    data = spec.model_dump(mode="json", by_alias=True, include=_PROCESS_FIELDS)
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return digest[:10]
