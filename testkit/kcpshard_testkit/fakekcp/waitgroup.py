"""A counter that can be awaited until it drops to zero (Go's sync.WaitGroup / kube's SafeWaitGroup)."""

from __future__ import annotations

import asyncio
import contextlib


class WaitGroup:
    def __init__(self) -> None:
        self.count = 0
        self._zero = asyncio.Event()
        self._zero.set()

    def add(self) -> None:
        self.count += 1
        self._zero.clear()

    def done(self) -> None:
        self.count -= 1
        if self.count <= 0:
            self.count = 0
            self._zero.set()

    async def wait(self, deadline_seconds: float) -> bool:
        """True when it reached zero within `deadline_seconds`."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._zero.wait(), deadline_seconds)
        return self.count == 0
