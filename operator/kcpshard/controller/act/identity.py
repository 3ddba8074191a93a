"""The shard's agent identity (k8s/agent_identity.py): made before any of the shard's pods, so a shard in
a namespace nobody prepared works, and kept to what the pods about to start need."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from kcpshard.api.models import KcpShardSpec
from kcpshard.controller.act.context import ActContext, create_once
from kcpshard.k8s import agent_identity
from kcpshard.k8s.api import ROLEBINDINGS, ROLES, SERVICEACCOUNTS, NotFound
from kcpshard.roll.observed import Observed


async def ensure_agent_identity(
    ctx: ActContext, obs: Observed, specs: Iterable[KcpShardSpec], jobs: Iterable[str] = ()
) -> None:
    """ServiceAccount, Role and RoleBinding; the Role replaced when the Secrets or Jobs it names change."""
    shard = dict(obs.shard)
    # The serving slot's spec too: its agent, started again, reads what that spec names.
    wanted = agent_identity.role(shard, [*specs, *([obs.active_spec] if obs.active_spec else [])], jobs)
    # Independent of each other (a RoleBinding may name a Role or ServiceAccount not made yet): at once,
    # so a roll's start pays one round trip for them, not four.
    await asyncio.gather(
        create_once(ctx, SERVICEACCOUNTS, agent_identity.service_account(shard)),
        _ensure_role(ctx, wanted),
        create_once(ctx, ROLEBINDINGS, agent_identity.role_binding(shard)),
    )


async def _ensure_role(ctx: ActContext, wanted: dict[str, Any]) -> None:
    name = wanted["metadata"]["name"]
    try:
        current = await ctx.api.get(ROLES, ctx.namespace, name)
    except NotFound:
        await create_once(ctx, ROLES, wanted)
    else:
        if current.get("rules") != wanted["rules"]:
            wanted["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            await ctx.api.replace(ROLES, ctx.namespace, name, wanted)
