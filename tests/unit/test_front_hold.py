"""The front pod's hold after SIGTERM (agent/front_hold.py): whom it waits for, and when it stops."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kcpshard.agent.errors import UsageError
from kcpshard.agent.front_hold import being_deleted, serving_replacement, shard_stays, stop_when_replaced
from kcpshard.agent.front_options import parse_args


def _pod(name: str, ready: bool, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-06T00:00:00Z"
    return {"metadata": meta, "status": {"conditions": [{"type": "Ready", "status": str(ready)}]}}


def test_only_another_ready_pod_that_stays_ends_the_hold() -> None:
    assert serving_replacement([_pod("me", ready=True)], "me") is None
    assert serving_replacement([_pod("me", True), _pod("new", ready=False)], "me") is None
    assert serving_replacement([_pod("me", True), _pod("old", True, deleting=True)], "me") is None
    assert serving_replacement([_pod("me", True), {"metadata": {"name": "bare"}}], "me") is None
    assert serving_replacement([_pod("me", True), _pod("new", ready=True)], "me") == "new"


def test_only_a_pod_being_deleted_holds() -> None:
    """A SIGTERM without a deletion (a restart in place, a node or runner stopping) brings no replacement."""
    assert being_deleted([_pod("me", True, deleting=True), _pod("new", False)], "me")
    assert not being_deleted([_pod("me", True), _pod("old", True, deleting=True)], "me")
    assert not being_deleted([_pod("other", True, deleting=True)], "me")


def test_no_hold_for_a_shard_that_is_gone_or_being_deleted() -> None:
    assert shard_stays({"metadata": {"name": "root"}})
    assert not shard_stays(None)
    assert not shard_stays({"metadata": {"deletionTimestamp": "2026-12-06T00:00:00Z"}})


async def test_the_first_sigterm_holds_then_stops() -> None:
    asked, stop, released = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def hold() -> str:
        await released.wait()
        return "pod new serves"

    task = asyncio.create_task(stop_when_replaced(asked, stop, hold))
    asked.set()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not stop.is_set()  # still holding: the front serves on
    released.set()
    await asyncio.wait_for(task, 5)
    assert stop.is_set()


async def test_a_second_sigterm_does_not_hold() -> None:
    asked, stop = asyncio.Event(), asyncio.Event()
    held: list[bool] = []

    async def hold() -> str:
        held.append(True)
        return "held"

    stop.set()
    asked.set()
    await asyncio.wait_for(stop_when_replaced(asked, stop, hold), 5)
    assert held == []


def test_hold_seconds_is_an_option_that_must_not_be_negative() -> None:
    assert parse_args(["--shard", "root"]).hold_seconds == 0
    assert parse_args(["--shard", "root", "--hold-seconds", "30"]).hold_seconds == 30
    with pytest.raises(UsageError):
        parse_args(["--shard", "root", "--hold-seconds", "-1"])
