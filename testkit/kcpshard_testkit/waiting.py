"""Waiting on a condition with a deadline: what tests do instead of sleeping."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def wait_for(
    what: str, probe: Callable[[], Awaitable[T | None]], timeout: float, interval: float = 0.1
) -> T:
    """Poll `probe` until it returns something truthy; raise with `what` on timeout.

    An AssertionError from `probe` fails at once: the probe saw something wrong, and waiting longer
    would only hide it behind a timeout. Other exceptions are retried (the thing polled may not
    exist yet).
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = await probe()
        except AssertionError:
            raise
        except Exception as exc:
            last_error = exc
            value = None
        if value:
            return value
        await asyncio.sleep(interval)
    suffix = f" (last error: {last_error})" if last_error else ""
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{suffix}")
