"""`within`: a time limit that never loses a cancel from outside (Python 3.11's wait_for can, gh-86296)."""

from __future__ import annotations

import asyncio

import pytest

from kcpshard.timeouts import within


async def test_a_cancel_that_comes_as_the_wait_ends_is_not_lost() -> None:
    # The race that kept a slot agent from stopping kcp: the awaited thing finishes and the task is
    # cancelled in the same turn of the loop. wait_for on 3.11 returned the result and the task ran on.
    inner: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    ran_on: list[int] = []

    async def watcher() -> None:
        ran_on.append(await within(inner, 10))

    task = asyncio.create_task(watcher())
    await asyncio.sleep(0)  # the watcher now waits on `inner`
    inner.set_result(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ran_on == []


async def test_the_result_comes_back_within_the_time() -> None:
    assert await within(asyncio.sleep(0, result="done"), 5) == "done"


async def test_the_time_running_out_cancels_the_wait() -> None:
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    with pytest.raises(TimeoutError):
        await within(never, 0.01)
    assert never.cancelled()


async def test_no_time_left_still_returns_what_is_already_there() -> None:
    event = asyncio.Event()
    event.set()
    assert await within(event.wait(), -1) is True


async def test_no_limit_waits_for_the_result() -> None:
    assert await within(asyncio.sleep(0.01, result="late"), None) == "late"
