"""Leader election for the controllers, on the lease `kube-system/kcp-controllers` in `system:admin`.

Imitates `pkg/server/server.go` (`leaderElectAndStartControllers`: identity `<hostname>_<uuid>` new per
start, lease 60 s, renew deadline 5 s, retry 2 s, no release on exit, re-run election after losing it) and
`k8s.io/client-go/tools/leaderelection/leaderelection.go` (`acquire` with JitterUntil(retry, 1.2),
`renew` polling every retry period until the renew deadline, `tryAcquireOrRenew` judging expiry by the
*locally observed* time of the last record change, not by the lease's renewTime; updates are
compare-and-swap on resourceVersion).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import random
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from kcpshard_testkit.fakekcp import klog
from kcpshard_testkit.fakekcp.etcdstore import AlreadyExists, Conflict, EtcdStore, NotFound, Obj, StoreError
from kcpshard_testkit.fakekcp.resources import Resource

LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)
LEASE_CLUSTER = "system:admin"
LEASE_NAMESPACE = "kube-system"
LEASE_NAME = "kcp-controllers"
LEASE_KEY = LEASES.key(LEASE_CLUSTER, LEASE_NAMESPACE, LEASE_NAME)
DESC = f"{LEASE_NAMESPACE}/{LEASE_NAME}"
JITTER_FACTOR = 1.2


def micro_time(t: dt.datetime) -> str:
    """metav1.MicroTime's RFC3339 with microseconds."""
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4()}"


@dataclass
class Timings:
    lease_duration: float = 60.0
    renew_deadline: float = 5.0
    retry_period: float = 2.0


class LeaderElector:
    """Runs election forever; `is_leader` is true only while holding a renewed lease."""

    def __init__(
        self,
        store: EtcdStore,
        identity: str,
        timings: Timings,
        on_started: Callable[[], None] | None = None,
        on_stopped: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.identity = identity
        self.t = timings
        self.on_started = on_started
        self.on_stopped = on_stopped
        self.is_leader = False
        self._observed_raw: str | None = None
        self._observed_spec: Obj = {}
        self._observed_time = 0.0

    def _loop_time(self) -> float:
        return asyncio.get_running_loop().time()

    def _record(self, acquire_time: str, transitions: int) -> Obj:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.t.lease_duration) or 1,
            "acquireTime": acquire_time,
            "renewTime": micro_time(dt.datetime.now(dt.UTC)),
            "leaseTransitions": transitions,
        }

    def _observe(self, spec: Obj) -> None:
        raw = json.dumps(spec, sort_keys=True)
        if raw != self._observed_raw:
            self._observed_raw = raw
            self._observed_spec = spec
            self._observed_time = self._loop_time()

    def _holds(self) -> bool:
        return self._observed_spec.get("holderIdentity") == self.identity

    def _lease_valid(self) -> bool:
        # client-go uses its configured LeaseDuration for an observed record of its own, and the record's
        # leaseDurationSeconds otherwise; both are the same here.
        duration = float(self._observed_spec.get("leaseDurationSeconds") or self.t.lease_duration)
        if self._holds():
            duration = self.t.lease_duration
        return self._observed_time + duration > self._loop_time()

    async def try_acquire_or_renew(self) -> bool:
        now = micro_time(dt.datetime.now(dt.UTC))
        try:
            current = await self.store.get(LEASE_KEY)
        except NotFound:
            lease: Obj = {
                "apiVersion": LEASES.api_version,
                "kind": LEASES.kind,
                "metadata": {
                    "name": LEASE_NAME,
                    "namespace": LEASE_NAMESPACE,
                    "uid": str(uuid.uuid4()),
                    "creationTimestamp": now[:19] + "Z",
                },
                "spec": self._record(now, 0),
            }
            try:
                await self.store.create(LEASE_KEY, lease)
            except AlreadyExists:
                return False
            self._observe(lease["spec"])
            return True
        spec = current.obj.get("spec") or {}
        self._observe(spec)
        if spec.get("holderIdentity") and self._lease_valid() and not self._holds():
            return False
        if self._holds():
            new = self._record(spec.get("acquireTime") or now, int(spec.get("leaseTransitions") or 0))
        else:
            new = self._record(now, int(spec.get("leaseTransitions") or 0) + 1)
        obj = dict(current.obj)
        obj["spec"] = new
        try:
            await self.store.update(LEASE_KEY, obj, current.revision)
        except (Conflict, NotFound):
            return False
        self._observe(new)
        return True

    async def _attempt(self) -> bool:
        try:
            return await self.try_acquire_or_renew()
        except StoreError as e:
            klog.error(f"error retrieving resource lock {DESC}: {e}", "leaderelection.go:436")
            return False

    async def acquire(self) -> None:
        klog.info(f"attempting to acquire leader lease {DESC}...", "leaderelection.go:257")
        while True:
            if await self._attempt():
                klog.info(f"successfully acquired lease {DESC}", "leaderelection.go:271")
                return
            holder = self._observed_spec.get("holderIdentity")
            if holder:
                klog.info(f"lock is held by {holder} and has not yet expired", "leaderelection.go:429", v=4)
            # wait.JitterUntil(retry, 1.2, sliding): period plus up to 1.2 periods of jitter.
            await asyncio.sleep(self.t.retry_period * (1 + random.random() * JITTER_FACTOR))

    async def renew(self) -> None:
        """Renew every retry period; return when no renewal succeeded within the renew deadline."""
        while True:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.t.renew_deadline
            renewed = False
            while loop.time() < deadline:
                if await self._attempt():
                    renewed = True
                    break
                await asyncio.sleep(min(self.t.retry_period, max(0.0, deadline - loop.time())))
            if not renewed:
                klog.info(
                    f"failed to renew lease {DESC}: timed out waiting for the condition",
                    "leaderelection.go:297",
                )
                return
            await asyncio.sleep(self.t.retry_period)

    async def run(self) -> None:
        """kcp's loop: run an election, lead until renewal fails, start over; never release the lease."""
        while True:
            klog.info(f'"(re-)starting leader election" identity="{self.identity}"', "server.go:650")
            await self.acquire()
            self.is_leader = True
            klog.info(f'"started leading" identity="{self.identity}"', "server.go:660")
            if self.on_started is not None:
                self.on_started()
            try:
                await self.renew()
            finally:
                self.is_leader = False
                if self.on_stopped is not None:
                    self.on_stopped()
            klog.info(f'"stopped leading" identity="{self.identity}"', "server.go:664")
