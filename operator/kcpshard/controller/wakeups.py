"""Wake-ups of the per-shard reconcile loops.

Watch events of KcpShards, KcpSlots and slot Jobs set the shard's event, so each
step starts as soon as the condition it waits for is written, not at the next poll.
The events of the loop's own status writes wake nothing: the round that wrote them already planned from
what it wrote, and a round spent reading them again would only delay the answer to the next real change
(the front's, after a flip).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping
from typing import Any

from kcpshard.timeouts import within

# The resourceVersions of a shard's own writes kept to recognise their events, which arrive in order and
# soon after: a round writes a handful at most.
OWN_KEPT = 16


class Wakeups:
    def __init__(self) -> None:
        self._events: dict[tuple[str, str], asyncio.Event] = {}
        self._own: dict[tuple[str, str], deque[str]] = {}

    def event(self, namespace: str, shard: str) -> asyncio.Event:
        return self._events.setdefault((namespace, shard), asyncio.Event())

    def wake(self, namespace: str | None, shard: str | None, version: str | None = None) -> None:
        """A change of one of the shard's objects (its resourceVersion `version`, when known)."""
        if namespace and shard and (version is None or version not in self._own.get((namespace, shard), ())):
            self.event(namespace, shard).set()

    def own(self, namespace: str, shard: str, written: Mapping[str, Any]) -> None:
        """The object a write of the shard's own loop returned: its watch event is no news."""
        version = (written.get("metadata") or {}).get("resourceVersion")
        if version:
            self._own.setdefault((namespace, shard), deque(maxlen=OWN_KEPT)).append(str(version))

    def forget(self, namespace: str, shard: str) -> None:
        self._events.pop((namespace, shard), None)
        self._own.pop((namespace, shard), None)

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
