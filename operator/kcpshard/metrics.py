"""Prometheus metrics of the operator (served with `kcpshard operator --metrics-port N`)."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import Counter, Gauge, Histogram

ROLLS = Counter("kcpshard_rolls", "Rolls finished, by result (Succeeded, Aborted).", ["result"])
ROLL_SECONDS = Histogram(
    "kcpshard_roll_step_seconds",
    "Duration of each part of a roll, from the roll report.",
    ["step"],
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300),
)
ROLLING = Gauge("kcpshard_roll_in_progress", "1 while a shard rolls.", ["namespace", "shard"])
STALLED = Gauge("kcpshard_stalled", "1 while a shard is Stalled.", ["namespace", "shard"])


def roll_finished(namespace: str, shard: str, result: str, durations: Mapping[str, float]) -> None:
    ROLLS.labels(result=result).inc()
    for step, seconds in durations.items():
        ROLL_SECONDS.labels(step=step).observe(seconds)
    ROLLING.labels(namespace=namespace, shard=shard).set(0)


def roll_started(namespace: str, shard: str) -> None:
    ROLLING.labels(namespace=namespace, shard=shard).set(1)


def stalled(namespace: str, shard: str, value: bool) -> None:
    STALLED.labels(namespace=namespace, shard=shard).set(1 if value else 0)
