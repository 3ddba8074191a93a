"""The front agent's own pod: its state dir (one per pod, so a replacement front runs beside the one it
replaces), the marker that tells an agent started again in it that it is a restart, the pod's readiness
gate, and the other pods of the same front."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from kcpshard.agent.lognotes import Notes, short
from kcpshard.api.conditions import now
from kcpshard.k8s.api import PODS, ApiClient
from kcpshard.k8s.names import SERVING_GATE, component_selector, front_name
from kcpshard.retry import Passing

log = logging.getLogger("kcpshard.agent.front")

# Left in the state dir by the agent's first start in a pod: a later start there is a restart.
STARTED_FILE = "started"


class FrontPod:
    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        shard: str,
        state_dir: Path,
        pod: str | None,
        notes: Notes,
        passes: Passing,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.shard = shard
        self.state_dir = state_dir
        self.name = pod  # None outside a pod (a test, a run by hand)
        self.notes = notes
        self.passes = passes  # the API errors that leave the pods unknown this time
        # The readiness gate as this agent last wrote it; None: not yet (an agent started again in its pod
        # writes it on its first pass; its HAProxys served on meanwhile).
        self.serving: bool | None = None

    def restarted(self) -> str | None:
        """An agent started again in the same pod (its container crashed or was killed) finds the marker
        its first start left in the pod's state dir: what to report as its restart; None on a first start."""
        marker = self.state_dir / STARTED_FILE
        try:
            if marker.exists():
                where = f" in pod {self.name}" if self.name else ""
                return f"front agent{where} exited and was started again at {now()}"
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
        except OSError as exc:
            self.notes.problem(f"cannot keep the start marker {marker}: {short(exc)}")
        return None

    async def forget_gone(self) -> None:
        """Remove the state dirs of this front's pods that no longer exist (each pod has its own)."""
        if self.name is None:
            return
        pods = await self.front_pods()
        if pods is None:
            return
        live = set(pods)
        prefix = f"{front_name(self.shard)}-"
        for entry in self.state_dir.parent.iterdir():
            if entry.is_dir() and entry.name.startswith(prefix) and entry.name not in live | {self.name}:
                shutil.rmtree(entry, ignore_errors=True)

    async def front_pods(self) -> dict[str, str] | None:
        """This shard's front pods: name -> phase; None (logged) when they cannot be listed."""
        selector = component_selector(self.shard, "front")
        try:
            pods = (await self.api.list(PODS, self.namespace, label_selector=selector)).get("items") or []
        except Exception as exc:
            if not self.passes(exc):
                raise
            self.notes.problem(f"cannot list the front's pods: {short(exc)}")
            return None
        return {str(p["metadata"]["name"]): str((p.get("status") or {}).get("phase")) for p in pods}

    async def replaced(self) -> list[str]:
        """Other running pods of this shard's front: while the Deployment replaces this front, the old pod
        holds the port, and the new one shares it (SO_REUSEPORT) rather than waiting for it to go."""
        if self.name is None:
            return []
        pods = await self.front_pods()
        if pods is None:
            return []
        return [name for name, phase in pods.items() if name != self.name and phase == "Running"]

    async def mark_ready(self, ready: bool) -> None:
        """Set the pod's readiness gate when it changes: the kubelet makes the pod Ready only while it is
        True, so a replacement front is Ready (and the old one goes) only once it serves the desired
        backend. Written on change only: an idle front costs the node nothing."""
        if self.name is None or ready == self.serving:
            return
        status = "True" if ready else "False"
        why = (
            "every HAProxy of the pod serves the desired backend"
            if ready
            else "not serving the desired backend"
        )
        condition = {"type": SERVING_GATE, "status": status, "lastTransitionTime": now(), "message": why}
        try:
            # Strategic merge: the conditions list is merged by type, so the kubelet's own stay.
            body = {"status": {"conditions": [condition]}}
            await self.api.patch(
                PODS, self.namespace, self.name, body, kind="strategic", subresource="status"
            )
        except Exception as exc:
            if not self.passes(exc):
                raise
            self.notes.problem(f"cannot set the readiness gate of pod {self.name}: {short(exc)}")
            return
        self.serving = ready
