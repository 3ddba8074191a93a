"""The observer against a recording API: it only reads, and returns what the plan needs."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from fakes import LOG, SPEC, RecordingApi, RecordingKcp, lease, shard_body
from kcpshard.api.models import SlotName
from kcpshard.controller.config import OperatorConfig
from kcpshard.controller.kcp_access import NoRootMaterial
from kcpshard.controller.observe import Observer
from kcpshard.controller.shard_index import ShardIndex, index_entries
from kcpshard.controller.workload_views import front_availability, front_pod_view
from kcpshard.k8s import builders, front_workload
from kcpshard.k8s.api import (
    DEPLOYMENTS,
    JOBS,
    KCPSHARDS,
    KCPSLOTS,
    NODES,
    PODS,
    SECRETS,
    ApiError,
    ResourceRef,
)
from kcpshard.kcp.errors import KcpError
from kcpshard.roll.observed import (
    FrontAvailability,
    FrontPodView,
    FrontWorkload,
    LeaseReading,
    Observed,
    ShardOnly,
)

URL = "https://127.0.0.1:6443"


def observer(api: RecordingApi, kcp: RecordingKcp | None = None, index: ShardIndex | None = None) -> Observer:
    kcp = kcp or RecordingKcp()
    return Observer(api, "default", "root", OperatorConfig(), index or ShardIndex(), kcp.connect, LOG)  # type: ignore[arg-type]


def labelled(kind: str, name: str, slot: str, revision: str, **more: Any) -> dict[str, Any]:
    labels = builders.labels("root", "slot", **{builders.LABEL_SLOT: slot, builders.LABEL_REVISION: revision})
    return {"kind": kind, "metadata": {"name": name, "labels": labels | more.pop("labels", {})}, **more}


async def test_a_full_round_only_reads() -> None:
    api = RecordingApi()
    api.put(KCPSHARDS, shard_body())
    obs = await observer(api).observe()
    assert isinstance(obs, Observed)
    assert {verb for verb, _, _ in api.requests} == {"get", "list"}
    assert sorted(r[1] for r in api.requests) == [
        "deployments",
        "jobs",
        "kcpshards",
        "kcpslots",
        "pods",
        "secrets",
    ]
    assert not obs.shared_secret and obs.front is FrontWorkload.ABSENT
    assert obs.kcp_lease is None  # read only when the plan asks
    assert obs.generation == 2 and obs.shard["metadata"]["uid"] == "uid-root"


async def test_a_status_write_goes_on_from_its_own_answer_and_a_new_spec_or_a_deletion_does_not() -> None:
    api = RecordingApi()
    api.put(KCPSHARDS, shard_body())
    watcher = observer(api)
    obs = await watcher.observe()
    assert isinstance(obs, Observed)
    read = len(api.requests)
    written = api.stored(KCPSHARDS, "root") | {"status": {"activeSlot": "b", "rollout": None}}
    follow = watcher.with_shard(obs, written)
    assert follow is not None and len(api.requests) == read  # nothing read again
    assert follow.status.active_slot == "b" and follow.shard is written
    assert follow.slots == obs.slots and follow.front is obs.front
    respec = written | {"metadata": written["metadata"] | {"generation": obs.generation + 1}}
    assert watcher.with_shard(obs, respec) is None  # a new spec: the round observes again
    gone = written | {"metadata": written["metadata"] | {"deletionTimestamp": "2026-12-01T12:00:00Z"}}
    assert watcher.with_shard(obs, gone) is None


class SlowShardApi(RecordingApi):
    """The shard's GET answers only once every other read of the round has been asked: a round that
    waited for the shard before reading the rest never finishes."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: set[str] = set()
        self.all_asked = asyncio.Event()

    def _request(self, verb: str, ref: ResourceRef, name: str, subresource: str | None = None) -> None:
        super()._request(verb, ref, name, subresource)
        self.asked.add(ref.plural)
        if {"kcpslots", "jobs", "pods", "secrets", "deployments"} <= self.asked:
            self.all_asked.set()

    async def get(self, ref: ResourceRef, namespace: str | None, name: str) -> dict[str, Any]:
        if ref.plural == "kcpshards":
            self._request("get", ref, name)
            await asyncio.wait_for(self.all_asked.wait(), timeout=5)
            return copy.deepcopy(self._get(ref, namespace, name))
        return await super().get(ref, namespace, name)


