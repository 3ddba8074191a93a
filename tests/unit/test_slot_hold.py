"""When a serving slot's kcp serves on after a SIGTERM (agent/slot_hold.py), and how long its pod may."""

from __future__ import annotations

from typing import Any

import pytest

from kcpshard.agent.slot_hold import SINGLE, still_serves
from kcpshard.api.models import KcpShardSpec, Shape
from kcpshard.k8s import builders


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
