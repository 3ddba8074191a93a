"""The serving slot's kcp-admin kubeconfig (its token is new on every kcp start), copied for consumers."""

from __future__ import annotations

from dataclasses import dataclass

from kcpshard.api.models import SlotName
from kcpshard.controller.act.context import ActContext
from kcpshard.k8s import builders, names
from kcpshard.k8s.api import SECRETS, NotFound
from kcpshard.roll.observed import Observed


@dataclass(frozen=True)
class Published:
    """The consumers' Secret holds the serving slot's kubeconfig; `changed`: it was written just now."""

    secret: str
    changed: bool


async def publish_admin_kubeconfig(ctx: ActContext, obs: Observed) -> Published | None:
    """Copy the active slot's `<slot>-kcp-admin` Secret into `<shard>-kcp-admin`; None while the slot's
    host agent has not published it yet (a later round copies it)."""
    active = obs.status.active_slot
    if not active:
        return None
    source = names.slot_admin_secret_name(names.slot_object_name(ctx.shard, SlotName(active)))
    try:
        slot_secret = await ctx.api.get(SECRETS, ctx.namespace, source)
    except NotFound:
        return None
    data = (slot_secret.get("data") or {}).get("kubeconfig")
    if not data:
        return None
    wanted = builders.admin_kubeconfig_secret(dict(obs.shard), data)
    name = wanted["metadata"]["name"]
    try:
        current = await ctx.api.get(SECRETS, ctx.namespace, name)
    except NotFound:
        await ctx.api.create(SECRETS, ctx.namespace, wanted)
        return Published(name, changed=True)
    if (current.get("data") or {}).get("kubeconfig") == data:
        return Published(name, changed=False)
    wanted["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    await ctx.api.replace(SECRETS, ctx.namespace, name, wanted)
    return Published(name, changed=True)
