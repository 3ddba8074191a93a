"""The probe: a workspace created, Ready, deleted, through the front; proves kcp's controllers work."""

from __future__ import annotations

from kcpshard.api import conditions as cond
from kcpshard.controller.act.context import ActContext
from kcpshard.controller.kcp_access import NoRootMaterial
from kcpshard.kcp.errors import KcpError
from kcpshard.roll.actions import Probe
from kcpshard.roll.outcomes import PROBE_STAMPS, Failed, ProbeNotReady, ProbeReady


async def probe(ctx: ActContext, action: Probe) -> ProbeReady | ProbeNotReady | Failed:
    via = action.via
    # A non-root shard's probe workspace is made on its root shard, as the root's shard-admin.
    connect = ctx.kcp_of(via.shard) if via is not None and ctx.kcp_of is not None else ctx.kcp
    try:
        async with await connect(via.url if via is not None else action.url) as kcp:
            # An operator stopped during an earlier probe left its workspace behind: remove it first.
            for leftover in await kcp.delete_workspaces(action.leftovers):
                ctx.logger.info(f"deleted the leftover probe workspace {leftover}")
            try:
                result = await kcp.probe(action.prefix, timeout=action.timeout, location=action.location)
            except KcpError as exc:
                return ProbeNotReady(action.timeout, str(exc))
            if not result.deleted:
                ctx.logger.warning(f"could not delete the probe workspace {result.name}; the next probe will")
        cleaned = False
        if action.stale_identity_cache is not None:  # the shard's own system:shard, through its own front
            async with await ctx.kcp(action.url) as own:
                cleaned = await own.delete_configmap("system:shard", "default", "identitycache")
    except NoRootMaterial as exc:
        return Failed("NoRootMaterial", str(exc))
    stamps = tuple(
        zip(PROBE_STAMPS, (cond.precise(result.created_at), cond.precise(result.ready_at)), strict=True)
    )
    return ProbeReady(result.name, result.ready_seconds, identity_cache_deleted=cleaned, stamps=stamps)
