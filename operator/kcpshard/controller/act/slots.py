"""Slots: a KcpSlot with its host-agent Job, stopped through its Job, killed through its pods."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from kcpshard.api.models import SlotName
from kcpshard.controller.act.context import ActContext, create_once
from kcpshard.controller.act.identity import ensure_agent_identity
from kcpshard.k8s import builders, names
from kcpshard.k8s.api import JOBS, KCPSLOTS, ApiError, NotFound
from kcpshard.roll.actions import CreateSlot, StopSlot
from kcpshard.roll.observed import Observed


async def create_slot(ctx: ActContext, action: CreateSlot, obs: Observed) -> str:
    """The KcpSlot, then its Job; returns the Job's name.

    A KcpSlot already there (an operator stopped between the two writes) keeps its start counter:
    the Job is named after the slot object as it is.
    """
    shard = dict(obs.shard)
    body = builders.kcpslot(shard, action.slot, action.revision, action.start, roll_id=action.roll_id)
    # The agent's identity must exist before the Job's pod (its ServiceAccount is admitted then), not
    # before the KcpSlot: both at once.
    _, slot_obj = await asyncio.gather(
        ensure_agent_identity(ctx, obs, [action.spec]), _slot_object(ctx, body)
    )
    job = builders.slot_job(
        shard, action.spec, slot_obj, image=ctx.config.image, agent_command=ctx.config.agent_command
    )
    await create_once(ctx, JOBS, job)
    return str(job["metadata"]["name"])


async def _slot_object(ctx: ActContext, body: dict[str, Any]) -> dict[str, Any]:
    try:
        return await ctx.api.create(KCPSLOTS, ctx.namespace, body)
    except ApiError as exc:
        if exc.status != 409:
            raise
        return await ctx.api.get(KCPSLOTS, ctx.namespace, body["metadata"]["name"])


async def delete_slot(ctx: ActContext, slot: SlotName) -> bool:
    """The KcpSlot; its Job and pod go with it (ownerReferences). True when the KcpSlot is gone at once
    (no finalizer kept it): the round may plan on without it."""
    name = names.slot_object_name(ctx.shard, slot)
    try:
        kept = await ctx.api.delete(KCPSLOTS, ctx.namespace, name, propagation_policy="Background")
    except NotFound:
        return True
    return kept is None or not (kept.get("metadata") or {}).get("finalizers")


async def stop_slot(ctx: ActContext, action: StopSlot) -> None:
    """Delete the slot's Job: the kubelet sends its pod SIGTERM, the host agent stops kcp gently."""
    with contextlib.suppress(NotFound):
        await ctx.api.delete(JOBS, ctx.namespace, action.job, propagation_policy="Background")
