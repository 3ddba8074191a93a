"""The roll planner: each rule of a safe roll is one branch, tested here on plain data."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from kcpshard.api.models import KcpShardSpec, KcpShardStatus, RolloutStatus, RollReport, SlotName
from kcpshard.roll import plan
from kcpshard.roll.plan import Step
from kcpshard.roll.revision import revision_of

T0 = datetime.datetime(2026, 12, 1, 12, 0, 0, tzinfo=datetime.UTC)
A, B = SlotName.A, SlotName.B

SPEC = KcpShardSpec.model_validate(
    {
        "kcp": {"version": "v0.32.1"},
        "node": "n1",
        "store": {"etcd": {"endpoints": ["http://127.0.0.1:2379"]}},
        "front": {"port": 6443},
    }
)
REV = revision_of(SPEC)


def ready_conditions(*types: str) -> tuple[dict[str, Any], ...]:
    return tuple({"type": t, "status": "True", "reason": "X", "lastTransitionTime": "t"} for t in types)


def slot(name: SlotName, revision: str = REV, **kw: Any) -> plan.SlotView:
    kw.setdefault("job", plan.JobView(name=f"job-{name.value}", active=1))
    return plan.SlotView(name=name, revision=revision, **kw)


def rollout(step: Step, *, from_slot: str | None = "a", to_slot: str = "b", **kw: Any) -> RolloutStatus:
    return RolloutStatus(
        step=step.value,
        from_slot=from_slot,
        to_slot=to_slot,
        target_revision=REV,
        from_revision="old" if from_slot else None,
        started_at="2026-12-01T12:00:00Z",
        step_started_at="2026-12-01T12:00:00Z",
        **kw,
    )


def observe(
    status: KcpShardStatus | None = None,
    slots: dict[SlotName, plan.SlotView] | None = None,
    *,
    now: datetime.datetime = T0,
    invalid: tuple[str, ...] = (),
    spec: KcpShardSpec = SPEC,
) -> plan.Observed:
    return plan.Observed(
        spec=spec,
        generation=2,
        status=status or KcpShardStatus(),
        revision=revision_of(spec),
        now=now,
        slots=slots or {},
        invalid=invalid,
    )


# ----- starting a roll ---------------------------------------------------------------------------


def test_new_shard_starts_its_first_slot_in_a() -> None:
    action = plan.next_action(observe())
    assert isinstance(action, plan.StartRoll)
    assert action.rollout.to_slot == "a" and action.rollout.from_slot is None
    assert action.rollout.target_revision == REV
    assert action.rollout.step == Step.STARTING.value


def test_changed_revision_rolls_to_the_other_slot() -> None:
    status = KcpShardStatus(active_slot="a", active_revision="old")
    action = plan.next_action(observe(status, {A: slot(A, "old")}))
    assert isinstance(action, plan.StartRoll)
    assert (action.rollout.from_slot, action.rollout.to_slot) == ("a", "b")
    assert action.rollout.from_revision == "old"


def test_same_revision_is_steady() -> None:
    status = KcpShardStatus(active_slot="b", active_revision=REV)
    assert isinstance(plan.next_action(observe(status, {B: slot(B)})), plan.Steady)


def test_roll_only_changes_do_not_start_a_roll() -> None:
    spec = SPEC.model_copy(update={"roll": SPEC.roll.model_copy(update={"ready_timeout_seconds": 5})})
    assert revision_of(spec) == REV


def test_invalid_spec_stalls_before_anything_starts() -> None:
    action = plan.next_action(observe(invalid=("non-root shard needs cacheKubeconfigSecretRef",)))
    assert isinstance(action, plan.Stall)
    assert action.reason == "InvalidSpec"
    assert "cacheKubeconfigSecretRef" in action.message


def test_failed_roll_is_not_retried_until_the_spec_changes() -> None:
    status = KcpShardStatus(
        active_slot="a",
        active_revision="old",
        last_roll=RollReport(result="Aborted", to_revision=REV, message="slot b was not ready"),
    )
    action = plan.next_action(observe(status, {A: slot(A, "old")}))
    assert isinstance(action, plan.Stall) and action.reason == "RollFailed"
    # another revision (a spec change) rolls again
    other = SPEC.model_copy(update={"extra_args": ["-v=4"]})
    assert isinstance(plan.next_action(observe(status, {A: slot(A, "old")}, spec=other)), plan.StartRoll)


def test_a_roll_under_way_is_finished_before_a_new_revision() -> None:
    # the spec changed again mid-roll: the planner keeps driving the recorded target
    other = SPEC.model_copy(update={"extra_args": ["-v=4"]})
    status = KcpShardStatus(active_slot="a", active_revision="old", rollout=rollout(Step.STARTING))
    action = plan.next_action(observe(status, {A: slot(A, "old")}, spec=other))
    assert isinstance(action, plan.CreateSlot) and action.revision == REV


# ----- the steps ---------------------------------------------------------------------------------


def test_starting_creates_the_slot_then_advances() -> None:
    status = KcpShardStatus(active_slot="a", active_revision="old", rollout=rollout(Step.STARTING))
    action = plan.next_action(observe(status, {A: slot(A, "old")}))
    assert action == plan.CreateSlot(B, REV, start=0)
    action = plan.next_action(observe(status, {A: slot(A, "old"), B: slot(B)}))
    assert isinstance(action, plan.Advance) and action.step is Step.WAITING_READY


@pytest.mark.parametrize(
    "leftover",
    [
        slot(B, "another-revision"),
        slot(B, exited_at="2026-12-01T11:00:00Z"),
        slot(B, deleting=True),
    ],
    ids=["other-revision", "already-ran", "deleting"],
)
def test_starting_never_adopts_a_leftover_slot(leftover: plan.SlotView) -> None:
    status = KcpShardStatus(active_slot="a", active_revision="old", rollout=rollout(Step.STARTING))
    action = plan.next_action(observe(status, {A: slot(A, "old"), B: leftover}))
    assert isinstance(action, plan.DeleteSlot) and action.slot is B


def test_waiting_ready_waits_then_advances_to_flip() -> None:
    status = KcpShardStatus(active_slot="a", active_revision="old", rollout=rollout(Step.WAITING_READY))
    waiting = plan.next_action(
        observe(status, {A: slot(A, "old"), B: slot(B, conditions=ready_conditions("Seeded"))})
    )
    assert isinstance(waiting, plan.Wait)
    assert waiting.until == T0 + datetime.timedelta(seconds=SPEC.roll.ready_timeout_seconds)
    ready = slot(B, conditions=ready_conditions("Seeded", "Listening", "Ready"), port=4321)
    action = plan.next_action(observe(status, {A: slot(A, "old"), B: ready}))
    assert isinstance(action, plan.Advance) and action.step is Step.FLIPPING


@pytest.mark.parametrize(
    ("new_slot", "reason"),
    [
        (None, "SlotLost"),
        (slot(B, exited_at="2026-12-01T12:00:05Z", exit_code=2), "SlotExited"),
        (slot(B, job=plan.JobView(name="j", failed=1)), "SlotExited"),
        (
            slot(B, conditions=({"type": "Seeded", "status": "False", "message": "missing sa.key"},)),
            "SeedFailed",
        ),
    ],
    ids=["lost", "exited", "job-failed", "seed-failed"],
)
def test_failure_before_the_flip_aborts(new_slot: plan.SlotView | None, reason: str) -> None:
    status = KcpShardStatus(active_slot="a", active_revision="old", rollout=rollout(Step.WAITING_READY))
    slots = {A: slot(A, "old")} | ({B: new_slot} if new_slot else {})
    action = plan.next_action(observe(status, slots))
    assert isinstance(action, plan.Abort) and action.reason == reason


def test_not_ready_in_time_aborts_with_what_to_look_at() -> None:
    status = KcpShardStatus(active_slot="a", active_revision="old", rollout=rollout(Step.WAITING_READY))
    late = T0 + datetime.timedelta(seconds=SPEC.roll.ready_timeout_seconds + 1)
    action = plan.next_action(observe(status, {A: slot(A, "old"), B: slot(B)}, now=late))
    assert isinstance(action, plan.Abort) and action.reason == "ReadyTimeout"
    assert "Job's logs" in action.message


def test_flip_sets_the_backend_then_waits_for_the_front_then_advances() -> None:
    ready = slot(B, conditions=ready_conditions("Ready"), port=4321)
    base = {"active_slot": "a", "active_revision": "old", "rollout": rollout(Step.FLIPPING)}
    action = plan.next_action(observe(KcpShardStatus(**base), {A: slot(A, "old"), B: ready}))
    assert action == plan.Flip(B, 4321)

    asked = KcpShardStatus(**base, front={"desiredBackend": "b", "desiredPort": 4321, "observedBackend": "a"})
    assert isinstance(plan.next_action(observe(asked, {A: slot(A, "old"), B: ready})), plan.Wait)
    late = T0 + datetime.timedelta(seconds=SPEC.roll.flip_timeout_seconds + 1)
    stalled = plan.next_action(observe(asked, {A: slot(A, "old"), B: ready}, now=late))
    assert isinstance(stalled, plan.Stall) and stalled.reason == "FlipTimeout"

    served = KcpShardStatus(
        **base,
        front={"desiredBackend": "b", "desiredPort": 4321, "observedBackend": "b", "observedPort": 4321},
    )
    action = plan.next_action(observe(served, {A: slot(A, "old"), B: ready}))
    assert isinstance(action, plan.Advance) and action.step is Step.STOPPING_OLD


def test_first_slot_skips_stop_and_lease_handover() -> None:
    ready = slot(A, conditions=ready_conditions("Ready"), port=4321)
    status = KcpShardStatus(
        rollout=rollout(Step.FLIPPING, from_slot=None, to_slot="a"),
        front={"desiredBackend": "a", "desiredPort": 4321, "observedBackend": "a", "observedPort": 4321},
    )
    action = plan.next_action(observe(status, {A: ready}))
    assert isinstance(action, plan.Advance) and action.step is Step.PROBING


def test_stopping_old_deletes_its_job_once_then_waits_for_its_exit() -> None:
    status = KcpShardStatus(active_slot="b", active_revision=REV, rollout=rollout(Step.STOPPING_OLD))
    new = slot(B, port=1)
    assert plan.next_action(observe(status, {A: slot(A, "old"), B: new})) == plan.StopSlot(A)
    stopping = slot(A, "old", job=plan.JobView(name="j", active=1, deleting=True))
    assert isinstance(plan.next_action(observe(status, {A: stopping, B: new})), plan.Wait)
    # the Job is gone at once, but its pod still runs kcp's shutdown delay
    draining = slot(A, "old", job=None, live_pods=1)
    assert isinstance(plan.next_action(observe(status, {A: draining, B: new})), plan.Wait)
    exited = slot(A, "old", exited_at="2026-12-01T12:00:09Z")
    action = plan.next_action(observe(status, {A: exited, B: new}))
    assert isinstance(action, plan.Advance) and action.step is Step.HANDING_OVER_LEASE


def test_lease_and_probe_carry_their_deadlines() -> None:
    status = KcpShardStatus(active_slot="b", rollout=rollout(Step.HANDING_OVER_LEASE))
    action = plan.next_action(observe(status))
    assert action == plan.HandOverLease(T0 + datetime.timedelta(seconds=SPEC.roll.lease_timeout_seconds))
    status = KcpShardStatus(active_slot="b", rollout=rollout(Step.PROBING))
    assert plan.next_action(observe(status)) == plan.Probe(
        T0 + datetime.timedelta(seconds=SPEC.roll.probe_timeout_seconds)
    )


def test_drain_waits_for_connections_then_asks_the_front_to_close_them() -> None:
    status = KcpShardStatus(active_slot="b", rollout=rollout(Step.DRAINING), front={"connections": {"a": 2}})
    assert isinstance(plan.next_action(observe(status)), plan.Wait)
    late = T0 + datetime.timedelta(seconds=SPEC.roll.drain_timeout_seconds + 1)
    assert plan.next_action(observe(status, now=late)) == plan.RequestDrain(A)
    empty = KcpShardStatus(active_slot="b", rollout=rollout(Step.DRAINING), front={"connections": {"a": 0}})
    action = plan.next_action(observe(empty))
    assert isinstance(action, plan.Advance) and action.step is Step.RETIRING


def test_retiring_deletes_the_old_slot_then_finishes() -> None:
    status = KcpShardStatus(active_slot="b", rollout=rollout(Step.RETIRING))
    action = plan.next_action(observe(status, {A: slot(A, "old"), B: slot(B)}))
    assert isinstance(action, plan.DeleteSlot) and action.slot is A
    assert isinstance(plan.next_action(observe(status, {B: slot(B)})), plan.Finish)


def test_report_durations_from_timestamps() -> None:
    stamps = {
        "started": "2026-12-01T12:00:00Z",
        "ready": "2026-12-01T12:00:02.5Z",
        "flipped": "2026-12-01T12:00:03Z",
        "oldExited": "2026-12-01T12:00:06Z",
        "leaseHandedOver": "2026-12-01T12:00:07Z",
        "probed": "2026-12-01T12:00:08Z",
        "finished": "2026-12-01T12:00:09Z",
    }
    spans = plan.durations(stamps)
    assert spans["startToReady"] == 2.5
    assert spans["oldExit"] == 3.0
    assert spans["leaseHandover"] == 1.0
    assert spans["total"] == 9.0
    assert "drain" not in spans