async def test_a_round_reads_the_rest_beside_the_shard_one_round_trip() -> None:
    api = SlowShardApi()
    api.put(KCPSHARDS, shard_body())
    obs = await observer(api).observe()
    assert isinstance(obs, Observed) and obs.generation == 2


async def test_a_shard_being_deleted_ends_the_round_with_the_shard_alone() -> None:
    api = RecordingApi()
    body = shard_body()
    body["metadata"]["deletionTimestamp"] = "2026-12-01T12:00:00Z"
    api.put(KCPSHARDS, body)
    api.put(KCPSLOTS, {"metadata": {"name": "root-a", "labels": {"kcpshard.dev/shard": "root"}}})
    obs = await observer(api).observe()
    assert isinstance(obs, ShardOnly) and obs.deleting
    assert obs.shard["metadata"]["deletionTimestamp"]  # what it read of the shard is all it returns


async def test_a_spec_that_does_not_parse_is_read_alone_with_what_is_wrong() -> None:
    api = RecordingApi()
    body = shard_body()
    del body["spec"]["node"]
    api.put(KCPSHARDS, body)
    obs = await observer(api).observe()
    assert isinstance(obs, ShardOnly) and obs.spec_error == "spec.node: Field required"
    assert api.requests == [("get", "kcpshards", "root")]


async def test_the_recorded_specs_are_parsed_once() -> None:
    api = RecordingApi()
    target = shard_body()["spec"] | {"roll": {"readyTimeoutSeconds": 7}}
    rollout = {
        "step": "Starting",
        "toSlot": "b",
        "targetRevision": "r",
        "startedAt": "t",
        "targetSpec": target,
    }
    api.put(KCPSHARDS, shard_body(rollout=rollout, activeSpec=shard_body()["spec"]))
    obs = await observer(api).observe()
    assert isinstance(obs, Observed)
    assert obs.target_spec is not None and obs.target_spec.roll.ready_timeout_seconds == 7
    assert obs.active_spec is not None and obs.target_spec_error is None
    broken = {**rollout, "targetSpec": {"node": "n1"}}
    api.put(KCPSHARDS, shard_body(rollout=broken))
    obs = await observer(api).observe()
    assert isinstance(obs, Observed) and obs.target_spec is None
    assert (
        obs.target_spec_error is not None and "status.targetSpec.kcp: Field required" in obs.target_spec_error
    )


async def test_slots_jobs_and_pods_make_the_slot_views() -> None:
    api = RecordingApi()
    api.put(KCPSHARDS, shard_body())
    slot_labels = builders.labels("root", "slot", **{builders.LABEL_SLOT: "b"})
    api.put(
        KCPSLOTS,
        {
            "metadata": {"name": "root-b", "labels": slot_labels},
            "spec": {"slot": "b", "revision": "r1", "start": 1, "roll": "x"},
            "status": {"port": 4321, "conditions": [{"type": "Ready", "status": "True"}]},
        },
    )
    api.put(
        JOBS,
        labelled("Job", "root-b-r1-1", "b", "r1", labels={builders.LABEL_START: "1"}, status={"active": 1}),
    )
    api.put(JOBS, labelled("Job", "root-b-r1-0", "b", "r1", labels={builders.LABEL_START: "0"}))
    api.put(PODS, labelled("Pod", "pod-live", "b", "r1", status={"phase": "Running"}))
    api.put(PODS, labelled("Pod", "pod-done", "b", "r1", status={"phase": "Succeeded"}))
    api.put(PODS, labelled("Pod", "pod-old", "b", "r0", status={"phase": "Running"}))
    obs = await observer(api).observe()
    assert isinstance(obs, Observed)
    view = obs.slots[SlotName.B]
    assert (view.revision, view.start, view.roll_id, view.port) == ("r1", 1, "x", 4321)
    assert view.job is not None and view.job.name == "root-b-r1-1" and view.job.active == 1
    assert view.pods == ("pod-live",) and view.true("Ready")
    assert obs.busy == {
        SlotName.A: (),
        SlotName.B: ("pod-live", "pod-old"),
    }  # a process of an older revision still stops there
    assert obs.job_starts == {(SlotName.B, "r1"): 1}


