"""Prometheus metrics of the operator (served with `kcpshard operator --metrics-port N`).

Per-shard series come from the replica that holds the shard's Lease, from the shard's status as that
replica last read or wrote it, and go when it stops acting on the shard: a replica that lost the Lease
(or a deleted shard) leaves no stale value behind for the alerts (deploy/monitoring) to misread.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, Info

from kcpshard.api import conditions as cond

SHARD = ["namespace", "shard"]

ROLLS = Counter(
    "kcpshard_rolls",
    "Rolls ended, by result (Succeeded, Aborted, Failed, RolledBack) and reason (why it did not succeed).",
    [*SHARD, "result", "reason"],
)
ROLL_SECONDS = Histogram(
    "kcpshard_roll_step_seconds",
    "Duration of each part of a roll, from the roll report.",
    ["step"],
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300),
)
FRONT_RESTARTS = Counter(
    "kcpshard_front_restarts",
    "Processes of a shard's front (HAProxy or the front agent) that died and were started again.",
    SHARD,
)
READY = Gauge("kcpshard_shard_ready", "1 while the shard is Ready for its current generation.", SHARD)
ROLLING = Gauge("kcpshard_roll_in_progress", "1 while a shard rolls.", SHARD)
STALLED = Gauge("kcpshard_stalled", "1 while a shard is Stalled.", SHARD)
FAILED_ROLL = Gauge(
    "kcpshard_failed_roll",
    "1 while the shard's last roll that did not succeed (status.failedRoll) stands, by its reason.",
    [*SHARD, "reason"],
)
_PER_SHARD = (READY, ROLLING, STALLED)
_failed_reasons: dict[tuple[str, str], str] = {}  # the reason label each shard's FAILED_ROLL series has
# kcpshard_build_info{version}: present while an operator is scraped, so its absence can be alerted on.
BUILD = Info("kcpshard_build", "The operator's version.")


def shard_seen(namespace: str, shard: str, body: Mapping[str, Any]) -> None:
    """Ready, Stalled and a roll under way, as the shard's status says."""
    status = body.get("status") or {}
    generation = (body.get("metadata") or {}).get("generation")
    conditions = status.get("conditions")

    def holds(type_: str) -> bool:
        found = cond.find(conditions, type_)
        return found is not None and found.get("status") == "True"

    current = generation is None or status.get("observedGeneration") == generation
    READY.labels(namespace, shard).set(1 if holds("Ready") and current else 0)
    STALLED.labels(namespace, shard).set(1 if holds("Stalled") else 0)
    ROLLING.labels(namespace, shard).set(1 if status.get("rollout") else 0)
    reason = str((status.get("failedRoll") or {}).get("reason") or "") or None
    if _failed_reasons.get((namespace, shard)) != reason:
        _forget_failed(namespace, shard)
    if reason is not None:
        FAILED_ROLL.labels(namespace, shard, reason).set(1)
        _failed_reasons[(namespace, shard)] = reason


def forget(namespace: str, shard: str) -> None:
    """This replica no longer acts on the shard (Lease lost, shard deleted, operator stopping)."""
    for gauge in _PER_SHARD:
        with contextlib.suppress(KeyError):
            gauge.remove(namespace, shard)
    _forget_failed(namespace, shard)


def _forget_failed(namespace: str, shard: str) -> None:
    reason = _failed_reasons.pop((namespace, shard), None)
    if reason is not None:
        with contextlib.suppress(KeyError):
            FAILED_ROLL.remove(namespace, shard, reason)


def roll_ended(
    namespace: str, shard: str, result: str, reason: str | None, durations: Mapping[str, float]
) -> None:
    ROLLS.labels(namespace, shard, result, reason or "").inc()
    for step, seconds in durations.items():
        ROLL_SECONDS.labels(step=step).observe(seconds)


def front_restarted(namespace: str, shard: str, times: int) -> None:
    FRONT_RESTARTS.labels(namespace, shard).inc(times)
