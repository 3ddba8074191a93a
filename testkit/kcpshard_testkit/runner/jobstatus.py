"""The Job controller's decision for one Job: its status, pods to create, pods to delete.

Imitates ``pkg/controller/job/job_controller.go`` ``syncJob`` for NonIndexed jobs: ``parallelism`` and
``completions`` (default 1 each), ``backoffLimit`` (default 6; with ``restartPolicy: OnFailure`` container
restarts count as failures too), ``activeDeadlineSeconds``, ``suspend``; conditions ``SuccessCriteriaMet`` +
``Complete`` and ``FailureTarget`` + ``Failed`` (reasons ``BackoffLimitExceeded``, ``DeadlineExceeded``) as
Kubernetes >= 1.31 writes them (here both at once). A pod deleted before it succeeded counts as failed.
Pure: the caller passes pods and the clock.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

TERMINAL = ("Succeeded", "Failed")


@dataclass
class JobPlan:
    status: dict[str, Any]
    create: int = 0
    delete: list[Mapping[str, Any]] = field(default_factory=list)


def int_or(value: Any, default: int) -> int:
    return default if value is None else int(value)


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def fmt_time(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def is_deleting(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def pod_ready(pod: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def finished_condition(job: Mapping[str, Any]) -> str | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return str(cond["type"])
    return None


def _condition(kind: str, reason: str, message: str, now: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": now,
        "lastTransitionTime": now,
    }


def plan_job(
    job: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    tracked: MutableMapping[str, str],
    now: datetime,
) -> JobPlan:
    """Decide for ``job`` given its pods. ``tracked`` ({pod uid: terminal phase}) survives pod deletion."""
    spec = job.get("spec") or {}
    old = dict(job.get("status") or {})
    now_s = fmt_time(now)
    for pod in pods:
        uid = str((pod.get("metadata") or {}).get("uid"))
        if pod_phase(pod) in TERMINAL:
            tracked[uid] = pod_phase(pod)
        elif is_deleting(pod):
            # isPodFailed in job_controller.go: a pod deleted before it succeeded counts as failed.
            tracked[uid] = "Failed"
    succeeded = max(int(old.get("succeeded") or 0), sum(1 for p in tracked.values() if p == "Succeeded"))
    failed = max(int(old.get("failed") or 0), sum(1 for p in tracked.values() if p == "Failed"))
    running = [p for p in pods if pod_phase(p) not in TERMINAL and not is_deleting(p)]
    terminating = sum(1 for p in pods if pod_phase(p) not in TERMINAL and is_deleting(p))
    status: dict[str, Any] = {
        **old,
        "active": len(running),
        "ready": sum(1 for p in running if pod_ready(p)),
        "terminating": terminating,
        "succeeded": succeeded,
        "failed": failed,
    }
    for key in ("succeeded", "failed", "active"):
        if not status[key] and key not in old:
            status.pop(key)  # the Job controller omits zero counters it never set
    plan = JobPlan(status=status)
    if finished_condition(job):
        if finished_condition(job) == "Failed":
            plan.delete = running
        return plan
    if spec.get("suspend"):
        plan.delete = running
        return plan
    status.setdefault("startTime", now_s)

    restart_on_failure = ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy") == "OnFailure"
    restarts = 0
    if restart_on_failure:
        for pod in running:
            restarts += sum(
                int(c.get("restartCount") or 0)
                for c in (pod.get("status") or {}).get("containerStatuses") or []
            )
    backoff_limit = int_or(spec.get("backoffLimit"), 6)
    deadline = spec.get("activeDeadlineSeconds")
    started = parse_time(status.get("startTime")) or now

    completions = spec.get("completions")
    parallelism = int_or(spec.get("parallelism"), 1)
    done = succeeded >= int(completions) if completions is not None else succeeded >= 1 and not running
    failure: tuple[str, str] | None = None
    if failed + restarts > backoff_limit:
        failure = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
    elif deadline is not None and (now - started).total_seconds() >= int(deadline):
        failure = ("DeadlineExceeded", "Job was active longer than specified deadline")

    if failure is not None:
        status["conditions"] = [
            *(old.get("conditions") or []),
            _condition("FailureTarget", *failure, now_s),
            _condition("Failed", *failure, now_s),
        ]
        plan.delete = running
        return plan
    if done:
        reason, message = "CompletionsReached", "Reached expected number of succeeded pods"
        status["conditions"] = [
            *(old.get("conditions") or []),
            _condition("SuccessCriteriaMet", reason, message, now_s),
            _condition("Complete", reason, message, now_s),
        ]
        status["completionTime"] = now_s
        plan.delete = running
        return plan
    if completions is not None:
        want = min(parallelism, int(completions) - succeeded)
    else:
        want = parallelism if succeeded == 0 else 0
    plan.create = max(0, want - len(running))
    return plan
