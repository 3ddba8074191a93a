"""The Deployment controller's decision for one Deployment (pure).

Imitates ``pkg/controller/deployment/recreate.go`` and ``sync.go`` with pods owned by the Deployment directly
(no ReplicaSet): pods carry ``pod-template-hash``; a template change first deletes every old pod, waits until
they are gone, then creates new ones (the ``Recreate`` strategy, whatever ``spec.strategy`` says). Terminal
pods are deleted and replaced. Status: ``replicas``, ``updatedReplicas``, ``readyReplicas``,
``availableReplicas``, ``unavailableReplicas``, ``observedGeneration``, conditions ``Available`` and
``Progressing``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kcpshard_testkit.runner.jobstatus import TERMINAL, fmt_time, int_or, is_deleting, pod_phase, pod_ready
from kcpshard_testkit.runner.templates import template_hash


@dataclass
class DeploymentPlan:
    status: dict[str, Any]
    create: int = 0
    delete: list[Mapping[str, Any]] = field(default_factory=list)
    replaced_terminal: bool = False


def _hash_of(pod: Mapping[str, Any]) -> str | None:
    return ((pod.get("metadata") or {}).get("labels") or {}).get("pod-template-hash")


def _condition(
    old: Sequence[Mapping[str, Any]], kind: str, ok: bool, reason: str, message: str, now: str
) -> dict[str, Any]:
    status = "True" if ok else "False"
    previous = next((c for c in old if c.get("type") == kind), None)
    since = previous.get("lastTransitionTime") if previous and previous.get("status") == status else now
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastUpdateTime": now
        if not previous or previous.get("reason") != reason
        else previous.get("lastUpdateTime"),
        "lastTransitionTime": since,
    }


def plan_deployment(
    deployment: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], now: datetime
) -> DeploymentPlan:
    meta, spec = deployment.get("metadata") or {}, deployment.get("spec") or {}
    name = meta.get("name")
    replicas = int_or(spec.get("replicas"), 1)
    current_hash = template_hash(spec.get("template") or {})
    live = [p for p in pods if not is_deleting(p)]
    old = [p for p in live if _hash_of(p) != current_hash]
    old_terminating = [p for p in pods if is_deleting(p) and _hash_of(p) != current_hash]
    terminal = [p for p in live if _hash_of(p) == current_hash and pod_phase(p) in TERMINAL]
    current = [p for p in live if _hash_of(p) == current_hash and pod_phase(p) not in TERMINAL]
    ready = [p for p in current if pod_ready(p)]

    plan = DeploymentPlan(status={})
    if spec.get("paused"):
        pass
    elif old or old_terminating:
        plan.delete = old  # Recreate: the new pods wait until every old pod is gone
    else:
        plan.delete = list(terminal)
        plan.replaced_terminal = bool(terminal)
        if len(current) < replicas:
            plan.create = replicas - len(current)
        elif len(current) > replicas:
            oldest_first = sorted(
                current, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp"))
            )
            plan.delete += oldest_first[replicas:]  # the newest go first

    now_s = fmt_time(now)
    old_conditions = (deployment.get("status") or {}).get("conditions") or []
    available = len(ready) >= replicas
    complete = available and not old and not old_terminating and len(current) == replicas
    plan.status = {
        "observedGeneration": meta.get("generation"),
        "replicas": len([p for p in live if pod_phase(p) not in TERMINAL]),
        "updatedReplicas": len(current),
        "readyReplicas": len(ready),
        "availableReplicas": len(ready),
        "unavailableReplicas": max(replicas - len(ready), 0),
        "conditions": [
            _condition(
                old_conditions,
                "Available",
                available,
                "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                "Deployment has minimum availability."
                if available
                else "Deployment does not have minimum availability.",
                now_s,
            ),
            _condition(
                old_conditions,
                "Progressing",
                True,
                "NewReplicaSetAvailable" if complete else "ReplicaSetUpdated",
                f'Deployment "{name}" has successfully progressed.'
                if complete
                else f'Deployment "{name}" is progressing.',
                now_s,
            ),
        ],
    }
    return plan
