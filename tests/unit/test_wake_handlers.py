"""The kopf handlers that wake a shard's loop: they run in the event loop (kopf runs sync handlers in
threads, where setting an asyncio.Event is not thread-safe) and wake the right shard."""

from __future__ import annotations

import inspect
from functools import partial

import kopf

from fakes import LOG, RecordedEvents, RecordingApi, shard_body
from kcpshard.controller import handlers
from kcpshard.controller.status_writer import StatusWriter
from kcpshard.controller.wakeups import Wakeups
from kcpshard.k8s import builders
from kcpshard.k8s.api import KCPSHARDS
from kcpshard.roll.observed import Seen


def meta(version: str) -> kopf.Meta:
    return kopf.Meta({"metadata": {"resourceVersion": version}})


def test_wake_handlers_are_coroutines_so_kopf_runs_them_in_the_loop() -> None:
    for handler in (handlers.shard_changed, handlers.slot_changed, handlers.workload_changed):
        assert inspect.iscoroutinefunction(handler), handler.__name__


async def test_each_wakes_its_shard_only() -> None:
    labels = {builders.LABEL_SHARD: "root"}
    await handlers.slot_changed(labels=labels, namespace="default", meta=meta("7"))
    assert handlers.WAKEUPS.event("default", "root").is_set()
    assert not handlers.WAKEUPS.event("default", "other").is_set()
    handlers.WAKEUPS.forget("default", "root")
    await handlers.workload_changed(labels=labels, namespace="default")
    await handlers.shard_changed(name="other", namespace="default", meta=meta("8"))
    assert handlers.WAKEUPS.event("default", "root").is_set()
    assert handlers.WAKEUPS.event("default", "other").is_set()
    handlers.WAKEUPS.forget("default", "root")
    handlers.WAKEUPS.forget("default", "other")


async def test_the_events_of_a_loops_own_writes_wake_nothing() -> None:
    wakeups = Wakeups()
    wakeups.own("default", "root", {"metadata": {"resourceVersion": "41"}})
    wakeups.wake("default", "root", "41")  # the event of our own write
    assert not wakeups.event("default", "root").is_set()
    wakeups.wake("default", "other", "41")  # the same version means nothing for another shard
    assert wakeups.event("default", "other").is_set()
    wakeups.wake("default", "root", "42")  # someone else's change after ours
    assert wakeups.event("default", "root").is_set()
    assert await wakeups.wait("default", "root", 0.0)
    wakeups.wake("default", "root")  # no version known: always news
    assert await wakeups.wait("default", "root", 0.0)


async def test_a_status_write_tells_the_wakeups_what_it_wrote_and_a_read_does_not() -> None:
    api, wakeups = RecordingApi(), Wakeups()
    api.put(KCPSHARDS, shard_body())
    writer = StatusWriter(
        api, "default", "root", LOG, RecordedEvents(), own=partial(wakeups.own, "default", "root")
    )
    await writer.first_sight(Seen(name="root", generation=2))
    written = api.stored(KCPSHARDS, "root")["metadata"]["resourceVersion"]
    wakeups.wake("default", "root", written)
    assert not wakeups.event("default", "root").is_set()
    # Someone else writes; our next write finds nothing to change in what it reads: no write, news stays news
    other = api.put(KCPSHARDS, api.stored(KCPSHARDS, "root"))["metadata"]["resourceVersion"]
    await writer.first_sight(Seen(name="root", generation=2))
    assert api.stored(KCPSHARDS, "root")["metadata"]["resourceVersion"] == other
    wakeups.wake("default", "root", other)
    assert wakeups.event("default", "root").is_set()
