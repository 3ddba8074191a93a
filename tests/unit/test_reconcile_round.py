"""Whole rounds of the loop (observe, plan, act) against the recording fakes: what a round reads, the
actions it takes in order, and that what a handler saw goes back to the plan within the round."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fakes import (
    IDENTITY_MADE,
    LOG,
    REV,
    SPEC,
    RecordedEvents,
    RecordingApi,
    RecordingKcp,
    lease,
    shard_body,
)
from kcpshard.api import conditions as cond
from kcpshard.controller.config import OperatorConfig
from kcpshard.controller.reconciler import ROUND_BACKOFF, ShardReconciler
from kcpshard.controller.wakeups import Wakeups
from kcpshard.k8s import builders, front_workload
from kcpshard.k8s.api import DEPLOYMENTS, JOBS, KCPSHARDS, KCPSLOTS, SECRETS, ApiError, Invalid
from kcpshard.kcp.errors import KcpTimeout
from kcpshard.roll.actions import RESYNC_SECONDS
from kcpshard.roll.plan import REFUSED_RETRY_SECONDS

STARTED = "2026-12-01T12:00:00.000000Z"
SEEN = [{"type": "Ready", "status": "Unknown", "reason": "Observed", "lastTransitionTime": STARTED}]
READS = [
    ("get", "kcpshards", "root"),
    ("list", "kcpslots", "kcpshard.dev/shard=root"),
    ("list", "jobs", "kcpshard.dev/shard=root,kcpshard.dev/component=slot"),
    ("list", "pods", "kcpshard.dev/shard=root,kcpshard.dev/component=slot"),
    ("get", "secrets", "root-shared"),
    ("get", "deployments", "root-front"),
]


def reconciler(api: RecordingApi, kcp: RecordingKcp, events: RecordedEvents) -> ShardReconciler:
    return ShardReconciler(
        api, "default", "root", Wakeups(), OperatorConfig(), LOG, events=events, connect=kcp.connect
    )


def cluster(api: RecordingApi, **status: Any) -> None:
    """Shard root as stored, with its shared Secret and an up-to-date front."""
    shard = api.put(KCPSHARDS, shard_body(conditions=SEEN, **status))
    api.put(SECRETS, builders.shared_secret(shard, SPEC))
    front = front_workload.front_deployment(shard, SPEC)
    front["status"] = {
        "replicas": 1,
        "updatedReplicas": 1,
        "availableReplicas": 1,
        "conditions": [{"type": "Available", "status": "True"}],
    }
    api.put(DEPLOYMENTS, front)


def running_slot(api: RecordingApi, slot: str, revision: str = REV, *, ready: bool = True) -> None:
    """A KcpSlot of roll r1 whose Job runs; ready on port 4321, or not (yet)."""
    shard = api.stored(KCPSHARDS, "root")
    body = builders.kcpslot(shard, builders.SlotName(slot), revision, 0, roll_id="r1")
    if ready:
        body["status"] = {"port": 4321, "conditions": [{"type": "Ready", "status": "True"}]}
    created = api.put(KCPSLOTS, body)
    job = builders.slot_job(shard, SPEC, created)
    job["status"] = {"active": 1}
    api.put(JOBS, job)


def rollout(step: str, **kw: Any) -> dict[str, Any]:
    return {
        "step": step,
        "id": "r1",
        "fromSlot": "a",
        "toSlot": "b",
        "fromRevision": "old",
        "targetRevision": REV,
        "startedAt": STARTED,
        "stepStartedAt": STARTED,
        "timestamps": {"started": STARTED},
        **kw,
    }


def shard_status(api: RecordingApi) -> dict[str, Any]:
    return api.stored(KCPSHARDS, "root")["status"]


async def test_first_sight_is_the_first_write_and_the_next_round_follows_at_once() -> None:
    api, kcp, events = RecordingApi(), RecordingKcp(), RecordedEvents()
    api.put(KCPSHARDS, shard_body())
    assert await reconciler(api, kcp, events).reconcile_once() is None
    reads = len(READS)
    assert api.requests[0] == READS[0] and sorted(api.requests[1:reads]) == sorted(READS[1:])  # at once
    # The write starts from the shard the round read: no second GET.
    assert api.requests[reads:] == [("replace", "kcpshards/status", "root")]
    assert cond.find(shard_status(api)["conditions"], "Ready")["status"] == "Unknown"  # type: ignore[index]
    assert kcp.calls == []


async def test_a_new_shard_gets_its_secret_and_front_then_waits_for_the_front_to_report() -> None:
    api, kcp, events = RecordingApi(), RecordingKcp(), RecordedEvents()
    api.put(KCPSHARDS, shard_body(conditions=SEEN))
    r = reconciler(api, kcp, events)
    waits = [await r.reconcile_once() for _ in range(3)]
    assert waits == [None, None, RESYNC_SECONDS]
    assert api.writes() == [
        ("create", "secrets", "root-shared"),
        *[w for w in IDENTITY_MADE if w[0] == "create"],  # the agents' identity before their first pod
        ("create", "poddisruptionbudgets", "root-serving"),  # and the budget a drain stops at
        ("create", "deployments", "root-front"),
    ]
    assert events.reasons == ["FrontCreated"]


async def test_a_roll_starts_with_the_lease_holder_read_before_anything_changes() -> None:
    """The roll is recorded (with the old holder) before anything is created; its slot follows in the same
    round, from the status that write returned, without reading everything again."""
    api, kcp, events = RecordingApi(), RecordingKcp(leases=[lease("old-kcp")]), RecordedEvents()
    cluster(api, activeSlot="a", activeRevision="old")
    running_slot(api, "a", revision="old")
    assert await reconciler(api, kcp, events).reconcile_once() is None
    assert kcp.urls == ["https://127.0.0.1:6443"] and kcp.calls == [("get_lease",), ("close",)]
    ro = shard_status(api)["rollout"]
    assert (ro["fromSlot"], ro["toSlot"], ro["fromHolder"], ro["step"]) == (
        "a",
        "b",
        "old-kcp",
        "WaitingReady",
    )
    assert api.writes() == [
        ("replace", "kcpshards/status", "root"),
        ("create", "kcpslots", "root-b"),
        *[w for w in IDENTITY_MADE if w[0] != "get"],
        ("create", "jobs", f"root-b-{REV[:8]}-0"),
        ("replace", "kcpshards/status", "root"),  # WaitingReady, stamped when the Job was created
    ]
    stamps = ro["timestamps"]
    assert stamps["slotStarting"] <= stamps["slotCreated"] < ro["stepStartedAt"]
    # One observation: the slots, their Jobs and pods listed once
    assert sorted(r[1] for r in api.requests if r[0] == "list") == ["jobs", "kcpslots", "pods"]
    assert events.reasons == ["RollStarted", "SlotCreated", "WaitingReady"]


async def test_the_handover_frees_a_stale_lease_and_records_the_new_holder_then_goes_on_in_one_round() -> (
    None
):
    """The new holder is recorded before the probe; the probe, the drain (no connections) and the end of the
    roll follow in the same round (no old slot is left to retire here)."""
    api, events = RecordingApi(), RecordedEvents()
    kcp = RecordingKcp(leases=[lease("old-kcp")], new_holder="new-kcp")
    cluster(
        api, activeSlot="b", activeRevision=REV, rollout=rollout("HandingOverLease", fromHolder="old-kcp")
    )
    running_slot(api, "b")
    assert await reconciler(api, kcp, events).reconcile_once() is None
    assert kcp.calls == [
        ("get_lease",),
        ("close",),
        ("delete_lease",),
        ("wait_for_holder", "old-kcp", kcp.calls[3][2]),
        ("close",),
        ("delete_workspaces", "kcpshard-probe-"),
        ("probe", "kcpshard-probe-" + REV[:8], kcp.calls[6][2]),
        ("close",),
    ]
    assert api.writes()[:2] == [
        ("replace", "kcpslots/status", "root-b"),
        ("replace", "kcpshards/status", "root"),
    ]
    assert api.stored(KCPSLOTS, "root-b")["status"]["holderIdentity"] == "new-kcp"
    assert ("get", "kcpslots", "root-b") not in api.requests  # marked from the slot as the round read it
    # Probing written before the probe acts; then the Probed mark, Draining and Retiring (each step a write
    # of its own), and the end of the roll.
    assert api.writes()[2:] == [
        ("replace", "kcpslots/status", "root-b"),
        ("replace", "kcpshards/status", "root"),
        ("replace", "kcpshards/status", "root"),
        ("replace", "kcpshards/status", "root"),
    ]
    assert events.reasons == ["Probing", "Draining", "Retiring", "RollSucceeded"]
    assert shard_status(api)["lastRoll"]["result"] == "Succeeded"


async def test_an_unrecorded_holder_that_renews_is_never_freed() -> None:
    api, events = RecordingApi(), RecordedEvents()
    first, renewed = lease("new-kcp", "2026-11-30T00:00:00Z"), lease("new-kcp", "2026-12-01T12:00:05Z")
    kcp = RecordingKcp(leases=[first, first, renewed])
    status = rollout("HandingOverLease", timestamps={"started": STARTED, "oldExited": STARTED})
    cluster(api, activeSlot="b", activeRevision=REV, rollout=status)
    running_slot(api, "b")
    assert await reconciler(api, kcp, events).reconcile_once() is None
    assert ("delete_lease",) not in kcp.calls
    assert api.stored(KCPSLOTS, "root-b")["status"]["holderIdentity"] == "new-kcp"


async def test_a_probe_that_fails_after_the_flip_fails_the_roll_in_the_same_round() -> None:
    api, events = RecordingApi(), RecordedEvents()
    kcp = RecordingKcp(probe_error=KcpTimeout("workspace w to be Ready", 4.0, "phase Initializing"))
    cluster(api, activeSlot="b", activeRevision=REV, rollout=rollout("Probing"))
    running_slot(api, "b")
    assert await reconciler(api, kcp, events).reconcile_once() is None
    status = shard_status(api)
    assert "rollout" not in status and status["lastRoll"]["result"] == "Failed"
    assert status["lastRoll"]["reason"] == "ProbeFailed" and status["activeSlot"] == "b"  # no flip back
    assert events.reasons == ["ProbeFailed"]


async def test_an_abort_ends_the_roll_before_the_new_slot_goes() -> None:
    api, kcp, events = RecordingApi(), RecordingKcp(), RecordedEvents()
    ro = rollout("WaitingReady", stepStartedAt="2026-12-01T11:00:00.000000Z")
    cluster(api, activeSlot="a", activeRevision="old", rollout=ro)
    running_slot(api, "a", revision="old")
    running_slot(api, "b", ready=False)
    assert await reconciler(api, kcp, events).reconcile_once() is None
    assert api.writes() == [("replace", "kcpshards/status", "root"), ("delete", "kcpslots", "root-b")]
    assert shard_status(api)["lastRoll"]["reason"] == "ReadyTimeout"
    assert shard_status(api)["activeSlot"] == "a"
    assert events.reasons == ["ReadyTimeout"]


async def test_a_single_roll_failing_before_the_flip_reads_the_lease_and_restores() -> None:
    api, events = RecordingApi(), RecordedEvents()
    kcp = RecordingKcp(leases=[lease("failed-kcp")])
    ro = rollout("WaitingReady", shape="Single", toSlot="a", stepStartedAt="2026-12-01T11:00:00.000000Z")
    cluster(api, activeSlot="a", activeRevision="old", rollout=ro)
    running_slot(api, "a", ready=False)
    assert await reconciler(api, kcp, events).reconcile_once() is None
    restored = shard_status(api)["rollout"]
    assert (restored["restoring"], restored["fromHolder"], restored["step"]) == (
        True,
        "failed-kcp",
        "Starting",
    )
    assert kcp.calls == [("get_lease",), ("close",)]


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"kcp": {"version": "v0.99.0"}}, ["kcp v0.99.0 is not supported", "this operator knows kcp"]),
        (
            {"shard": {"name": "beta", "root": False}},
            ["a non-root shard needs shard.cacheKubeconfigSecretRef (kcp --cache-kubeconfig)"],
        ),
    ],
    ids=["unknown-kcp-version", "non-root-without-cache-kubeconfig"],
)
async def test_an_invalid_spec_stalls_before_anything_starts(spec: dict[str, Any], words: list[str]) -> None:
    """A new shard whose spec only the operator can judge wrong: after first sight and its shared
    Secret, Stalled=True InvalidSpec with a message naming what to change, one Warning Event saying
    the same, and no front, no KcpSlot, no Job (so no kcp process)."""
    api, kcp, events = RecordingApi(), RecordingKcp(), RecordedEvents()
    body = shard_body()
    body["spec"] |= spec
    api.put(KCPSHARDS, body)
    r = reconciler(api, kcp, events)
    waits = [await r.reconcile_once() for _ in range(4)]
    assert waits == [None, None, RESYNC_SECONDS, RESYNC_SECONDS]
    assert api.writes() == [
        ("replace", "kcpshards/status", "root"),  # first sight
        ("create", "secrets", "root-shared"),
        ("replace", "kcpshards/status", "root"),  # the stall, once
    ]
    status = shard_status(api)
    stalled = cond.find(status["conditions"], "Stalled")
    ready = cond.find(status["conditions"], "Ready")
    assert stalled is not None and ready is not None
    assert (stalled["status"], stalled["reason"]) == ("True", "InvalidSpec")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    for word in words:
        assert word in stalled["message"]
    assert not status.get("activeSlot") and status["observedGeneration"] == 2
    assert events.posted == [("InvalidSpec", stalled["message"], True)]
    assert api.names(KCPSLOTS) == [] and api.names(JOBS) == [] and api.names(DEPLOYMENTS) == []
    assert kcp.calls == []


async def test_a_refused_create_stalls_with_the_servers_message_and_is_asked_again_rarely() -> None:
    api, kcp, events = RecordingApi(), RecordingKcp(), RecordedEvents()
    api.put(KCPSHARDS, shard_body(conditions=SEEN))
    refusal = Invalid(422, "Invalid", 'Deployment.apps "root-front" is invalid: spec.template: Invalid value')
    api.fail("create", "deployments", "root-front", error=refusal)
    r = reconciler(api, kcp, events)
    assert await r.reconcile_once() is None  # the shared Secret
    assert await r.reconcile_once() == REFUSED_RETRY_SECONDS
    stalled = cond.find(shard_status(api)["conditions"], "Stalled")
    assert stalled is not None and (stalled["status"], stalled["reason"]) == ("True", "ApiRejected")
    assert 'Deployment.apps "root-front" is invalid' in stalled["message"]
    assert [(reason, warning) for reason, _, warning in events.posted] == [("ApiRejected", True)]
    # Asked again (the refusal was one-off): the front is made and the stall ends with the next write.
    assert await r.reconcile_once() is None
    assert ("create", "deployments", "root-front") in api.writes()


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_a_passing_error_is_not_a_refusal_but_retried_by_the_loop(status: int) -> None:
    api, kcp, events = RecordingApi(), RecordingKcp(), RecordedEvents()
    api.put(KCPSHARDS, shard_body(conditions=SEEN))
    api.fail("create", "secrets", "root-shared", error=ApiError(status, "Busy", "try again"))
    with pytest.raises(ApiError):
        await reconciler(api, kcp, events).reconcile_once()
    assert cond.find(shard_status(api)["conditions"], "Stalled") is None
    assert events.reasons == []


def test_retry_backoff_doubles_up_to_its_cap() -> None:
    assert [ROUND_BACKOFF.delay(n) for n in (1, 2, 3, 4, 5, 6, 7, 20)] == [1, 2, 4, 8, 16, 30, 30, 30]


async def test_the_old_slot_retired_and_the_roll_finished_in_one_round() -> None:
    """The round's own delete left no KcpSlot: it plans on without it (no second observation) and ends the
    roll; the old slot's pods may still stop meanwhile."""
    api, kcp, events = RecordingApi(), RecordingKcp(), RecordedEvents()
    cluster(api, activeSlot="b", activeRevision=REV, rollout=rollout("Retiring"))
    running_slot(api, "a", revision="old")
    running_slot(api, "b")
    assert await reconciler(api, kcp, events).reconcile_once() is None
    assert api.writes() == [("delete", "kcpslots", "root-a"), ("replace", "kcpshards/status", "root")]
    assert [r[1] for r in api.requests if r[0] == "list"].count("kcpslots") == 1  # observed once
    assert shard_status(api)["lastRoll"]["result"] == "Succeeded"
    assert events.reasons == ["SlotDeleted", "RollSucceeded"]


