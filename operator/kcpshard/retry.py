"""Trying again what may pass by itself, in one place: the waits between tries, and what passes.

Every retry of the product goes through here: a reconcile round that failed, an agent's report while the
API server is away, a front that cannot start HAProxy yet, a kcp call while kcp comes up, a watch that
broke. Each caller says which failures pass (`kinds`, `not_now`); the waits follow a `Backoff`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import httpx

T = TypeVar("T")
Passing = Callable[[BaseException], bool]


@dataclass(frozen=True)
class Backoff:
    """Waits that start at `first` seconds and double with each failure in a row, up to `cap`."""

    first: float
    cap: float

    def delay(self, failures: int) -> float:
        """The wait after `failures` failures in a row (none before the first)."""
        if failures < 1:
            return 0.0
        return float(min(self.cap, self.first * 2.0 ** min(failures - 1, 32)))

    @classmethod
    def every(cls, seconds: float) -> Backoff:
        """The same wait after every failure: a poll."""
        return cls(seconds, seconds)


def kinds(*types: type[BaseException]) -> Passing:
    """Failures of these types pass."""
    return lambda exc: isinstance(exc, types)


def not_now(exc: BaseException) -> bool:
    """The server did not answer, or answered "not now": 429 Too Many Requests or a 5xx (the status of
    an API server's or kcp's error)."""
    if isinstance(exc, httpx.TransportError):
        return True
    status = getattr(exc, "status", None)
    return isinstance(status, int) and (status == 429 or status >= 500)


async def retrying(
    call: Callable[[], Awaitable[T]],
    *,
    passing: Passing,
    backoff: Backoff,
    attempts: int | None = None,
    budget: float | None = None,
    on_retry: Callable[[BaseException, float], None] | None = None,
) -> T:
    """`call()` until it returns. A failure `passing` accepts is tried again after the backoff's wait
    (`on_retry` is told first) while there are `attempts` (calls) and `budget` (seconds) left; any other
    failure, and the last one, is raised."""
    started = time.monotonic()
    failures = 0
    while True:
        try:
            return await call()
        except Exception as exc:
            failures += 1
            spent = attempts is not None and failures >= attempts
            late = budget is not None and time.monotonic() - started >= budget
            if spent or late or not passing(exc):
                raise
            wait = backoff.delay(failures)
            if budget is not None:  # the last try comes at the end of the budget, not after it
                wait = min(wait, max(0.0, budget - (time.monotonic() - started)))
            if on_retry is not None:
                on_retry(exc, wait)
            await asyncio.sleep(wait)
