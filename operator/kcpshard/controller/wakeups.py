"""Wake-ups of the per-shard reconcile loops.

Watch events of KcpShards, KcpSlots and slot Jobs set the shard's event, so each
step starts as soon as the condition it waits for is written, not at the next poll.
"""

from __future__ import annotations

import asyncio

from kcpshard.timeouts import within


class Wakeups:
    def __init__(self) -> None:
        self._events: dict[tuple[str, str], asyncio.Event] = {}

    def event(self, namespace: str, shard: str) -> asyncio.Event:
        return self._events.setdefault((namespace, shard), asyncio.Event())

    def wake(self, namespace: str | None, shard: str | None) -> None:
        if namespace and shard:
            self.event(namespace, shard).set()

    def forget(self, namespace: str, shard: str) -> None:
        self._events.pop((namespace, shard), None)

    async def wait(self, namespace: str, shard: str, timeout: float) -> bool:
        """Wait for a wake-up or the timeout; True when woken."""
        event = self.event(namespace, shard)
        try:
            await within(event.wait(), timeout)
        except TimeoutError:
            return False
        finally:
            event.clear()
        return True
