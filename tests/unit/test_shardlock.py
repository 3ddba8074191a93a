"""The shard's own Lease: the reconcile loop and the renewer of one operator never contend for it."""

from __future__ import annotations

import asyncio
from typing import Any

from fakes import LOG, RecordingApi, shard_body
from kcpshard.controller.shardlock import ShardLock
from kcpshard.k8s.api import LEASES, ResourceRef


class SlowApi(RecordingApi):
    """Each read lets other tasks run before its answer arrives, as a request to a real server does."""

    async def get(self, ref: ResourceRef, namespace: str | None, name: str) -> dict[str, Any]:
        read = await super().get(ref, namespace, name)
        await asyncio.sleep(0)
        return read


def lock(api: RecordingApi, identity: str = "me_1") -> ShardLock:
    return ShardLock(api, shard_body(), identity, 15.0, LOG)


async def test_the_loop_and_the_renewer_at_once_both_keep_the_lease() -> None:
    api = SlowApi()
    mine = lock(api)
    assert await mine.try_acquire()
    # The renewer is due while a round asks: before, both read one resourceVersion, one met a 409 and the
    # operator stood by from its own lease.
    results = await asyncio.gather(mine.try_acquire(renew=True), mine.try_acquire(renew=True))
    assert results == [True, True]
    results = await asyncio.gather(mine.try_acquire(renew=True), mine.try_acquire())
    assert results == [True, True]
    assert mine.held and mine.other is None
    assert api.stored(LEASES, "kcpshard-root")["spec"]["holderIdentity"] == "me_1"


async def test_a_fresh_lease_is_not_written_again_but_a_renewal_is() -> None:
    api = RecordingApi()
    mine = lock(api)
    assert await mine.try_acquire()
    api.requests.clear()
    assert await mine.try_acquire()
    assert api.requests == []  # renewed a moment ago: the round asks nothing
    assert await mine.try_acquire(renew=True)
    assert [verb for verb, _, _ in api.requests] == ["get", "replace"]


async def test_another_live_holder_keeps_it() -> None:
    api = RecordingApi()
    theirs, mine = lock(api, "other_1"), lock(api, "me_1")
    assert await theirs.try_acquire()
    assert not await mine.try_acquire()
    assert mine.other == "other_1" and not mine.held
