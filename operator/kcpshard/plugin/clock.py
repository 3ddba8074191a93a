"""Times and durations as `kubectl kcpshard` prints them. Pure."""

from __future__ import annotations

import datetime

from kcpshard.api import conditions as cond
from kcpshard.k8s.duration import human_duration


def parse(value: str | None) -> datetime.datetime | None:
    if not value:
        return None
    try:
        return cond.parse_time(value)
    except ValueError:
        return None


def clock(value: str | None) -> str:
    """HH:MM:SS (UTC) of a timestamp, '' when there is none."""
    at = parse(value)
    return at.strftime("%H:%M:%S") if at else ""


def seconds(value: float) -> str:
    """A duration as a person reads it: 0.21s, 3.4s, 1m12s, 2h3m."""
    if value < 10:
        return f"{value:.2f}s"
    if value < 60:
        return f"{value:.1f}s"
    whole = int(value)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60}s"
    return f"{whole // 3600}h{whole % 3600 // 60}m"


def between(start: str | None, end: str | None) -> str:
    """The time from `start` to `end`; in whole seconds when either is stamped to the second only
    (conditions' lastTransitionTime), so a coarse time does not pose as a precise one."""
    began, ended = parse(start), parse(end)
    if began is None or ended is None:
        return ""
    if "." not in str(start) or "." not in str(end):
        whole = int(ended.replace(microsecond=0).timestamp() - began.replace(microsecond=0).timestamp())
        return f"{whole}s" if whole >= 0 else ""
    if ended < began:
        return ""
    return seconds((ended - began).total_seconds())


def elapsed(since: str | None, now: datetime.datetime | None) -> str:
    """How long something has run so far; '' in a view without a clock."""
    began = parse(since)
    if now is None or began is None:
        return ""
    return seconds(max(0.0, (now - began).total_seconds()))


def age(created: str | None, now: datetime.datetime) -> str:
    """kubectl's AGE column."""
    at = parse(created)
    return human_duration((now - at).total_seconds()) if at is not None else "<unknown>"
