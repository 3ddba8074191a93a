"""When a serving slot's kcp serves on after a SIGTERM (agent/slot_hold.py), and how long its pod may."""

from __future__ import annotations

from typing import Any

import pytest

from fakes import RecordingApi
from kcpshard.agent.slot_hold import SINGLE, read_stop_timeout, still_serves, stop_timeout_of
from kcpshard.api.models import KcpShardSpec, Shape
from kcpshard.k8s import builders
from kcpshard.k8s.api import KCPSHARDS


def shard(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "root"}, "spec": {"shape": "BlueGreen"}, "status": status}


@pytest.mark.parametrize(
    ("obj", "slot", "serves"),
    [
        (shard(activeSlot="a", front={"observedBackend": "a"}), "a", True),
        # flipped in the status, the front not yet: clients still reach a
        (shard(activeSlot="b", front={"observedBackend": "a"}), "a", True),
        # the recovery's flip recorded, the front not confirmed yet either way
        (shard(activeSlot="b", front={}), "a", False),
        (shard(activeSlot="b", front={"observedBackend": "b"}), "a", False),
        # the new slot of a roll, aborted before the flip: never served
        (shard(activeSlot="a", front={"observedBackend": "a"}, rollout={"toSlot": "b"}), "b", False),
        # a recovery from a under way: a serves until the flip
        (shard(activeSlot="a", rollout={"fromSlot": "a", "toSlot": "b", "recovery": True}), "a", True),
        (shard(activeSlot="a", rollout={"shape": "Single", "fromSlot": "a", "toSlot": "a"}), "a", False),
        (None, "a", False),
    ],
)
def test_a_slot_holds_only_while_the_shard_serves_it(
    obj: dict[str, Any] | None, slot: str, serves: bool
) -> None:
    assert still_serves(obj, slot) is serves


def test_a_shard_being_deleted_or_of_the_single_shape_holds_nothing() -> None:
    deleting = {
        **shard(activeSlot="a"),
        "metadata": {"name": "root", "deletionTimestamp": "2026-12-05T00:00:00Z"},
    }
    single = {**shard(activeSlot="a"), "spec": {"shape": "Single"}}
    assert not still_serves(deleting, "a") and not still_serves(single, "a")


def test_a_blue_green_slot_holds_a_replacements_start_and_flip_and_a_single_one_nothing() -> None:
    spec = {"node": "n1", "kcp": {"version": "v0.32.1"}, "front": {"port": 6443}}
    spec["store"] = {"etcd": {"endpoints": ["https://127.0.0.1:2379"]}}
    assert builders.hold_timeout_seconds(KcpShardSpec.model_validate(spec)) == 300 + 30
    assert builders.hold_timeout_seconds(KcpShardSpec.model_validate({**spec, "shape": "Single"})) == 0
    assert Shape.SINGLE == SINGLE  # the agent's own spelling


@pytest.mark.parametrize(
    ("roll", "expected"),
    [
        ({"stopTimeoutSeconds": 3}, 3.0),  # shortened for the roll under way: the agent kills at 3 s
        ({"stopTimeoutSeconds": 120}, 22.0),  # never longer than the agent's own (the pod's grace holds it)
        ({}, 22.0),
        ({"stopTimeoutSeconds": True}, 22.0),
    ],
)
def test_the_stop_timeout_is_the_shards_as_read_at_the_stop_at_most_the_agents(
    roll: dict[str, Any], expected: float
) -> None:
    obj = {"metadata": {"name": "root"}, "spec": {"roll": roll}}
    assert stop_timeout_of(obj, 22.0) == expected
    assert stop_timeout_of(None, 22.0) == 22.0


async def test_a_shard_that_cannot_be_read_leaves_the_agents_own_stop_timeout() -> None:
    api = RecordingApi()
    api.put(
        KCPSHARDS,
        {"metadata": {"name": "root", "namespace": "default"}, "spec": {"roll": {"stopTimeoutSeconds": 5}}},
    )
    assert await read_stop_timeout(api, "default", "root", 22.0) == 5.0  # type: ignore[arg-type]
    assert await read_stop_timeout(api, "default", "other", 22.0) == 22.0  # type: ignore[arg-type]
    api.fail("get", "kcpshards", "root")
    assert await read_stop_timeout(api, "default", "root", 22.0) == 22.0  # type: ignore[arg-type]
