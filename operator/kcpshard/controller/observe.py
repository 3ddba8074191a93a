"""The observing part of a round: reads only, and returns everything a decision needs.

Nothing here writes (the layer test holds it to that): status on first sight or for an invalid spec is
the plan's decision and the status writer's job, like every other write.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from kcpshard.api.annotations import ABORT, PROMOTE, REASSERT
from kcpshard.api.models import KcpShardSpec, KcpShardStatus, RolloutStatus, SlotName
from kcpshard.controller.config import OperatorConfig
from kcpshard.controller.kcp_access import KcpConnect, NoRootMaterial, lease_reading
from kcpshard.controller.shard_index import ShardIndex
from kcpshard.controller.workload_views import front_availability, front_pod_view, job_view, node_not_ready
from kcpshard.k8s import backup_job, builders, front_workload, names
from kcpshard.k8s.api import (
    DEPLOYMENTS,
    JOBS,
    KCPSHARDS,
    KCPSLOTS,
    NODES,
    PODS,
    SECRETS,
    ApiClient,
    ApiError,
    NotFound,
    ResourceRef,
)
from kcpshard.kcp import flags as kcp_flags
from kcpshard.kcp.errors import KcpError
from kcpshard.roll.actions import Step
from kcpshard.roll.observed import (
    BackupView,
    FrontWorkload,
    LeaseReading,
    Observed,
    RootShardView,
    ShardOnly,
    SlotView,
)
from kcpshard.roll.report import RETRY_ANNOTATION
from kcpshard.roll.revision import revision_of
from kcpshard.roll.rollout import backup_job_name

Logger = logging.Logger | logging.LoggerAdapter[logging.Logger]


class Observer:
    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        name: str,
        config: OperatorConfig,
        index: ShardIndex,
        connect: KcpConnect,
        logger: Logger,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.config = config
        self.index = index
        self.connect = connect
        self.logger = logger

    async def observe(self) -> Observed | ShardOnly:
        # What does not depend on the shard's spec is read beside the shard itself: a round costs one round
        # trip, not two. (A shard being deleted or with a bad spec wastes these reads; that is rare.)
        beside = asyncio.gather(
            self._observe_slots(),
            self._exists(SECRETS, names.shared_secret_name(self.name)),
            self._get_or_none(DEPLOYMENTS, names.front_name(self.name)),
        )
        try:
            body = await self.api.get(KCPSHARDS, self.namespace, self.name)
            parsed = self._parse_shard(body)
        except BaseException:
            _discard(beside)
            raise
        if isinstance(parsed, ShardOnly):
            _discard(beside)
            return parsed
        spec, seen = parsed
        rollout = seen["status"].rollout
        (slots, busy, starts), shared_secret, deployment = await beside
        # These read only in some states: a non-root shard's root, a backup, a front that is not available.
        backup, root_shard, front = await asyncio.gather(
            self._observe_backup(rollout)
            if rollout is not None and rollout.step == Step.BACKING_UP.value
            else _none(),
            self._root_shard(spec),
            self._front(body, spec, deployment),
        )
        return Observed(
            spec=spec,
            revision=revision_of(spec),
            now=datetime.datetime.now(datetime.UTC),
            created=str(body["metadata"].get("creationTimestamp") or ""),
            slots=slots,
            busy=busy,
            job_starts=starts,
            backup=backup,
            neighbours=self.index.neighbours(self.namespace, self.name, spec),
            root_shard=root_shard,
            shared_secret=shared_secret,
            **front,
            **seen,
        )

    def with_shard(self, obs: Observed, body: Mapping[str, Any]) -> Observed | None:
        """The round's observation with the shard as our own status write just returned it, so the plan
        can go on without reading everything again: a status write changes none of the other objects.
        None when the write shows more than a status change (a new spec, a deletion): observe again."""
        parsed = self._parse_shard(body)
        if isinstance(parsed, ShardOnly) or parsed[1]["generation"] != obs.generation:
            return None
        return replace(obs, now=datetime.datetime.now(datetime.UTC), kcp_lease=None, **parsed[1])

    def _parse_shard(self, body: Mapping[str, Any]) -> tuple[KcpShardSpec, dict[str, Any]] | ShardOnly:
        """The shard's own fields of an observation; a ShardOnly when it is being deleted or its spec does
        not parse."""
        meta = body["metadata"]
        annotations = meta.get("annotations") or {}
        status = KcpShardStatus.model_validate(body.get("status") or {})
        seen: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "generation": int(meta.get("generation", 1)),
            "status": status,
            "retry_token": annotations.get(RETRY_ANNOTATION),
            "reassert_token": annotations.get(REASSERT),
            "promote_token": annotations.get(PROMOTE),
            "abort_token": annotations.get(ABORT),
            "shard": body,
        }
        if meta.get("deletionTimestamp"):
            return ShardOnly(deleting=True, **seen)  # the finalizer's handler tears the shard down
        try:
            spec = KcpShardSpec.model_validate(body.get("spec") or {})
        except ValidationError as exc:
            return ShardOnly(spec_error=validation_message(exc, "spec"), **seen)
        rollout = status.rollout
        target_spec, target_error = _parse_spec(rollout.target_spec if rollout else None, "targetSpec")
        active_spec, _ = _parse_spec(status.active_spec, "activeSpec")
        seen |= {"target_spec": target_spec, "target_spec_error": target_error, "active_spec": active_spec}
        return spec, seen

    async def read_kcp_lease(self, obs: Observed, url: str) -> Observed:
        """The same observation with kcp's controller lease, read through the front at `url`."""
        try:
            async with await self.connect(url) as kcp:
                reading = lease_reading(await kcp.get_lease())
        except (KcpError, NoRootMaterial, NotFound) as exc:
            self.logger.warning(f"could not read kcp's controller lease: {exc}")
            reading = LeaseReading(error=str(exc))
        return replace(obs, kcp_lease=reading)

    async def _root_shard(self, spec: KcpShardSpec) -> RootShardView | None:
        """The root shard a non-root shard names, and the kcp version it serves (one read)."""
        ref = spec.shard.root_shard_ref
        if spec.shard.root or ref is None:
            return None
        try:
            root = await self.api.get(KCPSHARDS, self.namespace, ref.name)
        except NotFound:
            return RootShardView(ref.name, found=False)
        active = (root.get("status") or {}).get("activeSpec") or {}
        version = (active.get("kcp") or {}).get("version")
        served, _ = _parse_spec(active or root.get("spec"), "activeSpec")
        return RootShardView(
            ref.name,
            found=True,
            serving_version=version if isinstance(version, str) else None,
            front_url=kcp_flags.front_url(served) if served is not None else None,
        )

    async def _exists(self, ref: ResourceRef, name: str) -> bool:
        return await self._get_or_none(ref, name) is not None

    async def _get_or_none(self, ref: ResourceRef, name: str) -> dict[str, Any] | None:
        try:
            return await self.api.get(ref, self.namespace, name)
        except NotFound:
            return None

    async def _front(
        self, body: dict[str, Any], spec: KcpShardSpec, current: dict[str, Any] | None
    ) -> dict[str, Any]:
        """The front Deployment (`current`, as read) against the one this spec and this operator's image ask
        for, and whether it is available (its pods read only when it is not, to say why)."""
        if current is None:
            return {"front": FrontWorkload.ABSENT}
        wanted = front_workload.front_deployment(
            body, spec, image=self.config.image, agent_command=self.config.agent_command
        )
        want = wanted["metadata"]["annotations"][builders.TEMPLATE_HASH]
        have = (current["metadata"].get("annotations") or {}).get(builders.TEMPLATE_HASH)
        availability = front_availability(current)
        if not availability.available or availability.replacing_since is not None:
            selector = names.component_selector(self.name, "front")
            pods = (await self.api.list(PODS, self.namespace, label_selector=selector)).get("items") or []
            availability = replace(availability, pods=tuple(front_pod_view(p) for p in pods))
        if not availability.available:
            availability = replace(availability, node_down=await self._node_down(spec.node))
        return {
            "front": FrontWorkload.CURRENT if have == want else FrontWorkload.STALE,
            "front_availability": availability,
        }

    async def _node_down(self, node: str) -> str | None:
        """Why the shard's node is not Ready, from its own `Ready` condition; None while it is, when it does
        not exist (the front's pod is Pending, and FrontFailed says to check the node), or when it cannot
        be read (an operator installed without the right to get nodes)."""
        try:
            found = await self.api.get(NODES, None, node)
        except ApiError as exc:
            if exc.status not in (403, 404):
                raise
            return None
        return node_not_ready(found)

    async def _observe_slots(
        self,
    ) -> tuple[dict[SlotName, SlotView], dict[SlotName, tuple[str, ...]], dict[tuple[SlotName, str], int]]:
        """The slots as their KcpSlots, Jobs and pods show them; the live pods per slot name; the
        highest start counter of the Jobs per slot and revision."""
        selector = f"{names.LABEL_SHARD}={self.name}"
        workload = names.component_selector(self.name, "slot")
        slot_list, job_list, pod_list = await asyncio.gather(
            self.api.list(KCPSLOTS, self.namespace, label_selector=selector),
            self.api.list(JOBS, self.namespace, label_selector=workload),
            self.api.list(PODS, self.namespace, label_selector=workload),
        )
        jobs = {job["metadata"]["name"]: job for job in job_list.get("items", [])}
        starts: dict[tuple[SlotName, str], int] = {}
        for job in jobs.values():
            key = _slot_key(job)
            if key is not None:
                start = int(job["metadata"]["labels"].get(names.LABEL_START, 0))
                starts[key] = max(starts.get(key, start), start)
        live: dict[tuple[SlotName, str], list[str]] = {}
        for pod in pod_list.get("items", []):
            key = _slot_key(pod)
            if key is not None and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                live.setdefault(key, []).append(pod["metadata"]["name"])
        busy = {
            slot: tuple(sorted(n for k, p in live.items() if k[0] is slot for n in p)) for slot in SlotName
        }
        views: dict[SlotName, SlotView] = {}
        for obj in slot_list.get("items", []):
            spec, status = obj.get("spec", {}), obj.get("status") or {}
            slot, start = SlotName(spec["slot"]), int(spec.get("start", 0))
            job = jobs.get(names.slot_job_name(self.name, slot, spec["revision"], start))
            views[slot] = SlotView(
                name=slot,
                revision=spec["revision"],
                start=start,
                roll_id=spec.get("roll"),
                conditions=tuple(status.get("conditions") or ()),
                port=status.get("port"),
                exited_at=status.get("exitedAt"),
                exit_code=status.get("exitCode"),
                started_at=status.get("startedAt"),
                ready_at=status.get("readyAt"),
                deleting=bool(obj["metadata"].get("deletionTimestamp")),
                job=job_view(job) if job else None,
                pods=tuple(sorted(live.get((slot, spec["revision"]), ()))),
                body=obj,
            )
        return views, busy, starts

    async def _observe_backup(self, rollout: RolloutStatus) -> BackupView | None:
        name = backup_job_name(self.name, rollout)
        try:
            job = await self.api.get(JOBS, self.namespace, name)
        except NotFound:
            return None
        result = backup_job.backup_result(job)
        if isinstance(result, str):
            return BackupView(name, error=result)
        if result is None and job_view(job).failed:
            why = job_view(job).message or "its pod failed"
            return BackupView(name, error=f"{why}; see kubectl logs job/{name}")
        return BackupView(name, report=result)


