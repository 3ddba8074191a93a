"""The views a round takes of the workloads it reads (the front's Deployment and pods, the node, a Job):
pure readings of Kubernetes objects into the plan's types (`kcpshard.roll.observed`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kcpshard.api import conditions as cond
from kcpshard.roll.observed import FrontAvailability, FrontPodView, JobView


def front_availability(deployment: Mapping[str, Any]) -> FrontAvailability:
    """From the Deployment controller's `Available` condition; before it wrote one, from its replicas."""
    status, meta = deployment.get("status") or {}, deployment.get("metadata") or {}
    created = meta.get("creationTimestamp")
    found = cond.find(status.get("conditions"), "Available")
    if found is not None:
        available = found.get("status") == "True"
        since = found.get("lastTransitionTime")
    else:
        available = int(status.get("availableReplicas") or 0) > 0
        since = None
    if not available:
        return FrontAvailability(False, since=str(since or created or "") or None)
    # Available, but is a replacement on its way? Pods of the current template not all available yet
    # (or the controller has not seen the new template): since its last progress.
    wanted = int((deployment.get("spec") or {}).get("replicas") or 1)
    seen = int(status.get("observedGeneration") or 0) >= int(meta.get("generation") or 0)
    if (
        seen
        and int(status.get("updatedReplicas") or 0) >= wanted
        and int(status.get("replicas") or 0) <= wanted
    ):
        return FrontAvailability(True)
    progressing = cond.find(status.get("conditions"), "Progressing") or {}
    progress = progressing.get("lastUpdateTime") or progressing.get("lastTransitionTime") or created
    return FrontAvailability(True, replacing_since=str(progress or "") or None)


def front_pod_view(pod: Mapping[str, Any]) -> FrontPodView:
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    states = []
    containers = status.get("containerStatuses") or []
    for container in containers:
        # The front pod runs its agent and two HAProxys: name which one says what.
        named = f"{container.get('name')} " if len(containers) > 1 else ""
        for kind, detail in (container.get("state") or {}).items():
            detail = detail or {}
            why = detail.get("reason") or ""
            if kind == "terminated" and detail.get("exitCode") is not None:
                why = f"{why} (exit {detail['exitCode']})".strip()
            elif detail.get("message"):
                why = f"{why} ({detail['message']})".strip()
            states.append(f"{named}{kind}: {why}" if why else f"{named}{kind}")
        if container.get("restartCount"):
            states.append(f"{named}restarted {container['restartCount']} times")
    unscheduled = [
        c.get("message") or c.get("reason") or ""
        for c in status.get("conditions") or []
        if c.get("type") == "PodScheduled" and c.get("status") == "False"
    ]
    return FrontPodView(
        name=str(meta.get("name") or ""),
        phase=str(status.get("phase") or "Pending"),
        state=", ".join(states or unscheduled),
        deleting=bool(meta.get("deletionTimestamp")),
    )


def node_not_ready(node: Mapping[str, Any]) -> str | None:
    """None while the node's `Ready` condition is True; else what it says (the node lifecycle controller
    sets it Unknown once the kubelet has not reported for its grace period)."""
    name = (node.get("metadata") or {}).get("name") or "?"
    ready = cond.find((node.get("status") or {}).get("conditions"), "Ready")
    if ready is None:
        return f"node {name} has not reported Ready yet"
    if ready.get("status") == "True":
        return None
    state = "NotReady" if ready.get("status") == "False" else "Unknown"
    why = ready.get("message") or ready.get("reason") or "no reason given"
    return f"node {name} is {state} since {ready.get('lastTransitionTime') or '?'} ({why})"


def job_view(job: Mapping[str, Any]) -> JobView:
    status = job.get("status") or {}
    failed = cond.find(status.get("conditions"), "Failed")
    message = ""
    if failed is not None and failed.get("status") == "True":
        message = f"{failed.get('reason', '')}: {failed.get('message', '')}".strip(": ")
    return JobView(
        name=job["metadata"]["name"],
        active=int(status.get("active") or 0),
        succeeded=int(status.get("succeeded") or 0),
        failed=int(status.get("failed") or 0),
        deleting=bool(job["metadata"].get("deletionTimestamp")),
        message=message,
    )
