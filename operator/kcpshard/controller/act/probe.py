"""The probe: a workspace created, Ready, deleted, through the front; proves kcp's controllers work."""

from __future__ import annotations

from kcpshard.controller.act.context import ActContext
from kcpshard.controller.kcp_access import NoRootMaterial
from kcpshard.kcp.errors import KcpError
from kcpshard.roll.actions import PROBE_PREFIX, Probe
from kcpshard.roll.outcomes import Failed, ProbeNotReady, ProbeReady


async def probe(ctx: ActContext, action: Probe) -> ProbeReady | ProbeNotReady | Failed:
    try:
        async with await ctx.kcp(action.url) as kcp:
            # An operator stopped during an earlier probe left its workspace behind: remove it first.
            for leftover in await kcp.delete_workspaces(PROBE_PREFIX):
                ctx.logger.info(f"deleted the leftover probe workspace {leftover}")
            try:
                result = await kcp.probe(action.prefix, timeout=action.timeout)
            except KcpError as exc:
                return ProbeNotReady(action.timeout, str(exc))
            cleaned = False
            if action.stale_identity_cache is not None:
                cleaned = await kcp.delete_configmap("system:shard", "default", "identitycache")
    except NoRootMaterial as exc:
        return Failed("NoRootMaterial", str(exc))
    return ProbeReady(result.name, result.ready_seconds, identity_cache_deleted=cleaned)