def without_slot(obs: Observed, slot: str) -> Observed:
    """The observation with a KcpSlot the round deleted taken out (its pods, in `busy`, may still run)."""
    return replace(obs, slots={name: view for name, view in obs.slots.items() if name.value != slot})


def validation_message(exc: ValidationError, prefix: str) -> str:
    parts = []
    for error in exc.errors()[:5]:
        where = ".".join(str(p) for p in error["loc"])
        parts.append(f"{prefix}.{where}: {error['msg']}")
    return "; ".join(parts)


def _parse_spec(raw: Mapping[str, Any] | None, where: str) -> tuple[KcpShardSpec | None, str | None]:
    """A spec recorded in status, parsed once; (None, why) when it does not parse."""
    if not raw:
        return None, None
    try:
        return KcpShardSpec.model_validate(raw), None
    except ValidationError as exc:
        return None, validation_message(exc, f"status.{where}")


async def _none() -> None:
    return None


def _discard(reads: asyncio.Future[Any]) -> None:
    """Reads started for a round that ends early: cancelled, and whatever they raised dropped (not
    logged by asyncio as an exception never retrieved)."""
    reads.cancel()
    reads.add_done_callback(lambda done: done.cancelled() or done.exception())


def _slot_key(obj: Mapping[str, Any]) -> tuple[SlotName, str] | None:
    """The slot name and revision a Job or pod of a slot carries in its labels."""
    labels = obj["metadata"].get("labels") or {}
    slot, revision = labels.get(names.LABEL_SLOT), labels.get(names.LABEL_REVISION)
    if slot not in ("a", "b") or not revision:
        return None
    return SlotName(slot), revision
