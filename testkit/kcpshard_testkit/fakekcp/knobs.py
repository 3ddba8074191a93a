"""Test knobs read from the environment (documented in the package docstring)."""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_VERSION = "v0.32.1"


def _float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, got {raw!r}") from None


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class Knobs:
    version: str
    startup_seconds: float
    never_ready: bool
    crash_after: float | None
    ignore_sigterm: bool
    lease_duration: float
    renew_deadline: float
    retry_period: float
    controller_period: float
    retry_after_hold: float
    watch_hold: float
    rsa_bits: int

    @classmethod
    def from_env(cls) -> Knobs:
        crash = os.environ.get("KCP_FAKE_CRASH_AFTER_SECONDS", "").strip()
        return cls(
            version=os.environ.get("KCP_FAKE_VERSION", "").strip() or DEFAULT_VERSION,
            startup_seconds=_float("KCP_FAKE_STARTUP_SECONDS", 1.0),
            never_ready=_flag("KCP_FAKE_NEVER_READY"),
            crash_after=_float("KCP_FAKE_CRASH_AFTER_SECONDS", 0.0) if crash else None,
            ignore_sigterm=_flag("KCP_FAKE_IGNORE_SIGTERM"),
            lease_duration=_float("KCP_FAKE_LEASE_DURATION_SECONDS", 60.0),
            renew_deadline=_float("KCP_FAKE_RENEW_DEADLINE_SECONDS", 5.0),
            retry_period=_float("KCP_FAKE_RETRY_PERIOD_SECONDS", 2.0),
            controller_period=_float("KCP_FAKE_CONTROLLER_PERIOD_SECONDS", 0.2),
            retry_after_hold=_float("KCP_FAKE_RETRY_AFTER_HOLD_SECONDS", 0.0),
            watch_hold=_float("KCP_FAKE_WATCH_HOLD_SECONDS", 60.0),
            rsa_bits=int(_float("KCP_FAKE_RSA_BITS", 4096)),
        )
