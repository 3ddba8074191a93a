"""What only the operator can judge wrong in a spec (the CRD's schema and rules refuse the rest). Pure."""

from __future__ import annotations

from kcpshard.api.models import shard_name_problems
from kcpshard.kcp import flags as kcp_flags
from kcpshard.roll.conflicts import front_conflicts, store_conflicts
from kcpshard.roll.observed import Observed


def invalid(obs: Observed) -> list[str]:
    """What only the operator can judge wrong in the spec: flags, another shard's front port or store."""
    me = (obs.created, obs.namespace, obs.name)
    return [
        *shard_name_problems(obs.name),
        *kcp_flags.validate(obs.spec),
        *front_conflicts(obs.spec, me, obs.neighbours),
        *store_conflicts(obs.spec, me, obs.neighbours),
    ]
