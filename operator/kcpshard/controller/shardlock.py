"""One operator acts on a shard at a time: a coordination.k8s.io Lease per KcpShard.

Two replicas of the operator (a Deployment with `replicas: 2`, or an old pod still terminating beside its
replacement) both run a daemon per shard. kopf's peering would freeze *both* replicas when their priorities
are equal, so each shard's loop takes a Lease of its own, as client-go's leader election does
(`k8s.io/client-go/tools/leaderelection`): whoever holds `kcpshard-<shard>` acts; the other waits until the
holder stops renewing for `lease_seconds`. Every write is resourceVersion-guarded, so two contenders never
both win the same round.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import socket
import uuid
from typing import Any

from kcpshard.api import conditions as cond
from kcpshard.k8s import builders
from kcpshard.k8s.api import LEASES, ApiClient, ApiError, Conflict, NotFound
from kcpshard.k8s.names import lease_name


def default_identity() -> str:
    """`<pod or host>_<uuid>`, like client-go's: unique per process start."""
    host = os.environ.get("POD_NAME") or socket.gethostname()
    return f"{host}_{uuid.uuid4()}"


class ShardLock:
    def __init__(
        self,
        api: ApiClient,
        shard_obj: dict[str, Any],
        identity: str,
        lease_seconds: float,
        logger: logging.Logger | logging.LoggerAdapter[logging.Logger],
    ) -> None:
        self.api = api
        self.namespace = shard_obj["metadata"]["namespace"]
        self.shard = shard_obj["metadata"]["name"]
        self.owner = shard_obj
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.logger = logger
        self.held = False
        self.other: str | None = None  # the other holder, while it holds the lease
        self._renewed_at = 0.0
        self._busy = asyncio.Lock()

    def _body(self, lease: dict[str, Any] | None, now: datetime.datetime) -> dict[str, Any]:
        stamp = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_seconds),
            "renewTime": stamp,
        }
        if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            spec["acquireTime"] = stamp
            spec["leaseTransitions"] = int(((lease or {}).get("spec") or {}).get("leaseTransitions") or 0) + (
                1 if lease else 0
            )
        else:
            spec["acquireTime"] = lease["spec"].get("acquireTime", stamp)
            spec["leaseTransitions"] = lease["spec"].get("leaseTransitions", 0)
        meta: dict[str, Any] = {
            "name": lease_name(self.shard),
            "namespace": self.namespace,
            "labels": builders.labels(self.shard, "lock"),
            "ownerReferences": [builders.owner_reference(self.owner, controller=False)],
        }
        if lease is not None:
            meta["resourceVersion"] = lease["metadata"]["resourceVersion"]
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}

    async def try_acquire(self, *, renew: bool = False) -> bool:
        """Take or renew the lease; False while another live holder has it.

        While held and renewed less than a third of the duration ago, no request (unless `renew`): the
        reconcile loop asks before every round, and the renewer keeps the lease fresh in between. One
        call at a time: the loop and the renewer writing the same resourceVersion at once met a 409 and
        took it for another operator (standing by for a round, measured hundreds of times at 50 shards).
        """
        async with self._busy:
            return await self._try_acquire(renew)

    async def _try_acquire(self, renew: bool) -> bool:
        loop = asyncio.get_running_loop()
        if self.held and not renew and loop.time() - self._renewed_at < self.lease_seconds / 3:
            return True
        now = datetime.datetime.now(datetime.UTC)
        try:
            lease: dict[str, Any] | None = await self.api.get(LEASES, self.namespace, lease_name(self.shard))
        except NotFound:
            lease = None
        try:
            if lease is None:
                await self.api.create(LEASES, self.namespace, self._body(None, now))
            else:
                spec = lease.get("spec") or {}
                holder = spec.get("holderIdentity")
                if holder and holder != self.identity and not _expired(spec, now) and not _same_pod(holder):
                    self._lost(holder)
                    return False
                await self.api.replace(LEASES, self.namespace, lease_name(self.shard), self._body(lease, now))
        except (Conflict, ApiError) as exc:
            if isinstance(exc, Conflict) or exc.status == 409:
                self._lost("another operator")
                return False
            raise
        if not self.held:
            self.logger.info(f"acting on shard {self.namespace}/{self.shard} as {self.identity}")
        self.held, self.other = True, None
        self._renewed_at = loop.time()
        return True

    def _lost(self, holder: str) -> None:
        if self.held or self.other != holder:
            self.logger.info(f"shard {self.namespace}/{self.shard} is handled by {holder}; standing by")
        self.held, self.other = False, holder

    async def renew_forever(self) -> None:
        """Keep the lease fresh while a long step runs (a lease wait or a probe can take minutes)."""
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            if self.held:
                with contextlib.suppress(ApiError, OSError):
                    await self.try_acquire(renew=True)

    async def release(self) -> None:
        """Let a standby replica take over at once instead of after the lease expires."""
        if not self.held:
            return
        with contextlib.suppress(ApiError, OSError):
            lease = await self.api.get(LEASES, self.namespace, lease_name(self.shard))
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = None
                lease["spec"]["leaseDurationSeconds"] = 1
                await self.api.replace(LEASES, self.namespace, lease_name(self.shard), lease)
        self.held = False


def _same_pod(holder: str) -> bool:
    """A holder from this very pod is an earlier run of this container (it restarted): it is gone."""
    pod = os.environ.get("POD_NAME")
    return bool(pod) and holder.rsplit("_", 1)[0] == pod


def _expired(spec: dict[str, Any], now: datetime.datetime) -> bool:
    renewed = spec.get("renewTime") or spec.get("acquireTime")
    if not renewed:
        return True
    duration = float(spec.get("leaseDurationSeconds") or 15)
    return now >= cond.parse_time(renewed) + datetime.timedelta(seconds=duration)
