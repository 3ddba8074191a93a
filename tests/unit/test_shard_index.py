"""The index of every shard by the front it takes, and the conflict rule that reads it."""

from __future__ import annotations

from typing import Any

from fakes import SPEC, shard_body
from kcpshard.controller.shard_index import ShardIndex, index_entries
from kcpshard.roll.conflicts import front_conflicts, store_conflicts
from kcpshard.roll.observed import Neighbour

ME = ("2026-12-01T12:00:00Z", "default", "root")


def body(name: str, created: str = "2026-12-01T11:00:00Z", **front: Any) -> dict[str, Any]:
    shard = shard_body(name)
    shard["metadata"]["creationTimestamp"] = created
    shard["spec"]["front"] |= front
    return shard


def test_a_shard_is_indexed_by_node_and_front_port_and_by_its_store() -> None:
    entries = index_entries(body("other", address="0.0.0.0"))
    other = Neighbour(
        "default",
        "other",
        "2026-12-01T11:00:00Z",
        node="n1",
        front_address="0.0.0.0",
        front_port=6443,
        etcd_endpoints=("n1/http://loopback:2379",),
        etcd_prefix="/registry",
    )
    assert entries == {("front", "n1", 6443): other, ("etcd", "n1/http://loopback:2379", 0): other}


def test_a_shard_being_deleted_or_without_a_front_is_not_indexed() -> None:
    deleting = body("other")
    deleting["metadata"]["deletionTimestamp"] = "2026-12-01T12:00:00Z"
    assert index_entries(deleting) == {}
    unfinished = body("other")
    del unfinished["spec"]["front"]
    assert index_entries(unfinished) == {}


def test_neighbours_are_the_others_on_the_same_node_and_port() -> None:
    index: dict[Any, list[Neighbour]] = {}
    elsewhere = body("elsewhere", port=7443)
    elsewhere["spec"]["store"] = {"etcd": {"endpoints": ["http://10.9.9.9:2379"]}}
    for shard in (body("root"), body("other"), elsewhere, body("same-store", port=7444)):
        for key, value in index_entries(shard).items():
            index.setdefault(key, []).append(value)
    found = ShardIndex(index).neighbours("default", "root", SPEC)
    assert sorted(n.name for n in found) == ["other", "same-store"]
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


# ----- one store, one shard -------------------------------------------------------------------------


def store_body(name: str, created: str, endpoints: list[str], prefix: str | None = None, **spec: Any) -> dict:
    shard = body(name, created, port=7000 + len(name))  # a front of its own: only the store can clash
    shard["spec"]["store"] = {"etcd": {"endpoints": endpoints, **({"prefix": prefix} if prefix else {})}}
    shard["spec"] |= spec
    return shard


def spec_of(shard: dict) -> Any:
    return type(SPEC).model_validate(shard["spec"])


def store_clash(mine: dict, others: list[dict]) -> list[str]:
    """What the younger `mine` is told, with neighbours found through the index as a round finds them."""
    index: dict[Any, list[Neighbour]] = {}
    for shard in (mine, *others):
        for key, value in index_entries(shard).items():
            index.setdefault(key, []).append(value)
    meta = mine["metadata"]
    me = (meta["creationTimestamp"], "default", meta["name"])
    neighbours = ShardIndex(index).neighbours("default", meta["name"], spec_of(mine))
    return store_conflicts(spec_of(mine), me, neighbours)


OLD, NEW = "2026-12-01T11:00:00Z", "2026-12-01T12:00:00Z"


def test_the_younger_of_two_shards_on_one_etcd_and_prefix_is_told_whom_and_what_to_set() -> None:
    first = store_body("first", OLD, ["http://10.0.0.5:2379"])
    copy = store_body("copy", NEW, ["https://10.0.0.9:2379", "http://10.0.0.5:2379/"])
    [message] = store_clash(copy, [first])
    assert "KcpShard default/first" in message and "http://10.0.0.5:2379/" in message, message
    assert "spec.store.etcd.prefix" in message and "/copy" in message, message
    assert store_clash(first, [copy]) == []  # the older keeps its store


def test_nested_prefixes_overlap_and_sibling_prefixes_do_not() -> None:
    first = store_body("first", OLD, ["http://10.0.0.5:2379"], prefix="/shards/a")
    assert store_clash(store_body("b", NEW, ["http://10.0.0.5"], prefix="/shards/a/b"), [first])
    assert store_clash(store_body("b", NEW, ["http://10.0.0.5:2379"], prefix="/shards"), [first])
    assert store_clash(store_body("b", NEW, ["http://10.0.0.5:2379"], prefix="/shards/a/"), [first])
    assert not store_clash(store_body("b", NEW, ["http://10.0.0.5:2379"], prefix="/shards/ab"), [first])
    assert not store_clash(store_body("b", NEW, ["http://10.0.0.5:2379"], prefix="/shards/b"), [first])
    # No prefix is kcp's default, /registry.
    assert store_clash(
        store_body("b", NEW, ["http://10.0.0.5:2379"]),
        [store_body("a", OLD, ["http://10.0.0.5:2379"], prefix="/registry")],
    )


def test_loopback_etcd_is_the_nodes_own_and_other_etcds_do_not_clash() -> None:
    here = store_body("a", OLD, ["http://127.0.0.1:2379"])
    assert store_clash(store_body("b", NEW, ["http://localhost:2379"]), [here])
    assert not store_clash(store_body("b", NEW, ["http://127.0.0.1:2379"], node="n2"), [here])
    assert not store_clash(store_body("b", NEW, ["http://127.0.0.1:2380"]), [here])


def test_two_shards_on_one_kine_secret_clash() -> None:
    kine = {"kine": {"endpointSecretRef": {"name": "dsn", "key": "endpoint"}}}
    first = store_body("first", OLD, ["http://x:1"], store=kine)
    [message] = store_clash(store_body("second", NEW, ["http://x:1"], store=kine), [first])
    assert "Secret key default/dsn/endpoint" in message and "KcpShard default/first" in message
    other = {"kine": {"endpointSecretRef": {"name": "dsn2", "key": "endpoint"}}}
    assert not store_clash(store_body("second", NEW, ["http://x:1"], store=other), [first])
