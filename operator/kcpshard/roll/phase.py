"""The shard's health as a person (and Argo CD) reads it, from its status: the phase and why. Pure.

The Argo CD health check (deploy/argocd/resource_customizations/kcpshard.dev/KcpShard/health.lua)
holds the same rules in Lua, in the same order; tests/process/test_argocd_health.py keeps them together.
"""

from __future__ import annotations

import enum

from kcpshard.api.models import Condition, KcpShardStatus
from kcpshard.roll.promotion import WAITING_FOR_PROMOTION


class Phase(enum.StrEnum):
    HEALTHY = "Healthy"
    PROGRESSING = "Progressing"
    PAUSED = "Paused"
    DEGRADED = "Degraded"
    TERMINATING = "Terminating"


def phase(status: KcpShardStatus, *, generation: int | None, deleting: bool = False) -> tuple[Phase, str]:
    """A roll under way (or waiting for promotion) comes first; then a spec the operator has not acted
    on yet (a Stalled of an older generation is no verdict on the current spec); then Stalled; then
    Ready."""
    if deleting:
        return Phase.TERMINATING, "the shard is being deleted"
    if not status.conditions:
        return Phase.PROGRESSING, "waiting for the operator to see the shard"
    reconciling = _condition(status, "Reconciling")
    ready = _condition(status, "Ready")
    ready_message = ready.message if ready is not None else ""
    if reconciling is not None and reconciling.status == "True":
        if reconciling.reason == WAITING_FOR_PROMOTION:
            return Phase.PAUSED, reconciling.message or "waiting for promotion"
        return Phase.PROGRESSING, reconciling.message
    if status.rollout is not None:
        return Phase.PROGRESSING, ready_message
    observed = status.observed_generation
    if observed is not None and generation is not None and observed != generation:
        return Phase.PROGRESSING, f"waiting for the operator to act on generation {generation}"
    stalled = _condition(status, "Stalled")
    if stalled is not None and stalled.status == "True":
        return Phase.DEGRADED, stalled.message
    if ready is not None and ready.status == "True":
        return Phase.HEALTHY, ready_message
    return Phase.PROGRESSING, ready_message or "not ready yet"


def _condition(status: KcpShardStatus, type_: str) -> Condition | None:
    return next((c for c in status.conditions if c.type == type_), None)
