"""The reconcile loop of one KcpShard: observe, plan one action, carry it out, repeat.

The planning is pure (`kcpshard.roll.plan`); this module only observes through the
API client, carries actions out, and writes what happened to status, conditions
and Events.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

import httpx
import kopf
from pydantic import BaseModel, ValidationError

from kcpshard import metrics
from kcpshard.api import conditions as cond
from kcpshard.api.models import KcpShardSpec, KcpShardStatus, RolloutStatus, RollReport, SlotName
from kcpshard.controller.shardlock import ShardLock, default_identity
from kcpshard.controller.wakeups import Wakeups
from kcpshard.k8s import backup_job, builders
from kcpshard.k8s.api import (
    DEPLOYMENTS,
    JOBS,
    KCPSHARDS,
    KCPSLOTS,
    PODS,
    SECRETS,
    ApiClient,
    ApiError,
    NotFound,
)
from kcpshard.k8s.status import mutate_status
from kcpshard.kcp import flags as kcp_flags
from kcpshard.kcp.client import KcpClient
from kcpshard.kcp.errors import KcpError
from kcpshard.kcp.kubeconfig import shard_admin
from kcpshard.kcp.versions import Version, VersionError
from kcpshard.roll import plan
from kcpshard.roll.revision import revision_of

# Without a wake-up, look again after this long: a safety net, not the driver.
RESYNC_SECONDS = 10.0

PROBE_PREFIX = "kcpshard-probe-"

# kcp renews its controller lease every retry period (2 s, client-go's leaderelection): a holder that
# does not renew within this long is dead.
RENEW_WINDOW_SECONDS = 7.0

# The kcp release that reads identities from the cache server and leaves `identitycache` behind.
IDENTITY_CACHE_RELEASE = Version.parse("v0.33.0")


@dataclass(frozen=True)
class OperatorConfig:
    image: str = builders.DEFAULT_IMAGE
    agent_command: tuple[str, ...] = ("kcpshard",)
    identity: str = ""
    lease_seconds: float = 15.0


class RollFailure(Exception):
    """A step could not finish; reason is CamelCase for the Stalled condition."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class ShardReconciler:
    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        name: str,
        wakeups: Wakeups,
        config: OperatorConfig,
        logger: logging.Logger | logging.LoggerAdapter[logging.Logger],
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.wakeups = wakeups
        self.config = config
        self.logger = logger
        self._body: dict[str, Any] = {}
        self._lock: ShardLock | None = None

    # ----- the loop --------------------------------------------------------------------------

    async def run(self, stopped: asyncio.Event) -> None:
        """Until `stopped` is set (kopf stops the daemon: shard deleted or operator exiting)."""
        renewer: asyncio.Task[None] | None = None
        try:
            while not stopped.is_set():
                try:
                    if not await self._acquire():
                        await self._sleep(stopped, max(self.config.lease_seconds / 3, 0.5))
                        continue
                    if renewer is None and self._lock is not None:
                        renewer = asyncio.create_task(self._lock.renew_forever())
                    timeout = await self.reconcile_once()
                except NotFound as exc:
                    if await self._shard_gone():
                        return
                    self.logger.warning(f"{exc}; looking again")
                    timeout = 1.0
                except ApiError as exc:
                    self.logger.warning(f"API error, retrying: {exc}")
                    timeout = 2.0
                except (KcpError, httpx.HTTPError, OSError) as exc:
                    # kcp or the front is briefly unreachable: the step is idempotent, try it again.
                    self.logger.warning(f"{type(exc).__name__}: {exc}; retrying")
                    timeout = 2.0
                if timeout is not None:
                    await self._sleep(stopped, timeout)
        finally:
            if renewer is not None:
                renewer.cancel()
            if self._lock is not None:
                await self._lock.release()

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

    async def reconcile_once(self) -> float | None:
        """One observe-plan-act round; returns how long to wait, or None to go on at once."""
        observed = await self.observe()
        if observed is None:
            return RESYNC_SECONDS
        # An invalid spec gets no new front: it might contend for another shard's port.
        await self._ensure_shard_objects(observed.spec, create_front=not observed.invalid)
        action = plan.next_action(observed)
        self.logger.debug(f"next action: {action}")
        try:
            return await self.execute(action, observed)
        except RollFailure as failure:
            await self.execute(self._failure_action(failure, observed), observed)
            return None

    @staticmethod
    def _failure_action(failure: RollFailure, obs: plan.Observed) -> plan.Action:
        rollout = obs.status.rollout
        if rollout is None:
            return plan.Stall(failure.reason, failure.message)
        if plan.Step(rollout.step) in plan.POST_FLIP:
            return plan.Fail(failure.reason, failure.message)
        return plan.pre_flip_failure(rollout, failure.reason, failure.message)

    # ----- observing ---------------------------------------------------------------------------

    async def observe(self) -> plan.Observed | None:
        self._body = await self.api.get(KCPSHARDS, self.namespace, self.name)
        meta = self._body["metadata"]
        if meta.get("deletionTimestamp"):
            return None  # the finalizer's handler tears the shard down; start nothing new
        generation = int(meta.get("generation", 1))
        status = KcpShardStatus.model_validate(self._body.get("status") or {})
        if not status.conditions:
            await self._first_sight(generation)
        try:
            spec = KcpShardSpec.model_validate(self._body.get("spec") or {})
        except ValidationError as exc:
            await self._stall("InvalidSpec", _validation_message(exc), None, generation=generation)
            return None
        slots, busy = await self._observe_slots()
        invalid = [*kcp_flags.validate(spec), *await self._front_conflicts(spec)]
        rollout = status.rollout
        backup = None
        if rollout is not None and rollout.step == plan.Step.BACKING_UP.value:
            backup = await self._observe_backup(rollout)
        return plan.Observed(
            spec=spec,
            generation=generation,
            status=status,
            revision=revision_of(spec),
            now=datetime.datetime.now(datetime.UTC),
            slots=slots,
            busy=busy,
            invalid=tuple(invalid),
            retry_token=(meta.get("annotations") or {}).get(plan.RETRY_ANNOTATION),
            backup=backup,
            name=self.name,
        )

    async def _front_conflicts(self, spec: KcpShardSpec) -> list[str]:
        """Another KcpShard already fronts the same node and port: the younger one stalls."""
        try:
            shards = await self.api.list(KCPSHARDS, None)
        except ApiError:  # no cluster-wide list (a namespaced operator): look in our namespace
            shards = await self.api.list(KCPSHARDS, self.namespace)
        mine = self._body["metadata"]
        my_key = (mine.get("creationTimestamp") or "", self.namespace, self.name)
        out = []
        for other in shards.get("items", []):
            meta, other_spec = other["metadata"], other.get("spec") or {}
            if meta.get("uid") == mine.get("uid") or meta.get("deletionTimestamp"):
                continue
            front = other_spec.get("front") or {}
            if other_spec.get("node") != spec.node or front.get("port") != spec.front.port:
                continue
            addresses = {front.get("address", "127.0.0.1"), spec.front.address}
            if len(addresses) > 1 and not addresses & {"0.0.0.0", "::"}:
                continue
            if (meta.get("creationTimestamp") or "", meta["namespace"], meta["name"]) < my_key:
                out.append(
                    f"front port {spec.front.port} on node {spec.node} is already used by KcpShard "
                    f"{meta['namespace']}/{meta['name']}: choose another spec.front.port"
                )
        return out

    async def _observe_slots(self) -> tuple[dict[SlotName, plan.SlotView], dict[SlotName, int]]:
        """The slots as their KcpSlots, Jobs and pods show them, and the live pods per slot name."""
        selector = f"{builders.LABEL_SHARD}={self.name}"
        slot_list = await self.api.list(KCPSLOTS, self.namespace, label_selector=selector)
        job_list = await self.api.list(
            JOBS, self.namespace, label_selector=f"{selector},{builders.LABEL_COMPONENT}=slot"
        )
        jobs = {job["metadata"]["name"]: job for job in job_list.get("items", [])}
        pod_list = await self.api.list(
            PODS, self.namespace, label_selector=f"{selector},{builders.LABEL_COMPONENT}=slot"
        )
        live_pods: dict[str, int] = {}
        for pod in pod_list.get("items", []):
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                pod_labels = pod["metadata"].get("labels", {})
                key = f"{pod_labels.get(builders.LABEL_SLOT)}/{pod_labels.get(builders.LABEL_REVISION)}"
                live_pods[key] = live_pods.get(key, 0) + 1
        busy = {
            slot: sum(n for key, n in live_pods.items() if key.startswith(f"{slot.value}/"))
            for slot in SlotName
        }
        views: dict[SlotName, plan.SlotView] = {}
        for obj in slot_list.get("items", []):
            spec, status = obj.get("spec", {}), obj.get("status") or {}
            slot = SlotName(spec["slot"])
            job = jobs.get(
                builders.slot_job_name(self.name, slot, spec["revision"], int(spec.get("start", 0)))
            )
            views[slot] = plan.SlotView(
                name=slot,
                revision=spec["revision"],
                start=int(spec.get("start", 0)),
                roll_id=spec.get("roll"),
                conditions=tuple(status.get("conditions") or ()),
                port=status.get("port"),
                exited_at=status.get("exitedAt"),
                exit_code=status.get("exitCode"),
                started_at=status.get("startedAt"),
                ready_at=status.get("readyAt"),
                deleting=bool(obj["metadata"].get("deletionTimestamp")),
                job=_job_view(job) if job else None,
                live_pods=live_pods.get(f"{slot.value}/{spec['revision']}", 0),
            )
        return views, busy

    async def _observe_backup(self, rollout: RolloutStatus) -> plan.BackupView | None:
        name = _backup_job_name(self.name, rollout)
        try:
            job = await self.api.get(JOBS, self.namespace, name)
        except NotFound:
            return None
        result = backup_job.backup_result(job)
        if isinstance(result, str):
            return plan.BackupView(name, error=result)
        if result is None and _job_view(job).failed:
            why = _job_view(job).message or "its pod failed"
            return plan.BackupView(name, error=f"{why}; see kubectl logs job/{name}")
        return plan.BackupView(name, report=result)

    # ----- acting ------------------------------------------------------------------------------

    async def execute(self, action: plan.Action, obs: plan.Observed) -> float | None:
        handler = self._handlers().get(type(action))
        if handler is None:
            raise TypeError(f"no handler for {action!r}")
        return await handler(action, obs)

    def _handlers(self) -> dict[type, Callable[[Any, plan.Observed], Awaitable[float | None]]]:
        return {
            plan.Steady: self._steady,
            plan.Stall: self._stall_action,
            plan.StartRoll: self._start_roll,
            plan.Advance: self._advance,
            plan.StartBackup: self._start_backup,
            plan.CreateSlot: self._create_slot,
            plan.DeleteSlot: self._delete_slot,
            plan.Flip: self._flip,
            plan.StopSlot: self._stop_slot,
            plan.KillSlot: self._kill_slot,
            plan.HandOverLease: self._hand_over_lease,
            plan.Probe: self._probe,
            plan.RequestDrain: self._request_drain,
            plan.Finish: self._finish,
            plan.Abort: self._abort,
            plan.Restore: self._restore,
            plan.Fail: self._fail,
            plan.Wait: self._wait,
        }

    async def _steady(self, action: plan.Steady, obs: plan.Observed) -> float | None:
        status = obs.status
        await self._publish_admin_kubeconfig(obs)
        message = (
            f"slot {status.active_slot} serves revision {status.active_revision} (kcp {obs.spec.kcp.version})"
        )
        await self._set_shard_conditions(
            obs.generation,
            ready=("True", "Serving", message),
            reconciling=("False", "Idle", ""),
            stalled=("False", "Healthy", ""),
            observed_generation=obs.generation,
        )
        return RESYNC_SECONDS

    async def _stall_action(self, action: plan.Stall, obs: plan.Observed) -> float | None:
        await self._stall(action.reason, action.message, obs)
        return RESYNC_SECONDS

    async def _wait(self, action: plan.Wait, obs: plan.Observed) -> float | None:
        if action.until is None:
            return RESYNC_SECONDS
        remaining = (action.until - obs.now).total_seconds()
        return max(min(remaining, RESYNC_SECONDS), 0.05)

    async def _start_roll(self, action: plan.StartRoll, obs: plan.Observed) -> float | None:
        rollout = action.rollout
        if rollout.from_slot:
            # The lease holder before anything changes is, for sure, not the new slot: the handover waits
            # for a holder other than this one.
            holder = await self._current_holder(obs.spec)
            if holder:
                rollout = rollout.model_copy(update={"from_holder": holder})
        if action.recovery:
            what = (
                f"slot {rollout.from_slot} (revision {rollout.from_revision}) stopped while serving; "
                f"starting its revision again on slot {rollout.to_slot}"
            )
        elif rollout.from_slot and rollout.shape == "Single":
            what = (
                f"rolling slot {rollout.from_slot} ({rollout.from_revision}) in place, Single shape: "
                "the old process stops first (planned outage)"
            )
        elif rollout.from_slot:
            what = (
                f"rolling from slot {rollout.from_slot} ({rollout.from_revision}) to slot {rollout.to_slot}"
            )
        else:
            what = f"starting the first slot {rollout.to_slot}"
        message = f"{what} (revision {rollout.target_revision})"

        def change(status: dict[str, Any]) -> dict[str, Any] | None:
            if status.get("rollout"):
                return None  # someone (a previous run of ours) started it already
            status["rollout"] = _dump(rollout)
            return _with_conditions(status, obs.generation, _progressing(message))

        await self._mutate(change)
        metrics.roll_started(self.namespace, self.name)
        self._event("SlotLost" if action.recovery else "RollStarted", message, warning=action.recovery)
        return None

    async def _advance(self, action: plan.Advance, obs: plan.Observed) -> float | None:
        rollout = _require_rollout(obs)
        at = cond.now_precise()
        left = plan.Step(rollout.step)
        stamp = plan.LEAVE_STAMP.get(left)

        def change(status: dict[str, Any]) -> dict[str, Any] | None:
            current = status.get("rollout")
            if not current or current.get("step") != rollout.step:
                return None  # already advanced
            current["step"] = action.step.value
            current["stepStartedAt"] = at
            stamps = current.setdefault("timestamps", {})
            if stamp:
                stamps[stamp] = at
            if action.step is plan.Step.STARTING:
                stamps.setdefault("slotStarting", at)
            if action.backup is not None:
                current["backup"] = _dump(action.backup)
            if left is plan.Step.FLIPPING and not rollout.restoring and rollout.target_spec:
                status["activeSpec"] = rollout.target_spec
            text = f"{action.message}; next: {action.step.value}"
            return _with_conditions(status, obs.generation, _progressing(text))

        if left is plan.Step.FLIPPING:
            # The slots' conditions first: an operator stopped between the two writes redoes both.
            await self._set_slot_condition(rollout.to_slot, "Flipped", "True", "FrontServes", action.message)
            if rollout.from_slot and rollout.from_slot != rollout.to_slot:
                moved = f"the front serves slot {rollout.to_slot}"
                await self._set_slot_condition(rollout.from_slot, "Flipped", "False", "FrontMovedOn", moved)
        await self._mutate(change)
        self._event(action.step.value, action.message)
        if left is plan.Step.FLIPPING:
            await self._publish_admin_kubeconfig(obs)
        return None

    async def _start_backup(self, action: plan.StartBackup, obs: plan.Observed) -> float | None:
        rollout = _require_rollout(obs)
        try:
            job = backup_job.backup_job(
                self._body,
                obs.spec,
                revision=rollout.target_revision,
                attempt=0,
                image=self.config.image,
                agent_command=self.config.agent_command,
                name=_backup_job_name(self.name, rollout),
            )
        except ValueError as exc:
            raise RollFailure("BackupFailed", str(exc)) from exc
        try:
            await self.api.create(JOBS, self.namespace, job)
        except ApiError as exc:
            if exc.status != 409:
                raise
        self._event("BackingUp", f"saving the store before the roll (Job {job['metadata']['name']})")
        return None

    def _slot_spec(self, obs: plan.Observed, rollout: RolloutStatus) -> KcpShardSpec:
        """What the new slot runs: the spec recorded when the roll started (or the old one, restoring)."""
        raw = obs.status.active_spec if rollout.restoring else rollout.target_spec
        if not raw:
            return obs.spec
        return KcpShardSpec.model_validate(raw)

    async def _create_slot(self, action: plan.CreateSlot, obs: plan.Observed) -> float | None:
        rollout = _require_rollout(obs)
        spec = self._slot_spec(obs, rollout)
        start = max(action.start, await self._next_start(action.slot, action.revision))
        body = builders.kcpslot(self._body, action.slot, action.revision, start, roll_id=rollout.id)
        name = body["metadata"]["name"]
        try:
            slot_obj = await self.api.create(KCPSLOTS, self.namespace, body)
        except ApiError as exc:
            if exc.status != 409:
                raise
            slot_obj = await self.api.get(KCPSLOTS, self.namespace, name)
        job = builders.slot_job(
            self._body, spec, slot_obj, image=self.config.image, agent_command=self.config.agent_command
        )
        try:
            await self.api.create(JOBS, self.namespace, job)
        except ApiError as exc:
            if exc.status != 409:
                raise
        self._event("SlotCreated", f"created slot {action.slot.value} (Job {job['metadata']['name']})")
        return None

    async def _next_start(self, slot: SlotName, revision: str) -> int:
        """A start counter no Job of this slot and revision has used: a Job of an earlier slot
        object may still be terminating (garbage collection is not instant), and the new slot
        must never meet it under the same name."""
        jobs = await self.api.list(JOBS, self.namespace, label_selector=self._slot_selector(slot, revision))
        starts = [int(j["metadata"].get("labels", {}).get(builders.LABEL_START, 0)) for j in jobs["items"]]
        return max(starts) + 1 if starts else 0

    def _slot_selector(self, slot: SlotName, revision: str | None = None) -> str:
        pairs = [
            (builders.LABEL_SHARD, self.name),
            (builders.LABEL_COMPONENT, "slot"),
            (builders.LABEL_SLOT, slot.value),
        ]
        if revision is not None:
            pairs.append((builders.LABEL_REVISION, revision))
        return ",".join(f"{key}={value}" for key, value in pairs)

    async def _delete_slot(self, action: plan.DeleteSlot, obs: plan.Observed) -> float | None:
        slot = obs.slots.get(action.slot)
        if slot is not None and slot.deleting:
            return RESYNC_SECONDS  # on its way out; its deletion event wakes us
        name = builders.slot_object_name(self.name, action.slot)
        with contextlib.suppress(NotFound):
            await self.api.delete(KCPSLOTS, self.namespace, name, propagation_policy="Background")
        self._event("SlotDeleted", f"deleted slot {action.slot.value}: {action.why}")
        return None

    async def _flip(self, action: plan.Flip, obs: plan.Observed) -> float | None:
        rollout = _require_rollout(obs)
        revision = plan.expected_revision(rollout)

        # The new active record and the front's desired backend go in one write:
        # the record never lags behind what the front is asked to serve.
        def change(status: dict[str, Any]) -> dict[str, Any] | None:
            status["activeSlot"] = action.slot.value
            status["activeRevision"] = revision
            front = status.setdefault("front", {})
            front["desiredBackend"] = action.slot.value
            front["desiredPort"] = action.port
            front.pop("drain", None)
            return status

        await self._mutate(change)
        self._event("Flip", f"asked the front to serve slot {action.slot.value} on port {action.port}")
        return None

    async def _stop_slot(self, action: plan.StopSlot, obs: plan.Observed) -> float | None:
        # The lease holder was recorded when the roll started, before any new slot ran. Reading it
        # here instead could record the new slot (it may have taken a free lease) as the stale one.
        slot = obs.slots[action.slot]
        if slot.job is not None:
            with contextlib.suppress(NotFound):
                await self.api.delete(JOBS, self.namespace, slot.job.name, propagation_policy="Background")
        self._event("StoppingOld", f"stopping slot {action.slot.value} (SIGTERM, then kcp's shutdown delay)")
        return None

    async def _kill_slot(self, action: plan.KillSlot, obs: plan.Observed) -> float | None:
        slot = obs.slots[action.slot]
        pods = await self.api.list(
            PODS, self.namespace, label_selector=self._slot_selector(action.slot, slot.revision)
        )
        for pod in pods.get("items", []):
            with contextlib.suppress(NotFound):
                await self.api.delete(PODS, self.namespace, pod["metadata"]["name"], grace_period_seconds=0)
        self._event(
            "SlotKilled",
            f"slot {action.slot.value} did not exit within {obs.spec.roll.stop_timeout_seconds}s of SIGTERM; "
            "deleted its pod at once (SIGKILL)",
            warning=True,
        )
        return RESYNC_SECONDS

    async def _hand_over_lease(self, action: plan.HandOverLease, obs: plan.Observed) -> float | None:
        rollout = _require_rollout(obs)
        timeout = max((action.deadline - obs.now).total_seconds(), 0.1)
        async with await self._kcp(obs.spec) as kcp:
            lease = await kcp.get_lease()
            new_holder = _new_holder(lease, rollout)
            if new_holder is None and lease is not None and rollout.from_holder is None:
                # Nobody was recorded: the holder is the new kcp if it is alive (the old slot has exited).
                new_holder = await _renewing_holder(kcp, lease, min(RENEW_WINDOW_SECONDS, timeout / 2))
            if new_holder is None:
                # Held by a process from before this roll's slot (or by nobody): free it for the new one.
                stale = ((lease or {}).get("spec") or {}).get("holderIdentity") or rollout.from_holder
                if lease is not None:
                    await kcp.delete_lease()
                try:
                    new_holder = await kcp.wait_for_holder(stale, timeout=timeout)
                except KcpError as exc:
                    raise RollFailure(
                        "LeaseTimeout",
                        f"no new holder of kcp's controller lease within {timeout:.0f}s ({exc}); kcp's "
                        f"controllers are not running: see kubectl logs job/{_job_of(obs, rollout.to_slot)}",
                    ) from exc
        message = f"controller lease held by {new_holder}"
        await self._set_slot_condition(
            rollout.to_slot, "LeaseHandedOver", "True", "NewHolder", message, holder=new_holder
        )
        return await self._advance(plan.Advance(plan.Step.PROBING, message), obs)

    async def _probe(self, action: plan.Probe, obs: plan.Observed) -> float | None:
        rollout = _require_rollout(obs)
        timeout = max((action.deadline - obs.now).total_seconds(), 0.1)
        prefix = f"{PROBE_PREFIX}{rollout.target_revision[:8]}"
        async with await self._kcp(obs.spec) as kcp:
            # An operator stopped during an earlier probe left its workspace behind: remove it first.
            for leftover in await kcp.delete_workspaces(PROBE_PREFIX):
                self.logger.info(f"deleted the leftover probe workspace {leftover}")
            try:
                result = await kcp.probe(prefix, timeout=timeout)
            except KcpError as exc:
                raise RollFailure(
                    "ProbeFailed",
                    f"the probe workspace did not become Ready within {timeout:.0f}s ({exc}); the shard "
                    "serves, but its controllers do not work: see kcp's logs",
                ) from exc
            await self._clean_identity_cache(kcp, obs, rollout)
        message = f"workspace {result.name} became Ready in {result.ready_seconds:.2f}s and was deleted"
        await self._set_slot_condition(rollout.to_slot, "Probed", "True", "WorkspaceReady", message)
        nxt = plan.Step.DRAINING if rollout.from_slot else plan.Step.RETIRING
        return await self._advance(plan.Advance(nxt, message), obs)

    async def _clean_identity_cache(self, kcp: KcpClient, obs: plan.Observed, rollout: RolloutStatus) -> None:
        """A non-root shard on v0.33 or later no longer uses `identitycache`: delete it if still there.

        Level-based rather than tied to the crossing roll, so a crossing roll that failed after the flip
        is cleaned up by the next one; once deleted it stays gone, so this happens once.
        """
        spec = self._slot_spec(obs, rollout)
        if spec.shard.root:
            return
        try:
            newer = Version.parse(spec.kcp.version) >= IDENTITY_CACHE_RELEASE
        except VersionError:
            return
        if newer and await kcp.delete_configmap("system:shard", "default", "identitycache"):
            self._event(
                "IdentityCacheDeleted",
                f"deleted the stale identitycache ConfigMap of system:shard (kcp {spec.kcp.version} reads "
                "identities from the cache server)",
            )

    async def _request_drain(self, action: plan.RequestDrain, obs: plan.Observed) -> float | None:
        def change(status: dict[str, Any]) -> dict[str, Any] | None:
            status.setdefault("front", {})["drain"] = action.slot.value
            return status

        await self._mutate(change)
        self._event("Drain", f"asked the front to close what is left on slot {action.slot.value}")
        return None

    def _report(self, rollout: RolloutStatus, result: str, message: str, **extra: Any) -> RollReport:
        return RollReport(
            result=result,
            fromSlot=rollout.from_slot,
            toSlot=rollout.to_slot,
            fromRevision=rollout.from_revision,
            toRevision=rollout.target_revision,
            shape=rollout.shape,
            backup=rollout.backup,
            retryToken=rollout.retry_token,
            recovery=rollout.recovery,
            message=message,
            **extra,
        )

    async def _finish(self, action: plan.Finish, obs: plan.Observed) -> float | None:
        rollout = _require_rollout(obs)
        at = cond.now_precise()
        timestamps = {**rollout.timestamps, "finished": at}
        to_slot = obs.slots.get(SlotName(rollout.to_slot))
        spans = plan.durations(timestamps)
        durations = spans | _slot_durations(to_slot, spans)
        if rollout.backup is not None:
            durations["backupJob"] = round(rollout.backup.seconds, 3)
        ready: tuple[cond.Status, str, str]
        reconciling: tuple[cond.Status, str, str]
        stalled: tuple[cond.Status, str, str]
        if rollout.restoring:
            why = rollout.failure_message or "the new revision failed"
            message = f"{why}; {action.message}"
            report = self._report(
                rollout,
                "RolledBack",
                message,
                reason=rollout.failure_reason,
                timestamps=timestamps,
                durations=durations,
            )
            shown = plan.stall_message(report, rollout.to_slot, rollout.from_revision, self.name)
            ready = ("False", rollout.failure_reason or "RollFailed", shown)
            stalled = ("True", rollout.failure_reason or "RollFailed", shown)
            reconciling = ("False", "RolledBack", "")
        else:
            report = self._report(
                rollout, "Succeeded", action.message, timestamps=timestamps, durations=durations
            )
            ready = ("True", "Serving", action.message)
            stalled = ("False", "Healthy", "")
            reconciling = ("False", "RollSucceeded", "")

        def change(status: dict[str, Any]) -> dict[str, Any] | None:
            if not status.get("rollout"):
                return None
            status.pop("rollout", None)
            status["lastRoll"] = _dump(report)
            if rollout.restoring:
                status["failedRoll"] = _dump(report)
            elif not rollout.recovery:
                status.pop("failedRoll", None)  # a roll that succeeded; a recovery proves nothing new
            status["observedGeneration"] = rollout.target_generation or obs.generation
            if status.get("front"):
                status["front"].pop("drain", None)
            return _with_conditions(
                status, obs.generation, ready=ready, reconciling=reconciling, stalled=stalled
            )

        await self._mutate(change)
        metrics.roll_finished(self.namespace, self.name, report.result, report.durations)
        metrics.stalled(self.namespace, self.name, rollout.restoring)
        total = report.durations.get("total")
        outage = report.durations.get("outage")
        text = f"{report.message} in {total}s" if total is not None else report.message
        if outage is not None:
            text += f" (planned outage {outage}s)"
        self._event(
            "RollSucceeded" if not rollout.restoring else "RolledBack", text, warning=rollout.restoring
        )
        return None

    async def _abort(self, action: plan.Abort, obs: plan.Observed) -> float | None:
        rollout = _require_rollout(obs)
        to = SlotName(rollout.to_slot)
        old = obs.slots.get(SlotName(rollout.from_slot)) if rollout.from_slot else None

        def put_back(status: dict[str, Any]) -> None:
            if status.get("activeSlot") != rollout.to_slot or rollout.from_slot == rollout.to_slot:
                return
            # The flip was asked for but not confirmed: put the previous record and backend back.
            front = status.setdefault("front", {})
            if rollout.from_slot and old is not None and old.port:
                status["activeSlot"], status["activeRevision"] = rollout.from_slot, rollout.from_revision
                front["desiredBackend"], front["desiredPort"] = rollout.from_slot, old.port
            else:
                for key in ("activeSlot", "activeRevision"):
                    status.pop(key, None)
                for key in ("desiredBackend", "desiredPort"):
                    front.pop(key, None)

        await self._end_roll(
            obs,
            "Aborted",
            action.reason,
            action.message,
            "RollAborted",
            (rollout.from_slot, rollout.from_revision),
            put_back,
        )
        if to in obs.slots and rollout.from_slot != rollout.to_slot:
            with contextlib.suppress(NotFound):
                await self.api.delete(
                    KCPSLOTS,
                    self.namespace,
                    builders.slot_object_name(self.name, to),
                    propagation_policy="Background",
                )
        return None

    async def _restore(self, action: plan.Restore, obs: plan.Observed) -> float | None:
        """Single shape: the old slot is already stopped; start its revision again in the same place."""
        rollout = _require_rollout(obs)
        holder = await self._current_holder(obs.spec)  # the failed process's, if it led: not the restored one
        at = cond.now_precise()
        message = f"{action.message}; starting the old revision {rollout.from_revision} again"

        def change(status: dict[str, Any]) -> dict[str, Any] | None:
            current = status.get("rollout")
            if not current or current.get("restoring"):
                return None
            current.update(
                restoring=True,
                failureReason=action.reason,
                failureMessage=action.message,
                step=plan.Step.STARTING.value,
                stepStartedAt=at,
            )
            if holder:
                current["fromHolder"] = holder
            current.setdefault("timestamps", {})["restoreStarted"] = at
            return _with_conditions(status, obs.generation, _progressing(message))

        await self._mutate(change)
        self._event(action.reason, message, warning=True)
        return None

    async def _fail(self, action: plan.Fail, obs: plan.Observed) -> float | None:
        """After the flip (or a failed restore): end the roll, say why, and never flip back."""
        serving = (obs.status.active_slot, obs.status.active_revision)
        await self._end_roll(obs, "Failed", action.reason, action.message, "RollFailed", serving)
        return None

    async def _end_roll(
        self,
        obs: plan.Observed,
        result: str,
        reason: str,
        why: str,
        reconciling: str,
        serving: tuple[str | None, str | None],
        also: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        """A roll that did not succeed: its report, Stalled with what serves and what to do, an Event."""
        rollout = _require_rollout(obs)
        stamps = {**rollout.timestamps, result.lower(): cond.now_precise()}
        report = self._report(rollout, result, why, reason=reason, timestamps=stamps)
        message = plan.stall_message(report, *serving, self.name)

        def change(status: dict[str, Any]) -> dict[str, Any] | None:
            if not status.get("rollout"):
                return None
            if also is not None:
                also(status)
            status.pop("rollout", None)
            status["lastRoll"] = status["failedRoll"] = _dump(report)
            status["observedGeneration"] = rollout.target_generation or obs.generation
            return _with_conditions(
                status,
                obs.generation,
                ready=("False", reason, message),
                reconciling=("False", reconciling, ""),
                stalled=("True", reason, message),
            )

        await self._mutate(change)
        metrics.roll_finished(self.namespace, self.name, report.result, {})
        metrics.stalled(self.namespace, self.name, True)
        self._event(reason, message, warning=True)

    # ----- helpers -----------------------------------------------------------------------------

    async def _publish_admin_kubeconfig(self, obs: plan.Observed) -> None:
        """Copy the serving slot's kcp-admin kubeconfig (new token on every kcp start) for consumers."""
        active = obs.status.active_slot
        if not active:
            return
        source = f"{builders.slot_object_name(self.name, SlotName(active))}-kcp-admin"
        try:
            slot_secret = await self.api.get(SECRETS, self.namespace, source)
        except NotFound:
            return  # its host agent publishes it once the slot is ready; a later round copies it
        data = (slot_secret.get("data") or {}).get("kubeconfig")
        if not data:
            return
        wanted = builders.admin_kubeconfig_secret(self._body, data)
        name = wanted["metadata"]["name"]
        try:
            current = await self.api.get(SECRETS, self.namespace, name)
        except NotFound:
            await self.api.create(SECRETS, self.namespace, wanted)
        else:
            if (current.get("data") or {}).get("kubeconfig") == data:
                if obs.status.admin_kubeconfig_secret == name:
                    return
            else:
                wanted["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                await self.api.replace(SECRETS, self.namespace, name, wanted)
        if obs.status.admin_kubeconfig_secret != name:

            def change(status: dict[str, Any]) -> dict[str, Any] | None:
                status["adminKubeconfigSecret"] = name
                return status

            await self._mutate(change)
        self._event(
            "AdminKubeconfigPublished", f"Secret {name} holds the kcp-admin kubeconfig of slot {active}"
        )

    async def _stall(
        self, reason: str, message: str, obs: plan.Observed | None, *, generation: int | None = None
    ) -> None:
        gen = generation if generation is not None else (obs.generation if obs else None)
        already: dict[str, bool] = {"same": False}

        def change(status: dict[str, Any]) -> dict[str, Any] | None:
            stalled = cond.find(status.get("conditions"), "Stalled")
            if stalled and stalled.get("status") == "True" and stalled.get("message") == message:
                already["same"] = True
                return None
            if gen is not None and not status.get("rollout"):
                status["observedGeneration"] = gen
            return _with_conditions(
                status,
                gen,
                ready=("False", reason, message),
                reconciling=("False", reason, ""),
                stalled=("True", reason, message),
            )

        await self._mutate(change)
        metrics.stalled(self.namespace, self.name, True)
        if not already["same"]:
            self._event(reason, message, warning=True)

    async def _first_sight(self, generation: int) -> None:
        def change(status: dict[str, Any]) -> dict[str, Any] | None:
            if status.get("conditions"):
                return None
            status["conditions"] = cond.set_condition(
                [], "Ready", "Unknown", "Observed", "seen by the operator", observed_generation=generation
            )
            return status

        await self._mutate(change)

    async def _set_shard_conditions(
        self,
        generation: int,
        *,
        ready: tuple[cond.Status, str, str],
        reconciling: tuple[cond.Status, str, str],
        stalled: tuple[cond.Status, str, str],
        observed_generation: int | None = None,
    ) -> None:
        def change(status: dict[str, Any]) -> dict[str, Any] | None:
            if observed_generation is not None:
                status["observedGeneration"] = observed_generation
            return _with_conditions(status, generation, ready=ready, reconciling=reconciling, stalled=stalled)

        await self._mutate(change)

    async def _set_slot_condition(
        self,
        slot: str,
        type_: str,
        status_: cond.Status,
        reason: str,
        message: str,
        *,
        holder: str | None = None,
    ) -> None:
        name = builders.slot_object_name(self.name, SlotName(slot))

        def change(status: dict[str, Any]) -> dict[str, Any] | None:
            status["conditions"] = cond.set_condition(
                status.get("conditions"), type_, status_, reason, message
            )
            if holder:
                status["holderIdentity"] = holder
            return status

        with contextlib.suppress(NotFound):  # a slot already gone has nothing to mark
            await mutate_status(self.api, KCPSLOTS, self.namespace, name, change)

    async def _mutate(self, fn: Callable[[dict[str, Any]], dict[str, Any] | None]) -> None:
        self._body = await mutate_status(self.api, KCPSHARDS, self.namespace, self.name, fn)

    async def _ensure_shard_objects(self, spec: KcpShardSpec, *, create_front: bool = True) -> None:
        """The shared-material Secret and the front Deployment exist for every shard."""
        secret = builders.shared_secret(self._body, spec)
        try:
            await self.api.create(SECRETS, self.namespace, secret)
        except ApiError as exc:
            if exc.status != 409:
                raise
        front = builders.front_deployment(
            self._body, spec, image=self.config.image, agent_command=self.config.agent_command
        )
        try:
            current = await self.api.get(DEPLOYMENTS, self.namespace, front["metadata"]["name"])
        except NotFound:
            if not create_front:
                return
            await self.api.create(DEPLOYMENTS, self.namespace, front)
            self._event("FrontCreated", f"created the front on {spec.front.address}:{spec.front.port}")
            return
        wanted = front["metadata"]["annotations"][builders.TEMPLATE_HASH]
        changed = (current["metadata"].get("annotations") or {}).get(builders.TEMPLATE_HASH) != wanted
        if changed and create_front:
            front["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            await self.api.replace(DEPLOYMENTS, self.namespace, front["metadata"]["name"], front)
            self._event("FrontUpdated", f"updated the front for {spec.front.address}:{spec.front.port}")

    async def _kcp(self, spec: KcpShardSpec) -> KcpClient:
        secret = await self.api.get(SECRETS, self.namespace, builders.shared_secret_name(self.name))
        raw = (secret.get("data") or {}).get("admin.kubeconfig")
        if not raw:
            raise RollFailure(
                "NoRootMaterial", f"Secret {builders.shared_secret_name(self.name)} has no admin.kubeconfig"
            )
        admin = shard_admin(base64.b64decode(raw))
        return KcpClient(kcp_flags.front_url(spec), admin.ca_pem, admin.token)

    async def _current_holder(self, spec: KcpShardSpec) -> str | None:
        try:
            async with await self._kcp(spec) as kcp:
                lease = await kcp.get_lease()
        except KcpError as exc:
            self.logger.warning(f"could not read kcp's controller lease: {exc}")
            return None
        return (lease or {}).get("spec", {}).get("holderIdentity")

    def _event(self, reason: str, message: str, *, warning: bool = False) -> None:
        if not self._body:
            return
        body = cast(kopf.Body, self._body)  # kopf only reads apiVersion, kind and metadata of it
        if warning:
            kopf.warn(body, reason=reason, message=message)
        else:
            kopf.info(body, reason=reason, message=message)
        self.logger.info(f"{reason}: {message}")


# ----- pure helpers ------------------------------------------------------------------------------


def _dump(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def _require_rollout(obs: plan.Observed) -> RolloutStatus:
    if obs.status.rollout is None:
        raise RuntimeError("no roll under way")
    return obs.status.rollout


def _progressing(message: str) -> dict[str, tuple[cond.Status, str, str]]:
    return {
        "ready": ("False", "Progressing", message),
        "reconciling": ("True", "Progressing", message),
        "stalled": ("False", "Progressing", ""),
    }


def _with_conditions(
    status: dict[str, Any],
    generation: int | None,
    progressing: dict[str, tuple[cond.Status, str, str]] | None = None,
    *,
    ready: tuple[cond.Status, str, str] | None = None,
    reconciling: tuple[cond.Status, str, str] | None = None,
    stalled: tuple[cond.Status, str, str] | None = None,
) -> dict[str, Any]:
    wanted = dict(progressing or {})
    for key, value in (("ready", ready), ("reconciling", reconciling), ("stalled", stalled)):
        if value is not None:
            wanted[key] = value
    conditions = status.get("conditions") or []
    for key, (state, reason, message) in wanted.items():
        conditions = cond.set_condition(
            conditions, key.capitalize(), state, reason, message, observed_generation=generation
        )
    status["conditions"] = conditions
    return status


def _job_view(job: dict[str, Any]) -> plan.JobView:
    status = job.get("status") or {}
    failed = cond.find(status.get("conditions"), "Failed")
    message = ""
    if failed is not None and failed.get("status") == "True":
        message = f"{failed.get('reason', '')}: {failed.get('message', '')}".strip(": ")
    return plan.JobView(
        name=job["metadata"]["name"],
        active=int(status.get("active") or 0),
        succeeded=int(status.get("succeeded") or 0),
        failed=int(status.get("failed") or 0),
        deleting=bool(job["metadata"].get("deletionTimestamp")),
        message=message,
    )


async def _renewing_holder(kcp: KcpClient, lease: dict[str, Any], window: float) -> str | None:
    """The lease's holder if it renews the lease within `window` seconds (it is alive), else None."""
    spec = lease.get("spec") or {}
    holder, renewed = spec.get("holderIdentity"), spec.get("renewTime")
    deadline = asyncio.get_running_loop().time() + window
    while holder and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.25)
        now_spec = ((await kcp.get_lease()) or {}).get("spec") or {}
        if now_spec.get("holderIdentity") != holder:
            return None
        if now_spec.get("renewTime") != renewed:
            return str(holder)
    return None


def _new_holder(lease: dict[str, Any] | None, rollout: RolloutStatus) -> str | None:
    """The lease's holder if it is, for sure, the new slot's kcp; None otherwise.

    Another holder than the one recorded when the roll started is new. With none recorded (the old kcp
    was already dead, or this is the first slot), a holder is new only if it renewed after the old slot
    exited (or the roll started): a dead kcp's lease stays until it expires, and must not pass for new.
    """
    spec = (lease or {}).get("spec") or {}
    holder = spec.get("holderIdentity")
    if not holder or holder == rollout.from_holder:
        return None
    if rollout.from_holder is not None:
        return str(holder)
    renewed = spec.get("renewTime") or spec.get("acquireTime")
    since = rollout.timestamps.get("oldExited") or rollout.started_at
    if renewed and cond.parse_time(renewed) > cond.parse_time(since):
        return str(holder)
    return None


def _backup_job_name(shard: str, rollout: RolloutStatus) -> str:
    return f"{shard}-backup-{rollout.id or rollout.target_revision}"


def _job_of(obs: plan.Observed, slot: str) -> str:
    view = obs.slots.get(SlotName(slot))
    return view.job.name if view is not None and view.job is not None else f"<{slot} slot's Job>"


def _slot_durations(slot: plan.SlotView | None, spans: dict[str, float]) -> dict[str, float]:
    """What the kcp process itself took, as its host agent saw it, and the operator's share: the rest.

    The operator's share is the total less the time spent waiting on kcp: the new process
    from start to ready, the old one's exit (its shutdown delay), the lease pick-up and the probe.
    """
    out: dict[str, float] = {}
    if slot is not None and slot.started_at and slot.ready_at:
        delta = cond.parse_time(slot.ready_at) - cond.parse_time(slot.started_at)
        out["kcpStartToReady"] = round(delta.total_seconds(), 3)
    if "total" in spans and "kcpStartToReady" in out:
        waited = out["kcpStartToReady"] + sum(
            spans.get(k, 0.0) for k in ("oldExit", "leaseHandover", "probe")
        )
        out["operatorShare"] = round(max(spans["total"] - waited, 0.0), 3)
    return out


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors()[:5]:
        where = ".".join(str(p) for p in error["loc"])
        parts.append(f"spec.{where}: {error['msg']}")
    return "; ".join(parts)
