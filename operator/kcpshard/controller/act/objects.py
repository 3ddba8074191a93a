"""The objects every shard has: its shared-material Secret and its front Deployment."""

from __future__ import annotations

from typing import Any

from kcpshard.controller.act.context import ActContext, create_once
from kcpshard.controller.act.identity import ensure_agent_identity
from kcpshard.k8s import builders, front_workload
from kcpshard.k8s.api import BUDGETS, DEPLOYMENTS, SECRETS
from kcpshard.k8s.disruption import disruption_budget
from kcpshard.roll.observed import Observed


async def create_shared_secret(ctx: ActContext, obs: Observed) -> None:
    await create_once(ctx, SECRETS, builders.shared_secret(dict(obs.shard), obs.spec))


async def create_front(ctx: ActContext, obs: Observed) -> None:
    await ensure_agent_identity(ctx, obs, [obs.spec])
    await create_once(ctx, BUDGETS, disruption_budget(dict(obs.shard)))
    await create_once(ctx, DEPLOYMENTS, _front(ctx, obs))


async def update_front(ctx: ActContext, obs: Observed) -> None:
    """Replace the front Deployment with the one the spec asks for (guarded by its resourceVersion)."""
    await ensure_agent_identity(ctx, obs, [obs.spec])  # an operator upgrade brings the identity too
    await create_once(ctx, BUDGETS, disruption_budget(dict(obs.shard)))  # and the budget
    wanted = _front(ctx, obs)
    name = wanted["metadata"]["name"]
    current = await ctx.api.get(DEPLOYMENTS, ctx.namespace, name)
    wanted["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    await ctx.api.replace(DEPLOYMENTS, ctx.namespace, name, wanted)


def _front(ctx: ActContext, obs: Observed) -> dict[str, Any]:
    return front_workload.front_deployment(
        dict(obs.shard), obs.spec, image=ctx.config.image, agent_command=ctx.config.agent_command
    )
