"""kcp's controller lease at the handover: watch it, or free it for the new slot's kcp."""

from __future__ import annotations

import asyncio

from kcpshard.controller.act.context import ActContext
from kcpshard.controller.kcp_access import NoRootMaterial, lease_reading
from kcpshard.kcp.errors import KcpError
from kcpshard.roll.actions import FreeLease, WatchLeaseHolder
from kcpshard.roll.outcomes import Failed, HolderSeen, LeaseWatched, NoNewHolder

POLL_SECONDS = 0.25


async def watch_holder(ctx: ActContext, action: WatchLeaseHolder) -> LeaseWatched | Failed:
    """Read the lease until it changes or `window` seconds pass; returns the last reading."""
    try:
        async with await ctx.kcp(action.url) as kcp:
            first = last = lease_reading(await kcp.get_lease())
            loop = asyncio.get_running_loop()
            deadline = loop.time() + action.window
            while last == first and loop.time() < deadline:
                await asyncio.sleep(POLL_SECONDS)
                last = lease_reading(await kcp.get_lease())
    except NoRootMaterial as exc:
        return Failed("NoRootMaterial", str(exc))
    return LeaseWatched(last)


async def free_lease(ctx: ActContext, action: FreeLease) -> HolderSeen | NoNewHolder | Failed:
    """Delete the lease (when the action says so), then wait for a holder other than the stale one."""
    try:
        async with await ctx.kcp(action.url) as kcp:
            if action.delete:
                await kcp.delete_lease()
            try:
                holder = await kcp.wait_for_holder(action.stale, timeout=action.timeout)
            except KcpError as exc:
                return NoNewHolder(action.timeout, str(exc))
    except NoRootMaterial as exc:
        return Failed("NoRootMaterial", str(exc))
    return HolderSeen(holder)
