"""The kopf handlers that wake a shard's loop: they run in the event loop (kopf runs sync handlers in
threads, where setting an asyncio.Event is not thread-safe) and wake the right shard."""

from __future__ import annotations

import inspect

from kcpshard.controller import handlers
from kcpshard.k8s import builders


def test_wake_handlers_are_coroutines_so_kopf_runs_them_in_the_loop() -> None:
    for handler in (handlers.shard_changed, handlers.slot_changed, handlers.workload_changed):
        assert inspect.iscoroutinefunction(handler), handler.__name__


async def test_each_wakes_its_shard_only() -> None:
    labels = {builders.LABEL_SHARD: "root"}
    await handlers.slot_changed(labels=labels, namespace="default")
    assert handlers.WAKEUPS.event("default", "root").is_set()
    assert not handlers.WAKEUPS.event("default", "other").is_set()
    handlers.WAKEUPS.forget("default", "root")
    await handlers.workload_changed(labels=labels, namespace="default")
    await handlers.shard_changed(name="other", namespace="default")
    assert handlers.WAKEUPS.event("default", "root").is_set()
    assert handlers.WAKEUPS.event("default", "other").is_set()
    handlers.WAKEUPS.forget("default", "root")
    handlers.WAKEUPS.forget("default", "other")