async def test_a_ready_slot_is_flipped_to_with_one_status_write() -> None:
    """Leaving WaitingReady and asking the front for the new slot are one write (the front reads the ask
    from it), and their Events follow it."""
    api, kcp, events = RecordingApi(), RecordingKcp(), RecordedEvents()
    cluster(api, activeSlot="a", activeRevision="old", rollout=rollout("WaitingReady"))
    running_slot(api, "a", revision="old")
    running_slot(api, "b")
    assert await reconciler(api, kcp, events).reconcile_once() == RESYNC_SECONDS  # waits for the front
    assert api.writes() == [("replace", "kcpshards/status", "root")]
    status = shard_status(api)
    assert status["rollout"]["step"] == "Flipping" and "ready" in status["rollout"]["timestamps"]
    assert (status["front"]["desiredBackend"], status["front"]["desiredPort"]) == ("b", 4321)
    assert events.reasons == ["Flipping", "Flip"]


async def test_held_steps_are_not_posted_when_their_write_fails() -> None:
    api, kcp, events = RecordingApi(), RecordingKcp(), RecordedEvents()
    cluster(api, activeSlot="a", activeRevision="old", rollout=rollout("WaitingReady"))
    running_slot(api, "a", revision="old")
    running_slot(api, "b")
    api.fail("replace", "kcpshards/status", "root", error=ApiError(500, "InternalError", "etcd away"))
    with pytest.raises(ApiError):
        await reconciler(api, kcp, events).reconcile_once()
    assert shard_status(api)["rollout"]["step"] == "WaitingReady"  # nothing half-written
    assert events.reasons == []  # no Event for a step that was not recorded


async def test_a_round_cut_short_by_the_operator_exiting_ends_the_loop_quietly() -> None:
    """kopf's cleanup closes the client while a round still runs: the loop ends without an error (kopf
    would log its traceback and restart the daemon) and does not try to release its lease on it."""
    api, kcp, events = RecordingApi(), RecordingKcp(), RecordedEvents()
    cluster(api, activeSlot="a", activeRevision="old")
    closed = RuntimeError("Cannot send a request, as the client has been closed.")
    api.fail("list", "kcpslots", error=closed)

    r = reconciler(api, kcp, events)
    original = r.observer.observe

    async def observe_then_close() -> Any:
        api.closed = True  # the cleanup ran meanwhile
        return await original()

    r.observer.observe = observe_then_close  # type: ignore[method-assign]
    await asyncio.wait_for(r.run(asyncio.Event()), timeout=5)  # returns; raises nothing
    assert [w for w in api.writes() if w[1] == "leases"][-1][0] == "create"  # acquired, never released
