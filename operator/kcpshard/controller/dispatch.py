"""Each planned action, carried out: by its act handler, by the status writer, or by both in a fixed order.

Nothing here chooses: every action maps to one fixed sequence. What a handler saw that the plan must
judge (a failure, a lease holder, a probe) is returned to the loop, which asks the plan again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kcpshard.api import conditions as cond
from kcpshard.controller.act import admin, backup, lease, objects, probe, slots
from kcpshard.controller.act.context import ActContext
from kcpshard.controller.status_writer import StatusWriter
from kcpshard.k8s.api import ApiError
from kcpshard.roll import actions as a
from kcpshard.roll.observed import Observed, ShardOnly
from kcpshard.roll.outcomes import Outcome, ProbeReady, Refused, SlotCreated, SlotGone

# 400 Bad Request, 403 Forbidden, 422 Invalid: the same request gets the same answer.
REFUSALS = frozenset({400, 403, 422})

Handler = Callable[[Any, Any], Awaitable[Outcome | None]]


class Dispatcher:
    def __init__(self, ctx: ActContext, writer: StatusWriter) -> None:
        self.ctx = ctx
        self.writer = writer
        self._handlers: dict[type[a.Action], Handler] = {
            a.Wait: self._nothing,
            a.FirstSight: self._first_sight,
            a.Stall: self._stall,
            a.CreateSharedSecret: self._create_shared_secret,
            a.CreateFront: self._create_front,
            a.UpdateFront: self._update_front,
            a.ReportFrontRestarts: self._report_front_restarts,
            a.Steady: self._steady,
            a.Hold: self._hold,
            a.StartRoll: self._start_roll,
            a.Advance: self._advance,
            a.StartBackup: self._start_backup,
            a.CreateSlot: self._create_slot,
            a.DeleteSlot: self._delete_slot,
            a.Flip: self._flip,
            a.StopSlot: self._stop_slot,
            a.WatchLeaseHolder: self._watch_lease_holder,
            a.FreeLease: self._free_lease,
            a.Probe: self._probe,
            a.RequestDrain: self._request_drain,
            a.Finish: self._finish,
            a.Abort: self._abort,
            a.Restore: self._restore,
            a.Fail: self._fail,
        }

    async def carry_out(self, action: a.Action, obs: Observed | ShardOnly) -> Outcome | None:
        handler = self._handlers.get(type(action))
        if handler is None:
            raise TypeError(f"no handler for {action!r}")
        try:
            return await handler(action, obs)
        except ApiError as exc:
            # A refusal the same request would meet again goes to the plan (it stalls); anything else
            # (409, 429, 5xx, a timeout) goes to the loop, which tries again with backoff.
            if exc.status not in REFUSALS or isinstance(obs, ShardOnly):
                raise
            return Refused(exc.status, exc.reason, exc.message)

    # ----- the shard -------------------------------------------------------------------------------

    async def _nothing(self, action: a.Wait, obs: Observed | ShardOnly) -> None:
        return None

    async def _first_sight(self, action: a.FirstSight, obs: Observed | ShardOnly) -> None:
        await self.writer.first_sight(obs)

    async def _stall(self, action: a.Stall, obs: Observed | ShardOnly) -> None:
        await self.writer.stall(obs, action.reason, action.message)

    async def _create_shared_secret(self, action: a.CreateSharedSecret, obs: Observed) -> None:
        await objects.create_shared_secret(self.ctx, obs)

    async def _create_front(self, action: a.CreateFront, obs: Observed) -> None:
        await objects.create_front(self.ctx, obs)
        front = obs.spec.front
        self.writer.event(obs, "FrontCreated", f"created the front on {front.address}:{front.port}")

    async def _update_front(self, action: a.UpdateFront, obs: Observed) -> None:
        await objects.update_front(self.ctx, obs)
        front = obs.spec.front
        self.writer.event(obs, "FrontUpdated", f"updated the front for {front.address}:{front.port}")

    async def _report_front_restarts(self, action: a.ReportFrontRestarts, obs: Observed) -> None:
        await self.writer.front_restarts_reported(obs, action)

    async def _steady(self, action: a.Steady, obs: Observed) -> None:
        await self._publish_admin_kubeconfig(obs)
        await self.writer.steady(obs, action.message)

    async def _hold(self, action: a.Hold, obs: Observed) -> None:
        await self.writer.hold(obs, action.reason, action.message)

    async def _publish_admin_kubeconfig(self, obs: Observed) -> None:
        published = await admin.publish_admin_kubeconfig(self.ctx, obs)
        if published is not None:
            await self.writer.admin_kubeconfig_published(obs, published.secret, published.changed)

    # ----- a roll ----------------------------------------------------------------------------------

    async def _start_roll(self, action: a.StartRoll, obs: Observed) -> None:
        await self.writer.start_roll(obs, action)

    async def _advance(self, action: a.Advance, obs: Observed) -> None:
        await self.writer.advance(obs, action)
        if action.publish_admin:
            await self._publish_admin_kubeconfig(obs)

    async def _start_backup(self, action: a.StartBackup, obs: Observed) -> None:
        await backup.start_backup(self.ctx, action, obs)
        self.writer.event(obs, "BackingUp", f"saving the store before the roll (Job {action.job})")

    async def _create_slot(self, action: a.CreateSlot, obs: Observed) -> Outcome:
        job = await slots.create_slot(self.ctx, action, obs)
        created = SlotCreated(action.slot.value, cond.now_precise())
        self.writer.event(obs, "SlotCreated", f"created slot {action.slot.value} (Job {job})")
        return created

    async def _delete_slot(self, action: a.DeleteSlot, obs: Observed) -> Outcome | None:
        gone = await slots.delete_slot(self.ctx, action.slot)
        self.writer.event(obs, "SlotDeleted", f"deleted slot {action.slot.value}: {action.why}")
        return SlotGone(action.slot.value) if gone else None

    async def _flip(self, action: a.Flip, obs: Observed) -> None:
        await self.writer.flip(obs, action)

    async def _stop_slot(self, action: a.StopSlot, obs: Observed) -> None:
        await slots.stop_slot(self.ctx, action)
        text = f"stopping slot {action.slot.value} (SIGTERM, then kcp's shutdown delay)"
        self.writer.event(obs, "StoppingOld", text)

    async def _watch_lease_holder(self, action: a.WatchLeaseHolder, obs: Observed) -> Outcome:
        return await lease.watch_holder(self.ctx, action)

    async def _free_lease(self, action: a.FreeLease, obs: Observed) -> Outcome:
        return await lease.free_lease(self.ctx, action)

    async def _probe(self, action: a.Probe, obs: Observed) -> Outcome:
        outcome = await probe.probe(self.ctx, action)
        if isinstance(outcome, ProbeReady) and outcome.identity_cache_deleted:
            version = action.stale_identity_cache
            text = (
                f"deleted the stale identitycache ConfigMap of system:shard (kcp {version} reads identities "
                "from the cache server)"
            )
            self.writer.event(obs, "IdentityCacheDeleted", text)
        return outcome

    async def _request_drain(self, action: a.RequestDrain, obs: Observed) -> None:
        await self.writer.request_drain(obs, action)

    async def _finish(self, action: a.Finish, obs: Observed) -> None:
        await self.writer.finish(obs, action)

    async def _abort(self, action: a.Abort, obs: Observed) -> None:
        # The roll ends first: an operator stopped before the new slot goes finds no roll to resume, and
        # the next roll never adopts that slot.
        await self.writer.abort(obs, action)
        if action.remove is not None:
            await slots.delete_slot(self.ctx, action.remove)

    async def _restore(self, action: a.Restore, obs: Observed) -> None:
        await self.writer.restore(obs, action)

    async def _fail(self, action: a.Fail, obs: Observed) -> None:
        await self.writer.fail(obs, action)
