"""The index of every shard by the front it takes, and the conflict rule that reads it."""

from __future__ import annotations

from typing import Any

from fakes import SPEC, shard_body
from kcpshard.controller.shard_index import ShardIndex, index_entries
from kcpshard.roll.conflicts import front_conflicts
from kcpshard.roll.observed import Neighbour

ME = ("2026-12-01T12:00:00Z", "default", "root")


def body(name: str, created: str = "2026-12-01T11:00:00Z", **front: Any) -> dict[str, Any]:
    shard = shard_body(name)
    shard["metadata"]["creationTimestamp"] = created
    shard["spec"]["front"] |= front
    return shard


def test_a_shard_is_indexed_by_node_and_front_port() -> None:
    entries = index_entries(body("other", address="0.0.0.0"))
    assert entries == {
        ("front", "n1", 6443): Neighbour(
            "default", "other", "2026-12-01T11:00:00Z", node="n1", front_address="0.0.0.0", front_port=6443
        )
    }


def test_a_shard_being_deleted_or_without_a_front_is_not_indexed() -> None:
    deleting = body("other")
    deleting["metadata"]["deletionTimestamp"] = "2026-12-01T12:00:00Z"
    assert index_entries(deleting) == {}
    unfinished = body("other")
    del unfinished["spec"]["front"]
    assert index_entries(unfinished) == {}


def test_neighbours_are_the_others_on_the_same_node_and_port() -> None:
    index: dict[Any, list[Neighbour]] = {}
    for shard in (body("root"), body("other"), body("elsewhere", port=7443)):
        for key, value in index_entries(shard).items():
            index.setdefault(key, []).append(value)
    assert [n.name for n in ShardIndex(index).neighbours("default", "root", SPEC)] == ["other"]
    assert ShardIndex().neighbours("default", "root", SPEC) == ()


def neighbour(name: str, created: str, address: str = "127.0.0.1", port: int = 6443) -> Neighbour:
    return Neighbour("default", name, created, node="n1", front_address=address, front_port=port)


def test_the_younger_of_two_shards_on_one_port_stalls() -> None:
    older = neighbour("older", "2026-12-01T11:00:00Z")
    younger = neighbour("younger", "2026-12-01T13:00:00Z")
    assert front_conflicts(SPEC, ME, [older, younger]) == [
        "front port 6443 on node n1 is already used by KcpShard default/older: choose another spec.front.port"
    ]


def test_same_creation_time_orders_by_namespace_and_name() -> None:
    twin = neighbour("abc", ME[0])
    assert front_conflicts(SPEC, ME, [twin])  # "abc" < "root"
    assert not front_conflicts(SPEC, ME, [neighbour("zzz", ME[0])])


def test_two_addresses_on_one_node_share_a_port_unless_one_is_a_wildcard() -> None:
    other_address = neighbour("older", "2026-12-01T11:00:00Z", address="10.0.0.5")
    assert front_conflicts(SPEC, ME, [other_address]) == []
    wildcard = neighbour("older", "2026-12-01T11:00:00Z", address="0.0.0.0")
    assert len(front_conflicts(SPEC, ME, [wildcard])) == 1