async def test_the_backup_job_is_read_while_backing_up() -> None:
    api = RecordingApi()
    rollout = {"step": "BackingUp", "id": "r-1", "toSlot": "b", "targetRevision": "r", "startedAt": "t"}
    api.put(KCPSHARDS, shard_body(rollout=rollout))
    failed = {"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}], "failed": 1}
    api.put(JOBS, {"metadata": {"name": "root-backup-r-1"}, "status": failed})
    obs = await observer(api).observe()
    assert isinstance(obs, Observed) and obs.backup is not None
    assert obs.backup.error == "backup Job root-backup-r-1 failed without a report: DeadlineExceeded"
    assert ("get", "jobs", "root-backup-r-1") in api.requests


async def test_the_shards_own_objects_are_compared_with_what_the_spec_asks() -> None:
    api = RecordingApi()
    shard = api.put(KCPSHARDS, shard_body())
    api.put(SECRETS, {"metadata": {"name": "root-shared"}})
    front = front_workload.front_deployment(shard, SPEC)
    api.put(DEPLOYMENTS, front)
    obs = await observer(api).observe()
    assert isinstance(obs, Observed) and obs.shared_secret and obs.front is FrontWorkload.CURRENT
    api.touch(DEPLOYMENTS, "root-front", lambda d: d["metadata"].update(annotations={}))
    obs = await observer(api).observe()
    assert isinstance(obs, Observed) and obs.front is FrontWorkload.STALE


def _node(ready: str, message: str = "") -> dict[str, Any]:
    condition = {"type": "Ready", "status": ready, "lastTransitionTime": "2026-12-01T12:00:00Z"}
    return {"metadata": {"name": "n1"}, "status": {"conditions": [condition | {"message": message}]}}


async def test_an_unavailable_front_reads_the_node_and_says_why_it_is_not_ready() -> None:
    api = RecordingApi()
    shard = api.put(KCPSHARDS, shard_body())
    front = front_workload.front_deployment(shard, SPEC)
    front["status"] = {"conditions": [{"type": "Available", "status": "False"}]}
    api.put(DEPLOYMENTS, front)

    async def node_down() -> str | None:
        obs = await observer(api).observe()
        assert isinstance(obs, Observed) and obs.front_availability is not None
        return obs.front_availability.node_down

    assert await node_down() is None  # no such node: the front's pod stays Pending, FrontFailed says so
    api.put(NODES, _node("Unknown", "Kubelet stopped posting node status."))
    assert await node_down() == (
        "node n1 is Unknown since 2026-12-01T12:00:00Z (Kubelet stopped posting node status.)"
    )
    api.put(NODES, _node("True"))
    assert await node_down() is None
    # An operator installed without the right to read nodes says what it can without it.
    api.fail("get", "nodes", error=ApiError(403, "Forbidden", "nodes is forbidden"))
    assert await node_down() is None
    api.fail("get", "nodes", error=ApiError(500, "InternalError", "etcd timed out"))
    with pytest.raises(ApiError):
        await node_down()
    # An available front reads no node.
    api.touch(
        DEPLOYMENTS,
        "root-front",
        lambda d: d.update(status={"conditions": [{"type": "Available", "status": "True"}]}),
    )
    api.requests.clear()
    await observer(api).observe()
    assert not [r for r in api.requests if r[1] == "nodes"]


async def test_neighbours_come_from_the_index_not_from_a_list_of_every_shard() -> None:
    api = RecordingApi()
    api.put(KCPSHARDS, shard_body())
    other = shard_body("other")
    index = ShardIndex({key: [value] for key, value in index_entries(other).items()})
    obs = await observer(api, index=index).observe()
    assert isinstance(obs, Observed) and [n.name for n in obs.neighbours] == ["other"]
    assert ("list", "kcpshards", "") not in api.requests


async def test_kcps_lease_is_read_through_the_front_on_request() -> None:
    api = RecordingApi()
    api.put(KCPSHARDS, shard_body())
    kcp = RecordingKcp(leases=[lease("kcp-1")])
    o = observer(api, kcp)
    obs = await o.observe()
    assert isinstance(obs, Observed)
    read = await o.read_kcp_lease(obs, URL)
    assert read.kcp_lease is not None and read.kcp_lease.holder == "kcp-1" and read.kcp_lease.found
    assert kcp.urls == [URL] and kcp.calls == [("get_lease",), ("close",)]


async def test_a_lease_that_cannot_be_read_is_an_observation_not_an_error() -> None:
    api = RecordingApi()
    api.put(KCPSHARDS, shard_body())
    kcp = RecordingKcp(errors={"get_lease": KcpError("connection refused")})
    o = observer(api, kcp)
    obs = await o.observe()
    assert isinstance(obs, Observed)
    read = await o.read_kcp_lease(obs, URL)
    assert read.kcp_lease == LeaseReading(error="connection refused")

    async def no_material(url: str) -> None:
        raise NoRootMaterial("Secret root-shared has no admin.kubeconfig")

    o.connect = no_material  # type: ignore[assignment]
    read = await o.read_kcp_lease(obs, URL)
    assert read.kcp_lease == LeaseReading(error="Secret root-shared has no admin.kubeconfig")


def test_front_availability_follows_the_deployment_controllers_condition() -> None:
    created = {"metadata": {"creationTimestamp": "2026-12-01T11:00:00Z"}}
    down = {"type": "Available", "status": "False", "lastTransitionTime": "2026-12-01T12:00:00Z"}
    up = {"type": "Available", "status": "True"}
    whole = {"replicas": 1, "updatedReplicas": 1, "conditions": [up]}
    assert front_availability({**created, "status": whole}) == FrontAvailability(True)
    # A new template: the old pod serves, the new one is not available yet.
    progress = {"type": "Progressing", "status": "True", "lastUpdateTime": "2026-12-01T12:01:00Z"}
    replacing = {"replicas": 2, "updatedReplicas": 1, "conditions": [up, progress]}
    assert front_availability({**created, "status": replacing}) == FrontAvailability(
        True, replacing_since="2026-12-01T12:01:00Z"
    )
    assert front_availability({**created, "status": {"conditions": [down]}}) == FrontAvailability(
        False, since="2026-12-01T12:00:00Z"
    )
    # Before the controller wrote anything: unavailable since the Deployment was created.
    assert front_availability(created) == FrontAvailability(False, since="2026-12-01T11:00:00Z")


def test_a_front_pod_says_what_its_container_does() -> None:
    crashing = {
        "metadata": {"name": "root-front-1"},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "restartCount": 4,
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
                }
            ],
        },
    }
    assert front_pod_view(crashing) == FrontPodView(
        "root-front-1", "Running", "waiting: CrashLoopBackOff (back-off 40s), restarted 4 times"
    )
    exited = {
        "metadata": {"name": "p"},
        "status": {"containerStatuses": [{"state": {"terminated": {"reason": "Error", "exitCode": 2}}}]},
    }
    assert front_pod_view(exited).state == "terminated: Error (exit 2)"
    three = {
        "metadata": {"name": "p"},
        "status": {
            "containerStatuses": [
                {"name": "front", "state": {"running": {}}},
                {
                    "name": "haproxy-0",
                    "restartCount": 1,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                },
            ]
        },
    }
    assert front_pod_view(three).state == (
        "front running, haproxy-0 waiting: CrashLoopBackOff, haproxy-0 restarted 1 times"
    )
    unscheduled = {
        "metadata": {"name": "p", "deletionTimestamp": "x"},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "message": "0/1 nodes"}],
        },
    }
    assert front_pod_view(unscheduled) == FrontPodView("p", "Pending", "0/1 nodes", deleting=True)
