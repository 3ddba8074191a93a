"""metav1.Condition helpers: pure functions on plain lists of dicts.

`lastTransitionTime` changes only when the status flips, as the Kubernetes API
conventions ask; reason and message may change without a transition.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any, Literal

Status = Literal["True", "False", "Unknown"]

# Step conditions of a slot, in roll order.
SLOT_STEPS = ("Seeded", "Listening", "Ready", "Flipped", "LeaseHandedOver", "Probed")


def now() -> str:
    """RFC 3339 in UTC with seconds, as Kubernetes writes timestamps."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_precise() -> str:
    """RFC 3339 with microseconds: the roll report measures sub-second steps."""
    return precise(datetime.datetime.now(datetime.UTC))


def precise(at: datetime.datetime) -> str:
    return at.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


def find(conditions: Iterable[Mapping[str, Any]] | None, type_: str) -> Mapping[str, Any] | None:
    for condition in conditions or ():
        if condition.get("type") == type_:
            return condition
    return None


def is_true(conditions: Iterable[Mapping[str, Any]] | None, type_: str) -> bool:
    condition = find(conditions, type_)
    return condition is not None and condition.get("status") == "True"


def set_condition(
    conditions: Iterable[Mapping[str, Any]] | None,
    type_: str,
    status: Status,
    reason: str,
    message: str = "",
    *,
    observed_generation: int | None = None,
    at: str | None = None,
) -> list[dict[str, Any]]:
    """Return a new list with `type_` set; other conditions keep their order."""
    result: list[dict[str, Any]] = []
    found = False
    for condition in conditions or ():
        if condition.get("type") != type_:
            result.append(dict(condition))
            continue
        found = True
        updated = dict(condition)
        if condition.get("status") != status:
            updated["lastTransitionTime"] = at or now()
        updated.update(status=status, reason=reason, message=message)
        if observed_generation is not None:
            updated["observedGeneration"] = observed_generation
        result.append(updated)
    if not found:
        new: dict[str, Any] = {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": at or now(),
        }
        if observed_generation is not None:
            new["observedGeneration"] = observed_generation
        result.append(new)
    return result
