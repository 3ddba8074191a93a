"""Waiting for something with a time limit, in one place.

Python 3.11's `asyncio.wait_for` can lose a cancel that comes just as the awaited thing finishes: it
returns the result and the cancelled task runs on (CPython issue gh-86296; 3.12 rewrote `wait_for` on
`asyncio.timeout`, gh-96764). The slot agent cancels its watchers when a stop comes, and a watcher that
ran on kept kcp from being stopped. `asyncio.timeout` (3.11) counts cancels and never loses one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def within(awaitable: Awaitable[T], seconds: float | None) -> T:
    """`await awaitable`, cancelled after `seconds` (TimeoutError; None: no limit); a cancel from outside
    is never lost."""
    async with asyncio.timeout(None if seconds is None else max(seconds, 0.0)):
        return await awaitable
