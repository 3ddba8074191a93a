"""Workspaces (`tenancy.kcp.io/v1alpha1`) and the controller moving them Scheduling -> Initializing -> Ready.

Imitates `pkg/reconciler/tenancy/workspace/workspace_reconcile_scheduling.go` and
`workspace_reconcile_phase.go`: a new Workspace starts in phase `Scheduling`; the scheduler picks a shard and
sets `spec.URL`/`spec.cluster` (-> `Initializing`); once its LogicalCluster has no initializers it becomes
`Ready`. Like every kcp controller it runs only in the process that holds the controller lease. The
stand-in records which lease holder readied a workspace in the annotation `fake.kcp.io/readied-by`.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable

from kcpshard.api.conditions import now
from kcpshard_testkit.fakekcp import klog
from kcpshard_testkit.fakekcp.etcdstore import Conflict, EtcdStore, NotFound, Obj, StoreError
from kcpshard_testkit.fakekcp.resources import Resource

READIED_BY = "fake.kcp.io/readied-by"
SCHEDULING, INITIALIZING, READY = "Scheduling", "Initializing", "Ready"


def _on_create(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", {"name": "universal", "path": "root"})
    obj["status"] = {"phase": SCHEDULING}


WORKSPACES = Resource(
    "tenancy.kcp.io",
    "v1alpha1",
    "workspaces",
    "Workspace",
    namespaced=False,
    on_create=_on_create,
    keep_on_update=("status",),
)


def _condition(type_: str) -> Obj:
    return {"type": type_, "status": "True", "lastTransitionTime": now()}


def next_state(ws: Obj, base_url: str, shard: str, holder: str) -> Obj | None:
    """The workspace after one reconcile step, or None when nothing changes."""
    phase = (ws.get("status") or {}).get("phase", SCHEDULING)
    name = ws.get("metadata", {}).get("name", "")
    new = {**ws, "spec": dict(ws.get("spec") or {}), "status": dict(ws.get("status") or {})}
    if phase == SCHEDULING:
        cluster = hashlib.sha256(f"root:{name}:{ws['metadata'].get('uid', '')}".encode()).hexdigest()[:16]
        new["spec"]["cluster"] = cluster
        new["spec"]["URL"] = f"{base_url}/clusters/{cluster}"
        new["metadata"] = {
            **ws["metadata"],
            "annotations": {
                **(ws["metadata"].get("annotations") or {}),
                "internal.tenancy.kcp.io/shard": shard,
            },
        }
        new["status"]["phase"] = INITIALIZING
        new["status"]["conditions"] = [_condition("WorkspaceScheduled")]
        return new
    if phase == INITIALIZING:
        new["metadata"] = {
            **ws["metadata"],
            "annotations": {**(ws["metadata"].get("annotations") or {}), READIED_BY: holder},
        }
        new["status"]["phase"] = READY
        new["status"]["conditions"] = [
            *(new["status"].get("conditions") or []),
            _condition("WorkspaceInitialized"),
        ]
        return new
    return None


class WorkspaceController:
    """Reconciles the root workspaces every `period` seconds while `is_leader()` says so."""

    def __init__(
        self,
        store: EtcdStore,
        base_url: str,
        shard: str,
        holder: str,
        is_leader: Callable[[], bool],
        period: float = 0.2,
    ) -> None:
        self.store = store
        self.base_url = base_url
        self.shard = shard
        self.holder = holder
        self.is_leader = is_leader
        self.period = period

    async def reconcile_once(self) -> int:
        changed = 0
        items, _ = await self.store.list(WORKSPACES.folder("root"))
        for stored in items:
            if not self.is_leader():
                break
            new = next_state(stored.obj, self.base_url, self.shard, self.holder)
            if new is None:
                continue
            name = stored.obj["metadata"]["name"]
            try:
                await self.store.update(WORKSPACES.key("root", "", name), new, stored.revision)
                changed += 1
            except (Conflict, NotFound):
                continue  # someone else changed or deleted it: the next pass sees the new state
        return changed

    async def run(self) -> None:
        while True:
            if self.is_leader():
                try:
                    await self.reconcile_once()
                except StoreError as e:
                    klog.error(
                        f'"reconcile failed" controller="kcp-workspace" err="{e}"', "controller.go:180"
                    )
            await asyncio.sleep(self.period)
