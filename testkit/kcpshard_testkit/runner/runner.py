"""``WorkloadRunner``: kubelet (+ Job controller + Deployment controller) for one local node.

Two modes:

- ``kubelet_only=True``, on the real control plane (``controlplane.py``): kube-controller-manager runs the
  Job, Deployment and ReplicaSet controllers; the runner is the node's kubelet only. It registers the
  ``Node`` and keeps its Lease fresh, watches the Pods bound to it (``spec.nodeName``), runs them, and
  gives each the identity of its service account (``kubelet.py``).
- ``kubelet_only=False``, on the emulated API server: it also plays the Job and Deployment controllers,
  watching Pods, Jobs and Deployments in all namespaces. The controllers act only after the first Pod list
  is in (so a restart never doubles pods), each object's reconcile is serialized and coalesced, and a
  resync every ``RESYNC`` seconds catches deadlines and failed writes. Meant as the only runner of an API
  server: two runners would both create pods for every Job. Pods reach the API server with ``extra_env``
  (the admin kubeconfig): the emulated server has no TokenRequest and no RBAC.

Either way pods whose ``spec.nodeName`` is this node get a ``PodWorker``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kcpshard.k8s.api import DEPLOYMENTS, JOBS, PODS, ApiClient, ApiError, NotFound, ResourceRef
from kcpshard_testkit.runner.deployments import plan_deployment
from kcpshard_testkit.runner.jobstatus import plan_job
from kcpshard_testkit.runner.kubelet import HEARTBEAT_SECONDS, NodeAgent, PodIdentity
from kcpshard_testkit.runner.logserver import LogServer
from kcpshard_testkit.runner.pod import PodWorker, grace_of
from kcpshard_testkit.runner.templates import controller_uid, pod_from_deployment, pod_from_job

log = logging.getLogger(__name__)

RESYNC = 2.0
SHUTDOWN_GRACE_CAP = 10.0
TERMINAL_REPLACE_DELAY = 1.0  # rate limit for Deployments whose pods keep failing outright


def _uid(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid"))


def _ns_name(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace")), str(meta.get("name"))


class Coalescer:
    """Runs ``fn(key)`` one at a time per key; kicks during a run cause exactly one more run."""

    def __init__(self, fn: Callable[[str], Awaitable[None]]):
        self._fn = fn
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._dirty: set[str] = set()

    def kick(self, key: str) -> None:
        task = self._tasks.get(key)
        if task is not None and not task.done():
            self._dirty.add(key)
            return
        self._tasks[key] = asyncio.create_task(self._loop(key))

    async def _loop(self, key: str) -> None:
        while True:
            self._dirty.discard(key)
            try:
                await self._fn(key)
            except (ApiError, OSError) as exc:
                log.warning("reconcile of %s failed (will retry on resync): %s", key, exc)
            except Exception:
                log.exception("reconcile of %s crashed (will retry on resync)", key)
            if key not in self._dirty:
                self._tasks.pop(key, None)
                return

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class WorkloadRunner:
    """Plays kubelet, Job controller and Deployment controller for ``node_name``."""

    def __init__(
        self,
        api: ApiClient,
        sandbox: Path,
        node_name: str = "local-node",
        extra_env: Mapping[str, str] | None = None,
        *,
        shutdown_grace_cap: float = SHUTDOWN_GRACE_CAP,
        kubelet_only: bool = False,
        heartbeat: float = HEARTBEAT_SECONDS,
    ) -> None:
        self.api = api
        self.kubelet_only = kubelet_only
        self.node = NodeAgent(api, node_name, heartbeat) if kubelet_only else None
        self.identity = PodIdentity(api) if kubelet_only else None
        # `kubectl logs` through the real API server asks the node for them (the emulated one does not).
        self.logs = LogServer(Path(sandbox), self._runs) if kubelet_only else None
        self.ready = asyncio.Event()  # the node is registered and the first pod list is in
        self.sandbox = Path(sandbox)
        self.node_name = node_name
        self.extra_env = dict(extra_env or {})
        self.shutdown_grace_cap = shutdown_grace_cap
        self.pods: dict[str, dict[str, Any]] = {}
        self.jobs: dict[str, dict[str, Any]] = {}
        self.deployments: dict[str, dict[str, Any]] = {}
        self.workers: dict[str, PodWorker] = {}
        self._worker_tasks: dict[str, asyncio.Task[None]] = {}
        self._finished_uids: set[str] = set()
        self._tracked: dict[str, dict[str, str]] = {}  # job uid -> {pod uid: terminal phase}
        self._pods_synced = asyncio.Event()
        self._stop = asyncio.Event()
        self._done = asyncio.Event()
        self._running = False
        self._jobs = Coalescer(self._reconcile_job)
        self._deploys = Coalescer(self._reconcile_deployment)

    # --- public ------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Run until cancelled or ``stop()``; then stop every process and return."""
        self._running = True
        self.sandbox.mkdir(parents=True, exist_ok=True)
        watchers: list[asyncio.Task[None]] = []
        try:
            if self.node is not None:
                if self.logs is not None:
                    self.node.kubelet_port = await self.logs.start()
                await self.node.register()
                bound = f"spec.nodeName={self.node_name}"
                watchers = [
                    asyncio.create_task(self._consume(PODS, self._on_pod, self._pods_synced, bound)),
                    asyncio.create_task(self.node.heartbeat_forever()),
                ]
            else:
                watchers = [
                    asyncio.create_task(self._consume(PODS, self._on_pod, self._pods_synced)),
                    asyncio.create_task(self._consume(JOBS, self._on_job)),
                    asyncio.create_task(self._consume(DEPLOYMENTS, self._on_deployment)),
                    asyncio.create_task(self._resync()),
                ]
            watchers.append(asyncio.create_task(self._announce_ready()))
            stop = asyncio.create_task(self._stop.wait())
            await asyncio.wait([stop, *watchers], return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            for task in watchers:
                if task.done() and not task.cancelled() and task.exception():
                    log.error("runner watch ended: %s", task.exception())
        finally:
            await asyncio.shield(self._shutdown(watchers))

    async def _announce_ready(self) -> None:
        await self._pods_synced.wait()
        self.ready.set()
        await asyncio.Event().wait()  # a watcher like the others: it ends when they are cancelled

    def _runs(self, namespace: str, name: str) -> bool:
        """A pod of that name runs here now (its worker has not ended)."""
        for uid, worker in self.workers.items():
            meta = worker.pod.get("metadata") or {}
            task = self._worker_tasks.get(uid)
            if (meta.get("namespace"), meta.get("name")) == (namespace, name) and task and not task.done():
                return True
        return False

    async def stop(self) -> None:
        """Ask ``run`` to stop and wait until every process is gone."""
        self._stop.set()
        if self._running:
            await self._done.wait()

    # --- shutdown ----------------------------------------------------------------------------------
    async def _shutdown(self, watchers: list[asyncio.Task[None]]) -> None:
        try:
            for task in watchers:
                task.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)
            await self._jobs.close()
            await self._deploys.close()
            workers = list(self.workers.values())
            await asyncio.gather(
                *(w.shutdown(self.shutdown_grace_cap) for w in workers), return_exceptions=True
            )
            tasks = list(self._worker_tasks.values())
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            if self.logs is not None:
                await self.logs.stop()
            self._done.set()

    # --- watches -----------------------------------------------------------------------------------
    async def _consume(
        self,
        ref: ResourceRef,
        handler: Callable[[str, dict[str, Any]], None],
        synced: asyncio.Event | None = None,
        field_selector: str | None = None,
    ) -> None:
        async for event in self.api.watch_forever(ref, synced=synced, field_selector=field_selector):
            handler(str(event.get("type")), event.get("object") or {})

    async def _resync(self) -> None:
        await self._pods_synced.wait()
        while True:
            for uid in list(self.jobs):
                self._jobs.kick(uid)
            for uid in list(self.deployments):
                self._deploys.kick(uid)
            await asyncio.sleep(RESYNC)

    def _kick_owner(self, pod: Mapping[str, Any]) -> None:
        owner = controller_uid(pod)
        if owner in self.jobs:
            self._jobs.kick(owner)
        elif owner in self.deployments:
            self._deploys.kick(owner)

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        uid = _uid(pod)
        if kind == "DELETED":
            self.pods.pop(uid, None)
            worker = self.workers.get(uid)
            if worker is not None:
                worker.request_termination(min(grace_of(pod), self.shutdown_grace_cap), finalize=False)
            self._kick_owner(pod)
            return
        self.pods[uid] = pod
        if (pod.get("spec") or {}).get("nodeName") == self.node_name:
            self._ensure_worker(pod)
        self._kick_owner(pod)

    def _ensure_worker(self, pod: dict[str, Any]) -> None:
        uid = _uid(pod)
        worker = self.workers.get(uid)
        if worker is not None:
            worker.update(pod)
            return
        if uid in self._finished_uids or self._stop.is_set():
            return
        worker = PodWorker(self.api, self.sandbox, self.node_name, self.extra_env, pod, self.identity)
        worker.update(pod)
        self.workers[uid] = worker
        task = asyncio.create_task(worker.run())
        self._worker_tasks[uid] = task
        task.add_done_callback(lambda t, uid=uid: self._worker_done(uid, t))  # type: ignore[misc]

    def _worker_done(self, uid: str, task: asyncio.Task[None]) -> None:
        self.workers.pop(uid, None)
        self._worker_tasks.pop(uid, None)
        self._finished_uids.add(uid)
        if not task.cancelled() and task.exception() is not None:
            log.error("pod worker %s crashed: %r", uid, task.exception())

    def _on_job(self, kind: str, job: dict[str, Any]) -> None:
        uid = _uid(job)
        if kind == "DELETED":
            self.jobs.pop(uid, None)
            self._tracked.pop(uid, None)
            self._orphaned(uid)
            return
        self.jobs[uid] = job
        self._jobs.kick(uid)

    def _on_deployment(self, kind: str, deployment: dict[str, Any]) -> None:
        uid = _uid(deployment)
        if kind == "DELETED":
            self.deployments.pop(uid, None)
            self._orphaned(uid)
            return
        self.deployments[uid] = deployment
        self._deploys.kick(uid)

    def _orphaned(self, owner_uid: str) -> None:
        """The owner is gone: GC deletes its pods; stop them here too in case it does not (defensive)."""
        for pod in list(self.pods.values()):
            worker = self.workers.get(_uid(pod))
            if controller_uid(pod) == owner_uid and worker is not None:
                worker.request_termination(grace_of(pod), finalize=True)

    # --- controllers -------------------------------------------------------------------------------
    def _owned(self, owner_uid: str) -> list[dict[str, Any]]:
        return [p for p in self.pods.values() if controller_uid(p) == owner_uid]

    async def _create_pod(self, body: dict[str, Any]) -> None:
        created = await self.api.create(PODS, body["metadata"]["namespace"], body)
        self.pods.setdefault(_uid(created), created)  # seen before the watch reports it: no double create

    async def _delete_pod(self, pod: Mapping[str, Any]) -> None:
        with contextlib.suppress(NotFound):
            await self.api.delete(PODS, *_ns_name(pod))

    async def _reconcile_job(self, uid: str) -> None:
        await self._pods_synced.wait()
        job = self.jobs.get(uid)
        if job is None:
            return
        plan = plan_job(job, self._owned(uid), self._tracked.setdefault(uid, {}), datetime.now(UTC))
        for _ in range(plan.create):
            await self._create_pod(pod_from_job(job))
        for pod in plan.delete:
            await self._delete_pod(pod)
        if plan.status != (job.get("status") or {}):
            ns, name = _ns_name(job)
            updated = await self.api.patch(JOBS, ns, name, {"status": plan.status}, subresource="status")
            if uid in self.jobs:
                self.jobs[uid] = updated

    async def _reconcile_deployment(self, uid: str) -> None:
        await self._pods_synced.wait()
        deployment = self.deployments.get(uid)
        if deployment is None:
            return
        plan = plan_deployment(deployment, self._owned(uid), datetime.now(UTC))
        for pod in plan.delete:
            await self._delete_pod(pod)
        for _ in range(plan.create):
            await self._create_pod(pod_from_deployment(deployment))
        old = deployment.get("status") or {}
        if any(old.get(k) != v for k, v in plan.status.items()):
            ns, name = _ns_name(deployment)
            updated = await self.api.patch(
                DEPLOYMENTS, ns, name, {"status": plan.status}, subresource="status"
            )
            if uid in self.deployments:
                self.deployments[uid] = updated
        if plan.replaced_terminal:
            await asyncio.sleep(TERMINAL_REPLACE_DELAY)
