"""The reconcile loop of one KcpShard: observe, plan one action, carry it out, repeat.

A round reads (`observe`), asks the pure plan (`kcpshard.roll.plan`) for one action, and carries it
out (`dispatch`: the act handlers and the status writer). When the action's handler saw something the
roll depends on, the plan is asked again with that outcome, within the same round; so it is after an
action that only wrote the shard's status (a step begun), from the status the write returned. Only the
holder of the shard's own Lease acts (two operator replicas).
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial

import httpx

from kcpshard import metrics, retry
from kcpshard.controller.act.context import ActContext
from kcpshard.controller.config import OperatorConfig
from kcpshard.controller.dispatch import Dispatcher
from kcpshard.controller.kcp_access import KcpConnect, connector
from kcpshard.controller.observe import Observer, without_slot
from kcpshard.controller.shard_index import ShardIndex
from kcpshard.controller.shardlock import ShardLock, default_identity
from kcpshard.controller.status_writer import EventSink, StatusWriter, kopf_event
from kcpshard.controller.wakeups import Wakeups
from kcpshard.k8s.api import KCPSHARDS, ApiClient, ApiError, NotFound
from kcpshard.kcp.errors import KcpError
from kcpshard.roll import plan
from kcpshard.roll.actions import RESYNC_SECONDS, ReadKcpLease
from kcpshard.roll.observed import Observed
from kcpshard.roll.outcomes import Outcome, SlotGone

Logger = logging.Logger | logging.LoggerAdapter[logging.Logger]

# A round carries out one action and the few that follow from what its handler saw or its status write
# began (the lease read, freed and handed over, the probe, the drain, the retirement: seven in a row at
# most): never more than this many.
MAX_ACTIONS_PER_ROUND = 10
# After rounds failed in a row on errors that may pass: 1, 2, 4 .. 30 s. Those errors: 409, 429, 5xx (a
# refusal of an action stalls the shard instead: see dispatch), kcp or the front briefly unreachable.
ROUND_BACKOFF = retry.Backoff(1.0, 30.0)
ROUND_PASSES = retry.kinds(ApiError, KcpError, httpx.HTTPError, OSError)


class ShardReconciler:
    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        name: str,
        wakeups: Wakeups,
        config: OperatorConfig,
        logger: Logger,
        *,
        index: ShardIndex | None = None,
        events: EventSink = kopf_event,
        connect: KcpConnect | None = None,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.wakeups = wakeups
        self.config = config
        self.logger = logger
        connect = connect or connector(api, namespace, name)
        self.observer = Observer(api, namespace, name, config, index or ShardIndex(), connect, logger)
        writer = StatusWriter(api, namespace, name, logger, events, own=partial(wakeups.own, namespace, name))

        def kcp_of(shard: str) -> KcpConnect:
            return connector(api, namespace, shard)

        context = ActContext(api, namespace, name, config, connect, logger, kcp_of)
        self.dispatcher = Dispatcher(context, writer)
        self._lock: ShardLock | None = None

    async def run(self, stopped: asyncio.Event) -> None:
        """Until `stopped` is set (kopf stops the daemon: shard deleted or operator exiting)."""
        renewer: asyncio.Task[None] | None = None
        failures = 0  # rounds failed in a row
        try:
            while not stopped.is_set():
                try:
                    if not await self._acquire():
                        metrics.forget(self.namespace, self.name)  # another replica reports it
                        await self._sleep(stopped, max(self.config.lease_seconds / 3, 0.5))
                        continue
                    if renewer is None and self._lock is not None:
                        renewer = asyncio.create_task(self._lock.renew_forever())
                    timeout = await self.reconcile_once()
                    failures = 0
                except NotFound as exc:
                    if await self._shard_gone():
                        return
                    self.logger.warning(f"{exc}; looking again")
                    timeout = 1.0
                except Exception as exc:
                    if stopped.is_set() or self.api.closed:
                        # The operator is exiting (its client closed under a round): the next holder of the
                        # shard's lease redoes the round; nothing here is an error.
                        self.logger.info(f"stopped during a round ({type(exc).__name__})")
                        return
                    if not ROUND_PASSES(exc):
                        raise
                    # Every step is idempotent: the round is simply done again.
                    failures += 1
                    timeout = ROUND_BACKOFF.delay(failures)
                    self.logger.warning(f"{type(exc).__name__}: {exc}; retrying in {timeout:g}s")
                if timeout is not None:
                    await self._sleep(stopped, timeout)
        finally:
            if renewer is not None:
                renewer.cancel()
            metrics.forget(self.namespace, self.name)
            if self._lock is not None and not self.api.closed:
                await self._lock.release()

    async def reconcile_once(self) -> float | None:
        """One round; returns how long to wait, or None to go on at once."""
        obs = await self.observer.observe()
        self.dispatcher.writer.known(obs.shard)
        outcome: Outcome | None = None  # what the last handler saw: the plan decides what follows
        for _ in range(MAX_ACTIONS_PER_ROUND):
            action = plan.next_action(obs, outcome)
            self.logger.debug(f"next action: {action}")
            if isinstance(action, ReadKcpLease):
                assert isinstance(obs, Observed)  # a shard read alone asks for nothing more
                obs = await self.observer.read_kcp_lease(obs, action.url)
                continue
            writer = self.dispatcher.writer
            held = plan.status_only(action)  # written with what follows it
            if not held:
                await writer.flush()  # what the round recorded is written before anything else acts
            with writer.holding(held):
                after, outcome = outcome, await self.dispatcher.carry_out(action, obs)
            written = writer.take_written()
            if isinstance(outcome, SlotGone):
                # The round's own delete: it plans on without that slot, as the next observation would show.
                assert isinstance(obs, Observed)  # a slot is deleted only on a full observation
                obs = without_slot(obs, outcome.slot)
                outcome = None
                continue
            if outcome is None and written is not None and plan.goes_on_after_write(action, after):
                # A step written: its action follows at once, from the status the write returned.
                assert isinstance(obs, Observed)
                follow = self.observer.with_shard(obs, written)
                if follow is not None:
                    obs = follow
                    continue
            if outcome is None:
                await writer.flush()
                return plan.pause(action, obs)
        await self.dispatcher.writer.flush()
        self.logger.warning(f"more than {MAX_ACTIONS_PER_ROUND} actions in one round; observing again")
        return RESYNC_SECONDS

    async def _acquire(self) -> bool:
        """Hold the shard's own Lease: with two operator replicas, only the holder acts."""
        if self._lock is None:
            body = await self.api.get(KCPSHARDS, self.namespace, self.name)
            identity = self.config.identity or default_identity()
            self._lock = ShardLock(self.api, body, identity, self.config.lease_seconds, self.logger)
        return await self._lock.try_acquire()

    async def _sleep(self, stopped: asyncio.Event, timeout: float) -> None:
        """Until a wake-up, the timeout, or the stop: whichever comes first."""
        waits = {
            asyncio.create_task(self.wakeups.wait(self.namespace, self.name, timeout)),
            asyncio.create_task(stopped.wait()),
        }
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()

    async def _shard_gone(self) -> bool:
        try:
            await self.api.get(KCPSHARDS, self.namespace, self.name)
        except NotFound:
            return True
        return False
