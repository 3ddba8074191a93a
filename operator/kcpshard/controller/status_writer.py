"""The one writer of what the operator reports: KcpShard and KcpSlot status, conditions, Events, metrics.

Every status write is a resourceVersion-guarded read-modify-write retried on 409
(`kcpshard.k8s.status.mutate_status`): the front agent and the host agents write the same objects.
The changes themselves are the pure functions of `status_changes`.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

import kopf

from kcpshard import metrics
from kcpshard.api import conditions as cond
from kcpshard.api.models import RolloutStatus, SlotName
from kcpshard.controller import status_changes as changes
from kcpshard.k8s import names
from kcpshard.k8s.api import KCPSHARDS, KCPSLOTS, ApiClient, NotFound
from kcpshard.k8s.status import StatusFn, mutate_status
from kcpshard.roll.actions import (
    Abort,
    Advance,
    Event,
    Fail,
    Finish,
    Flip,
    Record,
    ReportFrontRestarts,
    RequestDrain,
    Restore,
    RollEnd,
    SlotMark,
    StartRoll,
)
from kcpshard.roll.observed import Observed, Seen
from kcpshard.roll.report import REASSERT_CONDITION, ended, finished_text, measured

Logger = logging.Logger | logging.LoggerAdapter[logging.Logger]
# Posts one Event about the object: (body, reason, message, warning). kopf's by default.
EventSink = Callable[[Mapping[str, Any], str, str, bool], None]


def kopf_event(body: Mapping[str, Any], reason: str, message: str, warning: bool) -> None:
    shard = cast(kopf.Body, body)  # kopf only reads apiVersion, kind and metadata of it
    if warning:
        kopf.warn(shard, reason=reason, message=message)
    else:
        kopf.info(shard, reason=reason, message=message)


class StatusWriter:
    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        name: str,
        logger: Logger,
        events: EventSink = kopf_event,
        own: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> None:
        self.api = api
        self.own = own  # told each object a write returned (its watch event wakes no one: wakeups.py)
        self.namespace = namespace
        self.name = name
        self.logger = logger
        self.events = events
        self._known: Mapping[str, Any] | None = None  # the shard as read or written, with held changes
        self._base: Mapping[str, Any] | None = None  # the shard as the API server last gave it
        self._written: Mapping[str, Any] | None = None  # the shard as this action's write left it
        self._slots: dict[str, Mapping[str, Any]] = {}  # the KcpSlots as this round's marks left them
        # Changes held back (`holding`) and their Events: written as one at `flush`.
        self._holding = False
        self._pending: list[StatusFn] = []
        self._pending_step = False  # one of them begins a step
        self._held_events: list[tuple[Mapping[str, Any], str, str, bool]] = []

    # ----- the mechanics ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def holding(self, hold: bool = True) -> Iterator[None]:
        """While held, a change to the shard's status is made on the shard as known and written at the next
        `flush`: a step and the status-only actions that follow it go out as one write (the loop flushes
        before anything else acts and before it waits; a new step flushes the one before)."""
        self._holding = hold
        try:
            yield
        finally:
            self._holding = False

    async def flush(self) -> None:
        """Write the held changes in one write (guarded and retried like any other), then post their
        Events. On an error they are dropped: the next round plans them again from what it reads."""
        if not self._pending:
            return
        pending, self._pending, self._pending_step = self._pending, [], False
        events, self._held_events = self._held_events, []

        def composed(status: dict[str, Any]) -> dict[str, Any] | None:
            changed = False
            for change in pending:
                new = change(status)
                if new is not None:
                    status, changed = new, True
            return status if changed else None

        base, self._known = self._base, None
        self._known = self._base = await mutate_status(
            self.api, KCPSHARDS, self.namespace, self.name, composed, known=base, written=self.own
        )
        metrics.shard_seen(self.namespace, self.name, self._known)
        for body, reason, message, warning in events:
            self._post(body, reason, message, warning)

    def _hold(self, change: StatusFn, step: bool) -> bool:
        """Make `change` on the shard as known, to be written at `flush`; False when it changes nothing
        there (then only the server can say: it is written at once)."""
        if not self._holding or self._known is None:
            return False
        before = self._known.get("status") or {}
        new = change(copy.deepcopy(dict(before)))
        if new is None or new == before:
            return False
        self._pending.append(change)
        self._pending_step |= step
        self._known = self._written = {**self._known, "status": new}
        return True

    async def _mutate(self, change: StatusFn, *, step: bool = False) -> bool:
        """Write one change to the shard's status; False when there was nothing to write. `step`: it
        begins a roll or a step, which never shares a write with another step (each is on the server, for
        the plugin's view and for a restarted operator, before the next one begins)."""
        if step and self._pending_step:
            await self.flush()
        if self._hold(change, step):
            return True
        await self.flush()
        wrote = False

        def tracked(status: dict[str, Any]) -> dict[str, Any] | None:
            nonlocal wrote
            new = change(status)
            wrote = new is not None
            return new

        known, self._known = self._known, None  # forgotten unless the write returns a newer one
        self._known = self._base = await mutate_status(
            self.api, KCPSHARDS, self.namespace, self.name, tracked, known=known, written=self.own
        )
        if self._known is not None:
            metrics.shard_seen(self.namespace, self.name, self._known)
        if wrote:
            self._written = self._known
        return wrote

    def take_written(self) -> Mapping[str, Any] | None:
        """The shard as the last action's status write returned it (None if it wrote nothing), once."""
        written, self._written = self._written, None
        return written

    def known(self, body: Mapping[str, Any]) -> None:
        """The shard as a round just read it: the first write of the round starts from it, not a GET."""
        self._known = self._base = body
        self._written, self._slots, self._pending, self._held_events = None, {}, [], []
        self._pending_step = False  # what an earlier round held and did not write is gone with it
        metrics.shard_seen(self.namespace, self.name, body)

    def event(self, seen: Seen, reason: str, message: str, *, warning: bool = False) -> None:
        """An Event on the shard; posted once the status changes held before it are written."""
        if not seen.shard:
            return
        if self._pending:
            self._held_events.append((seen.shard, reason, message, warning))
        else:
            self._post(seen.shard, reason, message, warning)

    def _post(self, body: Mapping[str, Any], reason: str, message: str, warning: bool) -> None:
        self.events(body, reason, message, warning)
        self.logger.info(f"{reason}: {message}")

    def tell(self, seen: Seen, event: Event) -> None:
        self.event(seen, event.reason, event.message, warning=event.warning)

    async def mark_slot(self, mark: SlotMark, known: Mapping[str, Any] | None = None) -> None:
        """One condition on a KcpSlot; `known`, the slot as the round read it, saves the first GET (or what
        an earlier mark of this round wrote on it, which is newer)."""
        name = names.slot_object_name(self.name, SlotName(mark.slot))
        change = changes.slot_condition(mark.type, mark.status, mark.reason, mark.message, mark.holder)
        start = self._slots.get(name) or known or None
        with contextlib.suppress(NotFound):  # a slot already gone has nothing to mark
            self._slots[name] = await mutate_status(
                self.api, KCPSLOTS, self.namespace, name, change, known=start, written=self.own
            )

    # ----- the shard -------------------------------------------------------------------------------

    async def first_sight(self, seen: Seen) -> None:
        await self._mutate(changes.first_sight(seen.generation))

    async def stall(self, seen: Seen, reason: str, message: str) -> None:
        wrote = await self._mutate(changes.stall(seen.generation, reason, message))
        if wrote:  # the same Stalled again is no news
            self.event(seen, reason, message, warning=True)

    async def hold(self, obs: Observed, reason: str, message: str) -> None:
        if await self._mutate(changes.hold(obs.generation, reason, message)):  # news only when it changed
            self.event(obs, reason, message)

    async def front_restarts_reported(self, obs: Observed, action: ReportFrontRestarts) -> None:
        if await self._mutate(changes.front_restarts_reported(action.total)):
            metrics.front_restarted(self.namespace, self.name, action.new)
            times = "once" if action.new == 1 else f"{action.new} times"
            self.event(
                obs,
                "FrontRestarted",
                f"a process of the front on node {obs.spec.node} (HAProxy or the front agent) died and was "
                f"started again {times} "
                f"({action.total} in all; last: {action.last}); "
                f"see kubectl logs deployment/{names.front_name(obs.name)}",
                warning=True,
            )

    async def steady(self, obs: Observed, message: str) -> None:
        await self._mutate(changes.steady(obs.generation, message))

    async def admin_kubeconfig_published(self, obs: Observed, secret: str, changed: bool) -> None:
        recorded = obs.status.admin_kubeconfig_secret == secret
        if not recorded:
            await self._mutate(changes.admin_secret(secret))
        if changed or not recorded:
            text = f"Secret {secret} holds the kcp-admin kubeconfig of slot {obs.status.active_slot}"
            self.event(obs, "AdminKubeconfigPublished", text)

    # ----- a roll ----------------------------------------------------------------------------------

    async def start_roll(self, obs: Observed, action: StartRoll) -> None:
        await self._mutate(
            changes.start_roll(action.rollout, obs.generation, action.event.message), step=True
        )
        self.tell(obs, action.event)

    async def advance(self, obs: Observed, action: Advance) -> None:
        # The slots' conditions first: an operator stopped between the writes redoes them all. Each mark is
        # on a slot of its own: at once.
        await asyncio.gather(*(self.mark_slot(mark, _slot_body(obs, mark.slot)) for mark in action.marks))
        rollout = _rollout(obs)
        await self._mutate(changes.advance(rollout, action, obs.generation, cond.now_precise()), step=True)
        if action.warning is not None:
            self.event(obs, *action.warning, warning=True)
        self.event(obs, action.step.value, action.message)

    async def flip(self, obs: Observed, action: Flip) -> None:
        await self._mutate(changes.flip(action, obs.generation))
        self.event(obs, "Flip", f"asked the front to serve slot {action.slot.value} on port {action.port}")

    async def request_drain(self, obs: Observed, action: RequestDrain) -> None:
        slot = action.slot.value
        await self._mutate(changes.request_drain(slot, withdraw=action.withdraw))
        text = f"asked the front to close what is left on slot {slot}"
        if action.withdraw:
            text += " and to stop serving it (its kcp stopped listening)"
        self.event(obs, "Drain", text)

    async def finish(self, obs: Observed, action: Finish) -> None:
        """The report as the plan made it, stamped now and measured; the conditions and Event it chose."""
        rollout = _rollout(obs)
        report = measured(action.report, action.to_slot, cond.now_precise())
        await self._mutate(changes.finish(rollout, report, obs.generation, action.verdict))
        metrics.roll_ended(self.namespace, self.name, report.result, report.reason, report.durations)
        self.event(obs, action.event, finished_text(report), warning=action.warning)

    async def abort(self, obs: Observed, action: Abort) -> None:
        await self._end_roll(obs, action.end, action.put_back)

    async def fail(self, obs: Observed, action: Fail) -> None:
        """After the flip (or a failed restore): end the roll, say why, and never flip back."""
        await self._end_roll(obs, action.end)

    async def restore(self, obs: Observed, action: Restore) -> None:
        """Single shape: the old slot is already stopped; its revision starts again in the same place."""
        await self._mutate(changes.restore(action, obs.generation, cond.now_precise()))
        self.tell(obs, action.event)

    async def _end_roll(self, obs: Observed, end: RollEnd, put_back: Record | None = None) -> None:
        """A roll that did not succeed: its report stamped now, the conditions and Events the plan chose."""
        rollout = _rollout(obs)
        report = ended(end.report, cond.now_precise())
        verdict = end.verdict
        await self._mutate(
            changes.end_roll(rollout, report, obs.generation, verdict, put_back, reassert=end.reassert)
        )
        if end.reassert is not None:
            self.event(obs, REASSERT_CONDITION, end.reassert, warning=True)
        metrics.roll_ended(self.namespace, self.name, report.result, report.reason, {})
        self.tell(obs, end.event)


def _slot_body(obs: Observed, slot: str) -> Mapping[str, Any] | None:
    view = obs.slots.get(SlotName(slot))
    return view.body if view is not None else None


def _rollout(obs: Observed) -> RolloutStatus:
    if obs.status.rollout is None:
        raise RuntimeError("no roll under way")
    return obs.status.rollout
