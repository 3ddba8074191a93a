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
from pydantic import ValidationError

from kcpshard import metrics
from kcpshard.api import conditions as cond
from kcpshard.api.models import KcpShardSpec, KcpShardStatus, RolloutStatus, RollReport, SlotName
from kcpshard.controller.wakeups import Wakeups
from kcpshard.k8s import builders
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
from kcpshard.roll import plan
from kcpshard.roll.revision import revision_of

# Without a wake-up, look again after this long: a safety net, not the driver.
RESYNC_SECONDS = 10.0

# The report timestamp written when a roll enters each step.
_ENTER_STAMP = {
    plan.Step.WAITING_READY: "slotCreated",
    plan.Step.FLIPPING: "ready",
    plan.Step.STOPPING_OLD: "flipped",
    plan.Step.HANDING_OVER_LEASE: "oldExited",
    plan.Step.DRAINING: "probed",
    plan.Step.RETIRING: "drained",
}


@dataclass(frozen=True)
class OperatorConfig:
    image: str = builders.DEFAULT_IMAGE
    agent_command: tuple[str, ...] = ("kcpshard",)


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

    # ----- the loop --------------------------------------------------------------------------

    async def run(self, stopped: asyncio.Event) -> None:
        """Until `stopped` is set (kopf stops the daemon: shard deleted or operator exiting)."""
        while not stopped.is_set():
            try:
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
        await self._ensure_shard_objects(observed.spec)
        action = plan.next_action(observed)
        self.logger.debug(f"next action: {action}")
        try:
            return await self.execute(action, observed)
        except RollFailure as failure:
            await self._stall(failure.reason, failure.message, observed)
            return RESYNC_SECONDS

    # ----- observing ---------------------------------------------------------------------------

    async def observe(self) -> plan.Observed | None:
        self._body = await self.api.get(KCPSHARDS, self.namespace, self.name)
        generation = int(self._body["metadata"].get("generation", 1))
        status = KcpShardStatus.model_validate(self._body.get("status") or {})
        if not status.conditions:
            await self._first_sight(generation)
        try:
            spec = KcpShardSpec.model_validate(self._body.get("spec") or {})
        except ValidationError as exc:
            await self._stall("InvalidSpec", _validation_message(exc), None, generation=generation)
            return None
        slots = await self._observe_slots()
        return plan.Observed(
            spec=spec,
            generation=generation,
            status=status,
            revision=revision_of(spec),
            now=datetime.datetime.now(datetime.UTC),
            slots=slots,
            invalid=tuple(kcp_flags.validate(spec)),
        )

    async def _observe_slots(self) -> dict[SlotName, plan.SlotView]:
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
        return views

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
            plan.CreateSlot: self._create_slot,
            plan.DeleteSlot: self._delete_slot,
            plan.Flip: self._flip,
            plan.StopSlot: self._stop_slot,
            plan.HandOverLease: self._hand_over_lease,
            plan.Probe: self._probe,
            plan.RequestDrain: self._request_drain,
            plan.Finish: self._finish,
            plan.Abort: self._abort,
            plan.Wait: self._wait,
        }

    async def _steady(self, action: plan.Steady, obs: plan.Observed) -> float | None:
        status = obs.status
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
            what = (
                f"rolling from slot {rollout.from_slot} ({rollout.from_revision}) to slot {rollout.to_slot}"
            )
        else:
            what = f"starting the first slot {rollout.to_slot}"
        message = f"{what} (revision {rollout.target_revision}, kcp {obs.spec.kcp.version})"

        def change(status: dict[str, Any]) -> dict[str, Any] | None:
            if status.get("rollout"):
                return None  # someone (a previous run of ours) started it already
            status["rollout"] = _dump(rollout)
            return _with_conditions(status, obs.generation, _progressing(message))

        await self._mutate(change)
        metrics.roll_started(self.namespace, self.name)
        self._event("RollStarted", message)
        return None

    async def _advance(self, action: plan.Advance, obs: plan.Observed) -> float | None:
        rollout = _require_rollout(obs)
        at = cond.now_precise()
        stamp = _ENTER_STAMP.get(action.step)
        if action.step is plan.Step.PROBING:
            stamp = "leaseHandedOver" if rollout.from_slot else "flipped"

        def change(status: dict[str, Any]) -> dict[str, Any] | None:
            current = status.get("rollout")
            if not current or current.get("step") != rollout.step:
                return None  # already advanced
            current["step"] = action.step.value
            current["stepStartedAt"] = at
            if stamp:
                current.setdefault("timestamps", {})[stamp] = at
            text = f"{action.message}; next: {action.step.value}"
            return _with_conditions(status, obs.generation, _progressing(text))

        await self._mutate(change)
        self._event(action.step.value, action.message)
        if rollout.step == plan.Step.FLIPPING.value:
            await self._set_slot_condition(rollout.to_slot, "Flipped", "True", "FrontServes", action.message)
            if rollout.from_slot:
                moved = f"the front serves slot {rollout.to_slot}"
                await self._set_slot_condition(rollout.from_slot, "Flipped", "False", "FrontMovedOn", moved)
        return None

    async def _create_slot(self, action: plan.CreateSlot, obs: plan.Observed) -> float | None:
        start = max(action.start, await self._next_start(action.slot, action.revision))
        body = builders.kcpslot(self._body, action.slot, action.revision, start)
        name = body["metadata"]["name"]
        try:
            slot_obj = await self.api.create(KCPSLOTS, self.namespace, body)
        except ApiError as exc:
            if exc.status != 409:
                raise
            slot_obj = await self.api.get(KCPSLOTS, self.namespace, name)
        job = builders.slot_job(
            self._body, obs.spec, slot_obj, image=self.config.image, agent_command=self.config.agent_command
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
        selector = ",".join(
            f"{key}={value}"
            for key, value in (
                (builders.LABEL_SHARD, self.name),
                (builders.LABEL_SLOT, slot.value),
                (builders.LABEL_REVISION, revision),
            )
        )
        jobs = await self.api.list(JOBS, self.namespace, label_selector=selector)
        starts = [int(j["metadata"].get("labels", {}).get(builders.LABEL_START, 0)) for j in jobs["items"]]
        return max(starts) + 1 if starts else 0

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

        # The new active record and the front's desired backend go in one write:
        # the record never lags behind what the front is asked to serve.
        def change(status: dict[str, Any]) -> dict[str, Any] | None:
            status["activeSlot"] = action.slot.value
            status["activeRevision"] = rollout.target_revision
            front = status.setdefault("front", {})
            front["desiredBackend"] = action.slot.value
            front["desiredPort"] = action.port
            front.pop("drain", None)
            return status

        await self._mutate(change)
        self._event("Flip", f"asked the front to serve slot {action.slot.value} on port {action.port}")
        return None

    async def _stop_slot(self, action: plan.StopSlot, obs: plan.Observed) -> float | None:
        rollout = _require_rollout(obs)
        if rollout.from_holder is None:
            holder = await self._current_holder(obs.spec)
            if holder:

                def change(status: dict[str, Any]) -> dict[str, Any] | None:
                    current = status.get("rollout") or {}
                    if current.get("fromHolder"):
                        return None
                    current["fromHolder"] = holder
                    return status

                await self._mutate(change)
        slot = obs.slots[action.slot]
        if slot.job is not None:
            with contextlib.suppress(NotFound):
                await self.api.delete(JOBS, self.namespace, slot.job.name, propagation_policy="Background")
        self._event("StoppingOld", f"stopping slot {action.slot.value} (SIGTERM, then kcp's shutdown delay)")
        return None

    async def _hand_over_lease(self, action: plan.HandOverLease, obs: plan.Observed) -> float | None:
        rollout = _require_rollout(obs)
        timeout = max((action.deadline - obs.now).total_seconds(), 0.1)
        async with await self._kcp(obs.spec) as kcp:
            lease = await kcp.get_lease()
            holder = (lease or {}).get("spec", {}).get("holderIdentity")
            stale = rollout.from_holder
            if lease is not None and holder is not None and holder != stale:
                new_holder = holder  # the new slot took it already (or we did this before a restart)
            else:
                if lease is not None:
                    await kcp.delete_lease()
                try:
                    new_holder = await kcp.wait_for_holder(stale, timeout=timeout)
                except KcpError as exc:
                    raise RollFailure("LeaseTimeout", f"no new leader within {timeout:.0f}s: {exc}") from exc
        message = f"controller lease held by {new_holder}"
        await self._set_slot_condition(
            rollout.to_slot, "LeaseHandedOver", "True", "NewHolder", message, holder=new_holder
        )
        return await self._advance(plan.Advance(plan.Step.PROBING, message), obs)

    async def _probe(self, action: plan.Probe, obs: plan.Observed) -> float | None:
        rollout = _require_rollout(obs)
        timeout = max((action.deadline - obs.now).total_seconds(), 0.1)
        prefix = f"kcpshard-probe-{rollout.target_revision[:8]}"
        async with await self._kcp(obs.spec) as kcp:
            try:
                result = await kcp.probe(prefix, timeout=timeout)
            except KcpError as exc:
                raise RollFailure("ProbeFailed", f"probe workspace did not become Ready: {exc}") from exc
        message = f"workspace {result.name} became Ready in {result.ready_seconds:.2f}s and was deleted"
        await self._set_slot_condition(rollout.to_slot, "Probed", "True", "WorkspaceReady", message)
        return await self._advance(plan.Advance(plan.Step.DRAINING, message), obs)

    async def _request_drain(self, action: plan.RequestDrain, obs: plan.Observed) -> float | None:
        def change(status: dict[str, Any]) -> dict[str, Any] | None:
            status.setdefault("front", {})["drain"] = action.slot.value
            return status

        await self._mutate(change)
        self._event("Drain", f"asked the front to close what is left on slot {action.slot.value}")
        return None

    async def _finish(self, action: plan.Finish, obs: plan.Observed) -> float | None:
        rollout = _require_rollout(obs)
        at = cond.now_precise()
        timestamps = {**rollout.timestamps, "finished": at}
        to_slot = obs.slots.get(SlotName(rollout.to_slot))
        spans = plan.durations(timestamps)
        report = RollReport(
            result="Succeeded",
            fromSlot=rollout.from_slot,
            toSlot=rollout.to_slot,
            fromRevision=rollout.from_revision,
            toRevision=rollout.target_revision,
            shape=rollout.shape,
            timestamps=timestamps,
            durations=spans | _slot_durations(to_slot, spans),
            message=action.message,
        )

        def change(status: dict[str, Any]) -> dict[str, Any] | None:
            if not status.get("rollout"):
                return None
            status.pop("rollout", None)
            status["lastRoll"] = _dump(report)
            status["observedGeneration"] = rollout.target_generation or obs.generation
            if status.get("front"):
                status["front"].pop("drain", None)
            return _with_conditions(
                status,
                obs.generation,
                ready=("True", "Serving", action.message),
                reconciling=("False", "RollSucceeded", ""),
                stalled=("False", "Healthy", ""),
            )

        await self._mutate(change)
        metrics.roll_finished(self.namespace, self.name, report.result, report.durations)
        metrics.stalled(self.namespace, self.name, False)
        total = report.durations.get("total")
        self._event("RollSucceeded", f"{action.message} in {total}s" if total is not None else action.message)
        return None

    async def _abort(self, action: plan.Abort, obs: plan.Observed) -> float | None:
        rollout = _require_rollout(obs)
        to = SlotName(rollout.to_slot)
        if to in obs.slots:
            with contextlib.suppress(NotFound):
                await self.api.delete(
                    KCPSLOTS,
                    self.namespace,
                    builders.slot_object_name(self.name, to),
                    propagation_policy="Background",
                )
        report = RollReport(
            result="Aborted",
            fromSlot=rollout.from_slot,
            toSlot=rollout.to_slot,
            fromRevision=rollout.from_revision,
            toRevision=rollout.target_revision,
            shape=rollout.shape,
            timestamps={**rollout.timestamps, "aborted": cond.now_precise()},
            message=action.message,
        )
        serving = (
            f"slot {rollout.from_slot} keeps serving revision {rollout.from_revision}; "
            if rollout.from_slot
            else ""
        )
        message = f"{serving}roll aborted: {action.message}"

        def change(status: dict[str, Any]) -> dict[str, Any] | None:
            status.pop("rollout", None)
            status["lastRoll"] = _dump(report)
            status["observedGeneration"] = rollout.target_generation or obs.generation
            return _with_conditions(
                status,
                obs.generation,
                ready=("False", action.reason, message),
                reconciling=("False", "RollAborted", ""),
                stalled=("True", action.reason, message),
            )

        await self._mutate(change)
        metrics.roll_finished(self.namespace, self.name, report.result, {})
        metrics.stalled(self.namespace, self.name, True)
        self._event(action.reason, message, warning=True)
        return None

    # ----- helpers -----------------------------------------------------------------------------

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

    async def _ensure_shard_objects(self, spec: KcpShardSpec) -> None:
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
            await self.api.create(DEPLOYMENTS, self.namespace, front)
            self._event("FrontCreated", f"created the front on {spec.front.address}:{spec.front.port}")
            return
        wanted = front["metadata"]["annotations"][builders.TEMPLATE_HASH]
        if (current["metadata"].get("annotations") or {}).get(builders.TEMPLATE_HASH) != wanted:
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
            self.logger.warning(f"could not read the controller lease before stopping the old slot: {exc}")
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


def _dump(model: RolloutStatus | RollReport) -> dict[str, Any]:
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
    return plan.JobView(
        name=job["metadata"]["name"],
        active=int(status.get("active") or 0),
        succeeded=int(status.get("succeeded") or 0),
        failed=int(status.get("failed") or 0),
        deleting=bool(job["metadata"].get("deletionTimestamp")),
    )


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
