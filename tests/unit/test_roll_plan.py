"""The roll planner: each rule of a safe roll is one branch, tested here on plain data.

The durations of the roll report are tested in test_roll_plan_report.py.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import pytest

from kcpshard.api import conditions as cond
from kcpshard.api.models import (
    BackupReport,
    Condition,
    FrontStatus,
    KcpShardSpec,
    KcpShardStatus,
    KineStore,
    RolloutStatus,
    RollReport,
    Shape,
    SlotName,
)
from kcpshard.roll import plan
from kcpshard.roll.plan import Step
from kcpshard.roll.revision import revision_of

T0 = datetime.datetime(2026, 12, 1, 12, 0, 0, tzinfo=datetime.UTC)
STAMP = "2026-12-01T12:00:00Z"  # T0 as the status writes it
A, B = SlotName.A, SlotName.B
ROLL_ID = "abcdef-000000001"
NAME = "shard1"

SPEC = KcpShardSpec.model_validate(
    {
        "kcp": {"version": "v0.32.1"},
        "node": "n1",
        "store": {"etcd": {"endpoints": ["http://127.0.0.1:2379"]}},
        "front": {"port": 6443},
    }
)
REV = revision_of(SPEC)
SINGLE = SPEC.model_copy(update={"shape": Shape.SINGLE})
OLD_SPEC = SPEC.model_copy(update={"kcp": SPEC.kcp.model_copy(update={"version": "v0.31.0"})})
OLD_SPEC_JSON = OLD_SPEC.model_dump(mode="json", by_alias=True, exclude_none=True)
FRONT_UP = FrontStatus(observed_at=STAMP)
REPORT = BackupReport(job="shard1-backup", path="/var/lib/kcp/backup.db", seconds=1.5)
SEEN = Condition(type="Ready", status="Unknown", reason="Observed", last_transition_time=STAMP)
NO_LEASE = plan.LeaseReading(found=False)  # kcp's controller lease as read: there is none


SPEC_JSON = SPEC.model_dump(mode="json", by_alias=True, exclude_none=True)
URL = "https://127.0.0.1:6443"  # the front of SPEC


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def with_roll(spec: KcpShardSpec = SPEC, **kw: Any) -> KcpShardSpec:
    return spec.model_copy(update={"roll": spec.roll.model_copy(update=kw)})


def ready_conditions(*types: str) -> tuple[dict[str, Any], ...]:
    return tuple({"type": t, "status": "True", "reason": "X", "lastTransitionTime": "t"} for t in types)


def failed_condition(type_: str, reason: str | None, message: str) -> dict[str, Any]:
    found = {"type": type_, "status": "False", "message": message, "lastTransitionTime": "t"}
    return found | ({"reason": reason} if reason else {})


def slot(name: SlotName, revision: str = REV, **kw: Any) -> plan.SlotView:
    """A slot this roll started, whose Job runs (not gone)."""
    kw.setdefault("job", plan.JobView(name=f"job-{name.value}", active=1))
    kw.setdefault("roll_id", ROLL_ID)
    return plan.SlotView(name=name, revision=revision, **kw)


def ready_slot(name: SlotName, port: int = 4321, revision: str = REV) -> plan.SlotView:
    return slot(name, revision, conditions=ready_conditions("Seeded", "Listening", "Ready"), port=port)


def created(name: SlotName, revision: str, *, start: int = 0, spec: KcpShardSpec = SPEC) -> plan.CreateSlot:
    """The slot this roll creates (roll id ROLL_ID)."""
    return plan.CreateSlot(name, revision, start, spec, roll_id=ROLL_ID)


def rollout(step: Step, *, from_slot: str | None = "a", to_slot: str = "b", **kw: Any) -> RolloutStatus:
    kw.setdefault("from_revision", "old" if from_slot else None)
    kw.setdefault("id", ROLL_ID)
    kw.setdefault("started_at", STAMP)
    kw.setdefault("step_started_at", STAMP)
    return RolloutStatus(step=step.value, from_slot=from_slot, to_slot=to_slot, target_revision=REV, **kw)


def single(step: Step, **kw: Any) -> RolloutStatus:
    """A Single-shape roll of slot a in place."""
    return rollout(step, from_slot="a", to_slot="a", shape=Shape.SINGLE, **kw)


def during(ro: RolloutStatus, **kw: Any) -> KcpShardStatus:
    """The shard's status while `ro` runs: slot a served revision "old" when it began."""
    kw.setdefault("active_slot", "a")
    kw.setdefault("active_revision", "old")
    return KcpShardStatus(rollout=ro, **kw)


def observe(
    status: KcpShardStatus | None = None,
    slots: dict[SlotName, plan.SlotView] | None = None,
    *,
    now: datetime.datetime = T0,
    spec: KcpShardSpec = SPEC,
    retry_token: str | None = None,
    backup: plan.BackupView | None = None,
    kcp_lease: plan.LeaseReading | None = NO_LEASE,
    **more: Any,
) -> plan.Observed:
    status = status or KcpShardStatus()
    if not status.conditions:  # seen before: first sight is tested on its own
        status = status.model_copy(update={"conditions": [SEEN]})
    # the specs recorded in status, parsed once as the observer does
    recorded = status.rollout.target_spec if status.rollout else None
    more.setdefault("target_spec", KcpShardSpec.model_validate(recorded) if recorded else None)
    more.setdefault(
        "active_spec", KcpShardSpec.model_validate(status.active_spec) if status.active_spec else None
    )
    return plan.Observed(
        spec=spec,
        generation=2,
        status=status,
        revision=revision_of(spec),
        now=now,
        slots=slots or {},
        retry_token=retry_token,
        backup=backup,
        name=NAME,
        kcp_lease=kcp_lease,
        **more,
    )


def next_of(status: KcpShardStatus, *slots: plan.SlotView, **kw: Any) -> plan.Action:
    return plan.next_action(observe(status, {s.name: s for s in slots}, **kw))


def started(action: plan.Action) -> RolloutStatus:
    assert isinstance(action, plan.StartRoll), action
    return action.rollout


# ----- starting a roll: a new shard --------------------------------------------------------------


@pytest.mark.parametrize("front", [None, FrontStatus(desired_backend="a")], ids=["no-front", "not-observed"])
def test_new_shard_waits_for_the_front_to_report(front: FrontStatus | None) -> None:
    action = plan.next_action(observe(KcpShardStatus(front=front)))
    assert isinstance(action, plan.Wait)
    assert "front on node n1" in action.reason


def test_new_shard_starts_its_first_slot_in_a_once_the_front_reports() -> None:
    action = plan.next_action(observe(KcpShardStatus(front=FRONT_UP), retry_token="7"))
    assert isinstance(action, plan.StartRoll) and not action.rollout.recovery
    assert (action.event.reason, action.event.warning) == ("RollStarted", False)
    ro = action.rollout
    assert (ro.from_slot, ro.to_slot, ro.from_revision) == (None, "a", None)
    assert ro.target_revision == REV and ro.step == Step.STARTING.value
    assert ro.shape is Shape.BLUE_GREEN
    assert ro.target_generation == 2 and ro.retry_token == "7"
    assert {"started", "slotStarting"} <= ro.timestamps.keys()
    # the spec being rolled to is recorded whole: a later edit waits for the next roll
    assert ro.target_spec is not None and KcpShardSpec.model_validate(ro.target_spec) == SPEC


def test_new_shard_starts_blue_green_even_in_single_shape() -> None:
    # nothing to stop in place: the first slot is an ordinary start in slot a
    ro = started(plan.next_action(observe(KcpShardStatus(front=FRONT_UP), spec=SINGLE)))
    assert ro.shape is Shape.BLUE_GREEN and ro.to_slot == "a" and ro.step == Step.STARTING.value


def test_roll_id_is_the_revision_and_the_observed_millisecond() -> None:
    now = T0 + datetime.timedelta(milliseconds=1234)
    ro = started(plan.next_action(observe(KcpShardStatus(front=FRONT_UP), now=now)))
    assert ro.id == f"{REV[:6]}-{int(now.timestamp() * 1000) % 10**9:09d}"


def test_start_roll_stamps_the_observed_time() -> None:
    ro = started(plan.next_action(observe(KcpShardStatus(front=FRONT_UP))))
    assert cond.parse_time(ro.started_at) == T0
    assert ro.step_started_at is not None and cond.parse_time(ro.step_started_at) == T0


@pytest.mark.parametrize(
    "status",
    [
        KcpShardStatus(front=FrontStatus(error="port 6443 in use")),
        KcpShardStatus(front=FrontStatus(observed_at=STAMP, error="port 6443 in use")),
        KcpShardStatus(active_slot="a", active_revision="old", front=FrontStatus(error="port 6443 in use")),
    ],
    ids=["new-not-observed", "new-observed", "changed-revision"],
)
def test_front_error_stalls_the_roll(status: KcpShardStatus) -> None:
    action = next_of(status, slot(A, "old"))
    assert isinstance(action, plan.Stall) and action.reason == "FrontFailed"
    assert "node n1" in action.message and "port 6443 in use" in action.message


# ----- starting a roll: a serving shard ----------------------------------------------------------


def test_changed_revision_rolls_to_the_other_slot() -> None:
    # no front report needed once a slot serves
    status = KcpShardStatus(active_slot="a", active_revision="old", active_spec=OLD_SPEC_JSON)
    action = next_of(status, slot(A, "old"))
    assert isinstance(action, plan.StartRoll) and not action.rollout.recovery
    assert (action.event.reason, action.event.warning) == ("RollStarted", False)
    ro = action.rollout
    assert (ro.from_slot, ro.to_slot) == ("a", "b")
    assert (ro.from_revision, ro.target_revision) == ("old", REV)
    assert ro.from_version == "v0.31.0"
    assert ro.shape is Shape.BLUE_GREEN and ro.step == Step.STARTING.value
    assert "slotStarting" in ro.timestamps


def test_changed_revision_rolls_from_b_back_to_a() -> None:
    ro = started(next_of(KcpShardStatus(active_slot="b", active_revision="old"), slot(B, "old")))
    assert (ro.from_slot, ro.to_slot) == ("b", "a")


def test_single_shape_rolls_in_place_stopping_the_old_slot_first() -> None:
    status = KcpShardStatus(active_slot="b", active_revision="old")
    ro = started(next_of(status, slot(B, "old"), spec=SINGLE))
    assert ro.shape is Shape.SINGLE
    assert ro.from_slot == ro.to_slot == "b"
    assert ro.step == Step.STOPPING_OLD.value
    assert "slotStarting" not in ro.timestamps  # stamped when Starting is reached


@pytest.mark.parametrize(
    "spec", [with_roll(backup=True), with_roll(SINGLE, backup=True)], ids=["bg", "single"]
)
def test_backup_is_the_first_step_of_a_roll(spec: KcpShardSpec) -> None:
    ro = started(next_of(KcpShardStatus(active_slot="a", active_revision="old"), slot(A, "old"), spec=spec))
    assert ro.step == Step.BACKING_UP.value and "slotStarting" not in ro.timestamps


def serving(slot_name: str = "b", port: int = 4321) -> KcpShardStatus:
    """Slot `slot_name` serves REV and the front confirms it."""
    front = FrontStatus(observed_at=STAMP, observed_backend=slot_name, observed_port=port)
    return KcpShardStatus(active_slot=slot_name, active_revision=REV, front=front)


def test_same_revision_is_steady() -> None:
    assert isinstance(next_of(serving(), ready_slot(B)), plan.Steady)


def test_roll_only_changes_do_not_start_a_roll() -> None:
    spec = with_roll(ready_timeout_seconds=5, backup=True)
    assert revision_of(spec) == REV
    assert isinstance(next_of(serving(), ready_slot(B), spec=spec), plan.Steady)


@pytest.mark.parametrize(
    "status",
    [KcpShardStatus(front=FRONT_UP), KcpShardStatus(active_slot="a", active_revision=REV)],
    ids=["new", "steady"],
)
def test_invalid_spec_stalls_before_anything_starts(status: KcpShardStatus) -> None:
    # what only the operator can judge: the flags of the spec, and another shard's front port
    non_root = SPEC.model_copy(update={"shard": SPEC.shard.model_copy(update={"root": False, "name": "s2"})})
    older = plan.Neighbour("other", "root", created="2026-01-01T00:00:00Z", node="n1", front_port=6443)
    action = next_of(status, slot(A), spec=non_root, neighbours=(older,), created=STAMP)
    assert isinstance(action, plan.Stall) and action.reason == "InvalidSpec"
    assert "a non-root shard needs shard.cacheKubeconfigSecretRef" in action.message
    assert "front port 6443 on node n1 is already used by KcpShard other/root" in action.message


# ----- a failed roll stays failed ----------------------------------------------------------------


def failed_last(result: str = "Aborted", **kw: Any) -> KcpShardStatus:
    kw.setdefault("reason", "ReadyTimeout")
    report = RollReport(result=result, to_revision=REV, message="slot b was not ready", **kw)
    return KcpShardStatus(active_slot="a", active_revision="old", last_roll=report)


@pytest.mark.parametrize(
    ("result", "said"),
    [("Aborted", "was aborted"), ("Failed", "failed"), ("RolledBack", "was rolled back"), ("Odd", "Odd")],
)
def test_failed_roll_stalls_with_its_reason(result: str, said: str) -> None:
    action = next_of(failed_last(result), slot(A, "old"))
    assert isinstance(action, plan.Stall) and action.reason == "ReadyTimeout"
    assert f"the roll to revision {REV} {said}: slot b was not ready" in action.message
    # the message says how to retry, with this shard's name
    assert f"kubectl annotate kcpshard {NAME} {plan.RETRY_ANNOTATION}=" in action.message


def test_failed_roll_stall_says_what_serves() -> None:
    action = next_of(failed_last(), slot(A, "old"))
    assert isinstance(action, plan.Stall) and action.message.startswith("slot a serves revision old; ")
    # the first roll of a new shard failed: nothing serves
    status = KcpShardStatus(front=FRONT_UP, last_roll=failed_last().last_roll)
    action = plan.next_action(observe(status))
    assert isinstance(action, plan.Stall) and action.message.startswith("nothing serves yet; the roll to")


def test_failed_roll_without_a_reason_stalls_as_roll_failed() -> None:
    action = next_of(failed_last(reason=None), slot(A, "old"))
    assert isinstance(action, plan.Stall) and action.reason == "RollFailed"


def test_changing_the_spec_starts_a_new_roll_after_a_failed_one() -> None:
    other = SPEC.model_copy(update={"extra_args": ["-v=4"]})
    ro = started(next_of(failed_last(), slot(A, "old"), spec=other))
    assert ro.target_revision == revision_of(other)


def test_changing_the_retry_token_starts_a_new_roll_after_a_failed_one() -> None:
    status = failed_last(retry_token="1")
    assert isinstance(next_of(status, slot(A, "old"), retry_token="1"), plan.Stall)
    ro = started(next_of(status, slot(A, "old"), retry_token="2"))
    assert ro.retry_token == "2" and ro.target_revision == REV
    # the annotation added for the first time is a change too
    assert isinstance(next_of(failed_last(), slot(A, "old"), retry_token="1"), plan.StartRoll)


def test_a_succeeded_last_roll_never_blocks() -> None:
    # rolling back to the revision of an earlier, successful roll
    assert isinstance(next_of(failed_last("Succeeded"), slot(A, "old")), plan.StartRoll)


# ----- recovery: the serving slot died -----------------------------------------------------------


@pytest.mark.parametrize(
    "dead",
    [
        None,
        slot(A, "old", exited_at="2026-12-01T11:59:00Z", exit_code=137),
        slot(A, "old", job=plan.JobView(name="job-a", failed=1)),
        slot(A, "old", job=plan.JobView(name="job-a", succeeded=1)),
        slot(A, "old", job=None),
        # Deleted while its kcp still runs out its shutdown delay: replaced at once, not once it exits.
        slot(A, "old", job=None, pods=("pod-a",)),
        slot(A, "old", deleting=True, pods=("pod-a",)),
        slot(A, "old", job=plan.JobView(name="job-a", active=1, deleting=True), pods=("pod-a",)),
        slot(A, "old", job=plan.JobView(name="job-a", failed=1), pods=("pod-a",)),
    ],
    ids=[
        "missing",
        "exited",
        "job-failed",
        "job-succeeded",
        "no-job-no-pod",
        "job-deleted",
        "slot-deleting",
        "job-deleting",
        "job-failed-pod-runs",
    ],
)
def test_dead_serving_slot_is_started_again_on_the_other_slot(dead: plan.SlotView | None) -> None:
    status = KcpShardStatus(active_slot="a", active_revision="old", active_spec=OLD_SPEC_JSON)
    action = plan.next_action(observe(status, {A: dead} if dead else {}))
    assert isinstance(action, plan.StartRoll) and action.rollout.recovery
    assert (action.event.reason, action.event.warning) == ("SlotLost", True)
    ro = action.rollout
    assert (ro.from_slot, ro.to_slot) == ("a", "b")
    assert ro.target_revision == "old" and ro.target_spec == OLD_SPEC_JSON
    assert ro.shape is Shape.BLUE_GREEN and ro.step == Step.STARTING.value


def test_recovery_comes_before_every_stall() -> None:
    # invalid spec, a failed last roll, a broken front, Single shape and backup: none delays it
    status = failed_last(reason="X").model_copy(
        update={"front": FrontStatus(error="boom"), "active_spec": OLD_SPEC_JSON}
    )
    bad = with_roll(SINGLE, backup=True).model_copy(update={"extra_args": ["--secure-port=6443"]})
    assert plan.invalid(observe(status, spec=bad))
    action = plan.next_action(observe(status, spec=bad))
    assert isinstance(action, plan.StartRoll) and action.rollout.recovery
    assert (action.event.reason, action.event.warning) == ("SlotLost", True)
    assert action.rollout.shape is Shape.BLUE_GREEN and action.rollout.step == Step.STARTING.value
    assert action.rollout.to_slot == "b"


def test_a_serving_slot_whose_job_and_pod_run_is_steady() -> None:
    alive = slot(
        A,
        REV,
        job=plan.JobView(name="job-a", active=1),
        pods=("pod-1",),
        conditions=ready_conditions("Ready"),
        port=4321,
    )
    assert isinstance(next_of(serving("a"), alive), plan.Steady)


def test_a_roll_under_way_is_finished_before_a_new_revision() -> None:
    # the spec changed again mid-roll: the planner keeps driving the recorded target
    other = SPEC.model_copy(update={"extra_args": ["-v=4"]})
    ro = rollout(Step.STARTING, target_spec=SPEC_JSON)
    action = next_of(during(ro), slot(A, "old"), spec=other)
    assert action == created(B, REV)


# ----- BackingUp ---------------------------------------------------------------------------------


def test_backing_up_starts_the_backup_job() -> None:
    ro = rollout(Step.BACKING_UP)
    action = next_of(during(ro), slot(A, "old"))
    assert action == plan.StartBackup(f"{NAME}-backup-{ROLL_ID}", SPEC, REV, etcd=SPEC.store.etcd)


def kine_with_backup() -> KcpShardSpec:
    kine = {"endpointSecretRef": {"name": "dsn"}}
    store = SPEC.store.model_copy(update={"etcd": None, "kine": KineStore.model_validate(kine)})
    return SPEC.model_copy(update={"store": store, "roll": SPEC.roll.model_copy(update={"backup": True})})


def test_a_backup_of_kine_is_refused_before_anything_runs() -> None:
    # no Job can snapshot kine: the spec is invalid, so no roll starts
    action = next_of(KcpShardStatus(front=FRONT_UP), spec=kine_with_backup())
    assert isinstance(action, plan.Stall) and action.reason == "InvalidSpec"
    assert "roll.backup snapshots an etcd store" in action.message
    # a roll recorded with such a spec (by an older operator) ends before it asks for a Job
    target = kine_with_backup().model_dump(mode="json", by_alias=True, exclude_none=True)
    ro = rollout(Step.BACKING_UP, target_spec=target)
    action = next_of(during(ro), slot(A, "old"))
    assert isinstance(action, plan.Abort) and action.reason == "InvalidSpec"


@pytest.mark.parametrize("ro", [rollout(Step.BACKING_UP), single(Step.BACKING_UP)], ids=["bg", "single"])
def test_backup_error_aborts_while_the_old_slot_still_serves(ro: RolloutStatus) -> None:
    backup = plan.BackupView("shard1-backup-x", error="etcdctl: context deadline exceeded")
    action = next_of(during(ro), slot(A, "old"), backup=backup)
    assert isinstance(action, plan.Abort) and action.reason == "BackupFailed"
    assert "shard1-backup-x" in action.message and "context deadline exceeded" in action.message


@pytest.mark.parametrize(
    ("ro", "step"),
    [
        (rollout(Step.BACKING_UP), Step.STARTING),
        (single(Step.BACKING_UP), Step.STOPPING_OLD),
        (rollout(Step.BACKING_UP, from_slot=None, to_slot="a", shape=Shape.SINGLE), Step.STARTING),
    ],
    ids=["bg", "single", "single-without-old"],
)
def test_backup_report_advances_carrying_the_report(ro: RolloutStatus, step: Step) -> None:
    action = next_of(during(ro), slot(A, "old"), backup=plan.BackupView(REPORT.job, report=REPORT))
    assert isinstance(action, plan.Advance) and action.step is step
    assert action.backup == REPORT
    assert REPORT.path in action.message and "1.50s" in action.message


def test_backup_waits_until_its_deadline_then_times_out() -> None:
    spec = with_roll(backup=True, backup_timeout_seconds=60)
    status, running = during(rollout(Step.BACKING_UP)), plan.BackupView("shard1-backup-x")
    waiting = next_of(status, slot(A, "old"), spec=spec, backup=running, now=at(59))
    assert waiting == plan.Wait("waiting for the store backup", until=at(60))
    action = next_of(status, slot(A, "old"), spec=spec, backup=running, now=at(60))
    assert isinstance(action, plan.Abort) and action.reason == "BackupTimeout"
    assert "60s" in action.message and "kubectl logs job/shard1-backup-x" in action.message


def test_deadlines_count_from_the_step_start_else_the_roll_start() -> None:
    running = plan.BackupView("j")
    step_start = rollout(Step.BACKING_UP, started_at="2026-12-01T11:00:00Z")
    action = next_of(during(step_start), slot(A, "old"), backup=running)
    assert isinstance(action, plan.Wait) and action.until == at(SPEC.roll.backup_timeout_seconds)
    no_step_start = rollout(Step.BACKING_UP, started_at="2026-12-01T11:55:00Z", step_started_at=None)
    action = next_of(during(no_step_start), slot(A, "old"), backup=running)
    assert isinstance(action, plan.Wait) and action.until == at(SPEC.roll.backup_timeout_seconds - 300)


# ----- Starting ----------------------------------------------------------------------------------


def test_starting_creates_the_slot_then_advances() -> None:
    status = during(rollout(Step.STARTING))
    assert next_of(status, slot(A, "old")) == created(B, REV)
    action = next_of(status, slot(A, "old"), slot(B))
    assert isinstance(action, plan.Advance) and action.step is Step.WAITING_READY


@pytest.mark.parametrize(
    ("leftover", "why"),
    [
        (slot(B, "another-revision"), "it runs revision another-revision"),
        (slot(B, roll_id="other-roll"), "not started by this roll"),
        (slot(B, roll_id=None), "not started by this roll"),
        (slot(B, exited_at="2026-12-01T11:00:00Z"), "already ran and stopped"),
        (slot(B, job=plan.JobView(name="j", succeeded=1)), "already ran and stopped"),
        (slot(B, job=plan.JobView(name="j", failed=1), pods=("pod-1",)), "already ran and stopped"),
    ],
    ids=["other-revision", "other-roll", "no-roll", "exited", "job-succeeded", "job-failed"],
)
def test_starting_never_adopts_a_leftover_slot(leftover: plan.SlotView, why: str) -> None:
    action = next_of(during(rollout(Step.STARTING)), slot(A, "old"), leftover)
    assert isinstance(action, plan.DeleteSlot) and action.slot is B
    assert action.why.startswith("never adopted: ") and why in action.why


def test_starting_waits_for_a_leftover_slot_already_being_deleted() -> None:
    # deleted once; its deletion event wakes the loop, no second delete and no second Event
    action = next_of(during(rollout(Step.STARTING)), slot(A, "old"), slot(B, deleting=True))
    assert action == plan.Wait("slot b is being deleted")
    assert plan.pause(action, observe()) == plan.RESYNC_SECONDS


def test_starting_creates_the_job_again_when_it_was_never_created() -> None:
    # the KcpSlot was written, then the operator stopped before the Job
    action = next_of(during(rollout(Step.STARTING)), slot(A, "old"), slot(B, job=None))
    assert action == created(B, REV)


def test_starting_keeps_a_slot_whose_pod_still_runs() -> None:
    action = next_of(during(rollout(Step.STARTING)), slot(A, "old"), slot(B, job=None, pods=("pod-1",)))
    assert isinstance(action, plan.Advance) and action.step is Step.WAITING_READY


@pytest.mark.parametrize(
    "old",
    [slot(A, "old", exited_at="2026-12-01T12:00:01Z"), slot(A, REV, roll_id="earlier-roll")],
    ids=["old-revision", "other-roll"],
)
def test_single_starting_deletes_the_old_slot_then_creates_it(old: plan.SlotView) -> None:
    status = during(single(Step.STARTING))
    action = next_of(status, old)
    assert isinstance(action, plan.DeleteSlot) and action.slot is A and "never adopted" in action.why
    assert next_of(status) == created(A, REV)
    action = next_of(status, slot(A))
    assert isinstance(action, plan.Advance) and action.step is Step.WAITING_READY


def test_restoring_starts_the_old_revision_again() -> None:
    status = during(single(Step.STARTING, restoring=True))
    failed_new = slot(A, exited_at="2026-12-01T12:01:00Z", exit_code=1)
    action = next_of(status, failed_new)
    assert isinstance(action, plan.DeleteSlot) and "not old" in action.why
    assert next_of(status, active_spec=OLD_SPEC) == created(A, "old", spec=OLD_SPEC)
    action = next_of(status, slot(A, "old"))
    assert isinstance(action, plan.Advance) and action.step is Step.WAITING_READY


@pytest.mark.parametrize(
    ("ro", "expected"),
    [
        (single(Step.STARTING, restoring=True), "old"),
        (single(Step.STARTING, restoring=True, from_revision=None), REV),
        (single(Step.STARTING), REV),
        (rollout(Step.STARTING), REV),
    ],
    ids=["restoring", "restoring-without-from", "single", "bg"],
)
def test_expected_revision(ro: RolloutStatus, expected: str) -> None:
    assert plan.expected_revision(ro) == expected


# ----- WaitingReady ------------------------------------------------------------------------------


def test_waiting_ready_waits_then_advances_to_flip() -> None:
    status = during(rollout(Step.WAITING_READY))
    seeded = slot(B, conditions=ready_conditions("Seeded"))
    waiting = next_of(status, slot(A, "old"), seeded)
    assert isinstance(waiting, plan.Wait) and waiting.until == at(SPEC.roll.ready_timeout_seconds)
    # Ready without a port is not enough to flip to
    no_port = slot(B, conditions=ready_conditions("Seeded", "Listening", "Ready"))
    assert isinstance(next_of(status, slot(A, "old"), no_port), plan.Wait)
    action = next_of(status, slot(A, "old"), ready_slot(B, port=4321))
    assert isinstance(action, plan.Advance) and action.step is Step.FLIPPING
    assert "4321" in action.message


@pytest.mark.parametrize(
    ("new_slot", "reason"),
    [
        (None, "SlotLost"),
        (slot(B, exited_at="2026-12-01T12:00:05Z", exit_code=2), "SlotExited"),
        (slot(B, job=plan.JobView(name="j", failed=1), pods=("pod-1",)), "SlotExited"),
        (slot(B, job=None), "SlotExited"),
        (slot(B, conditions=(failed_condition("Seeded", None, "missing sa.key"),)), "SeedFailed"),
        (slot(B, conditions=(failed_condition("Seeded", "CopyFailed", "disk full"),)), "SeedFailed"),
        (
            slot(B, conditions=(failed_condition("Seeded", "StoreUnreachable", "no etcd"),)),
            "StoreUnreachable",
        ),
        (slot(B, conditions=(failed_condition("Seeded", "MissingSecret", "no Secret"),)), "MissingSecret"),
        (
            slot(B, conditions=(failed_condition("Seeded", "MissingSecret", "x"),), exited_at=STAMP),
            "MissingSecret",
        ),
    ],
    ids=[
        "lost",
        "exited",
        "job-failed",
        "no-job-no-pod",
        "seed-no-reason",
        "seed-other-reason",
        "store-unreachable",
        "missing-secret",
        "seed-failure-before-exit",
    ],
)
def test_failure_before_the_flip_aborts(new_slot: plan.SlotView | None, reason: str) -> None:
    slots = [slot(A, "old"), *([new_slot] if new_slot else [])]
    action = next_of(during(rollout(Step.WAITING_READY)), *slots)
    assert isinstance(action, plan.Abort) and action.reason == reason


def test_slot_lost_before_it_was_ready() -> None:
    action = next_of(during(rollout(Step.WAITING_READY)), slot(A, "old"))
    assert isinstance(action, plan.Abort) and action.put_back is None and action.remove is None
    assert (action.reason, action.message) == ("SlotLost", "slot b disappeared before it was ready")
    assert isinstance(next_of(during(single(Step.WAITING_READY))), plan.Restore)


def test_a_port_without_ready_is_not_enough_to_flip() -> None:
    listening = slot(B, conditions=ready_conditions("Seeded", "Listening"), port=4321)
    assert isinstance(next_of(during(rollout(Step.WAITING_READY)), slot(A, "old"), listening), plan.Wait)


def test_seed_failure_message_names_the_slot() -> None:
    new = slot(B, conditions=(failed_condition("Seeded", "MissingSecret", "Secret shard1-root not found"),))
    action = next_of(during(rollout(Step.WAITING_READY)), slot(A, "old"), new)
    assert isinstance(action, plan.Abort) and action.message == "slot b: Secret shard1-root not found"


def test_exit_message_has_the_code_and_the_jobs_failure() -> None:
    job = plan.JobView(name="job-b", failed=1, message="BackoffLimitExceeded: Job has reached the limit")
    new = slot(B, exited_at="2026-12-01T12:00:05Z", exit_code=2, job=job)
    action = next_of(during(rollout(Step.WAITING_READY)), slot(A, "old"), new)
    assert isinstance(action, plan.Abort) and action.reason == "SlotExited"
    assert "exited with code 2 before it was ready" in action.message
    assert "(BackoffLimitExceeded: Job has reached the limit)" in action.message
    assert "kubectl logs job/job-b" in action.message


def test_succeeded_job_before_ready_is_an_exit() -> None:
    # the host agent exits 0 after a stop; if it could not write exitedAt, only the Job tells
    new = slot(B, job=plan.JobView(name="job-b", succeeded=1))
    assert new.gone
    action = next_of(during(rollout(Step.WAITING_READY)), slot(A, "old"), new)
    assert isinstance(action, plan.Abort) and action.reason == "SlotExited"


@pytest.mark.parametrize(
    ("new_slot", "says"),
    [
        (slot(B), ["its host agent never reported", "node n1", "kubectl describe pods -l job-name=job-b"]),
        (
            slot(B, started_at=STAMP),
            ["Seeded=Unknown, Listening=Unknown, Ready=Unknown", "kubectl logs job/job-b"],
        ),
        (
            slot(B, conditions=ready_conditions("Seeded", "Listening")),
            ["Seeded=True, Listening=True, Ready=Unknown", "kubectl logs job/job-b"],
        ),
    ],
    ids=["agent-silent", "agent-started", "agent-reported"],
)
def test_not_ready_in_time_aborts_with_what_to_look_at(new_slot: plan.SlotView, says: list[str]) -> None:
    status = during(rollout(Step.WAITING_READY))
    timeout = SPEC.roll.ready_timeout_seconds
    assert isinstance(next_of(status, slot(A, "old"), new_slot, now=at(timeout - 1)), plan.Wait)
    action = next_of(status, slot(A, "old"), new_slot, now=at(timeout))
    assert isinstance(action, plan.Abort) and action.reason == "ReadyTimeout"
    assert f"not ready within {timeout}s" in action.message
    for text in says:
        assert text in action.message
    if "never reported" not in says[0]:
        assert "never reported" not in action.message


def test_single_failure_before_the_flip_restores_the_old_revision() -> None:
    new = slot(A, exited_at="2026-12-01T12:00:05Z", exit_code=1)
    action = next_of(during(single(Step.WAITING_READY)), new)
    assert isinstance(action, plan.Restore) and action.reason == "SlotExited"


def test_single_failure_while_restoring_fails_the_roll() -> None:
    new = slot(A, "old", exited_at="2026-12-01T12:00:05Z", exit_code=1)
    action = next_of(during(single(Step.WAITING_READY, restoring=True)), new)
    assert isinstance(action, plan.Fail) and action.reason == "SlotExited"
    assert action.message.startswith("the old revision old did not come back either: slot a exited")


# ----- Flipping ----------------------------------------------------------------------------------


def front(backend: str | None, port: int | None, observed: tuple[str, int] | None = None) -> FrontStatus:
    seen = observed or (None, None)
    return FrontStatus(
        desired_backend=backend, desired_port=port, observed_backend=seen[0], observed_port=seen[1]
    )


def test_flip_sets_the_backend_then_waits_for_the_front_then_advances() -> None:
    ro, new = rollout(Step.FLIPPING), ready_slot(B, port=4321)
    assert next_of(during(ro), slot(A, "old"), new) == plan.Flip(B, 4321, REV)
    asked = during(ro, front=front("b", 4321, ("a", 1111)))
    waiting = next_of(asked, slot(A, "old"), new)
    assert isinstance(waiting, plan.Wait) and waiting.until == at(SPEC.roll.flip_timeout_seconds)
    served = during(ro, front=front("b", 4321, ("b", 4321)))
    action = next_of(served, slot(A, "old"), new)
    assert isinstance(action, plan.Advance) and action.step is Step.STOPPING_OLD


@pytest.mark.parametrize(
    "fs",
    [
        front("a", 1111, ("a", 1111)),
        front("b", 9999, ("b", 9999)),
        front("a", 4321),
        front(None, None),
    ],
    ids=["old-backend", "old-port", "other-backend-same-port", "empty"],
)
def test_flip_is_asked_again_when_the_front_wants_something_else(fs: FrontStatus) -> None:
    action = next_of(during(rollout(Step.FLIPPING), front=fs), slot(A, "old"), ready_slot(B, port=4321))
    assert action == plan.Flip(B, 4321, REV)


def test_front_on_the_right_backend_but_another_port_is_no_confirmation() -> None:
    # a slot restarted on a new port: the front still serves the previous one
    status = during(rollout(Step.FLIPPING), front=front("b", 4321, ("b", 9999)))
    assert isinstance(next_of(status, slot(A, "old"), ready_slot(B, port=4321)), plan.Wait)


def test_front_serving_another_backend_on_that_port_is_no_confirmation() -> None:
    # only the observed backend confirms the flip, not the one asked for
    status = during(rollout(Step.FLIPPING), front=front("b", 4321, ("a", 4321)))
    assert isinstance(next_of(status, slot(A, "old"), ready_slot(B, port=4321)), plan.Wait)


def test_flip_timeout_aborts_naming_the_front() -> None:
    status = during(rollout(Step.FLIPPING), front=front("b", 4321, ("a", 1111)))
    timeout = SPEC.roll.flip_timeout_seconds
    action = next_of(status, slot(A, "old"), ready_slot(B, port=4321), now=at(timeout))
    assert isinstance(action, plan.Abort) and action.reason == "FlipTimeout"
    assert f"within {timeout}s" in action.message
    assert "front agent on node n1" in action.message
    assert f"kubectl logs deployment/{NAME}-front" in action.message


def test_single_flip_timeout_restores() -> None:
    status = during(single(Step.FLIPPING), front=front("a", 4321, ("a", 1111)))
    action = next_of(status, ready_slot(A, port=4321), now=at(SPEC.roll.flip_timeout_seconds))
    assert isinstance(action, plan.Restore) and action.reason == "FlipTimeout"


@pytest.mark.parametrize(
    "new_slot",
    [
        None,
        slot(B, conditions=ready_conditions("Ready")),
        slot(B, port=4321, exited_at="2026-12-01T12:00:05Z"),
        slot(B, port=4321, job=plan.JobView(name="j", failed=1)),
    ],
    ids=["missing", "no-port", "exited", "job-failed"],
)
def test_slot_lost_during_the_flip_aborts(new_slot: plan.SlotView | None) -> None:
    slots = [slot(A, "old"), *([new_slot] if new_slot else [])]
    action = next_of(during(rollout(Step.FLIPPING), front=front("b", 4321)), *slots)
    assert isinstance(action, plan.Abort) and action.reason == "SlotLost"
    assert "slot b stopped during the flip" in action.message


@pytest.mark.parametrize(
    ("ro", "step"),
    [
        (rollout(Step.FLIPPING), Step.STOPPING_OLD),
        (single(Step.FLIPPING), Step.HANDING_OVER_LEASE),
        (single(Step.FLIPPING, restoring=True), Step.HANDING_OVER_LEASE),
        # a first slot too: a shard created again on a kept store finds a dead predecessor's lease
        (rollout(Step.FLIPPING, from_slot=None, to_slot="b"), Step.HANDING_OVER_LEASE),
    ],
    ids=["bg", "single", "restoring", "first-slot"],
)
def test_confirmed_flip_advances_to_the_shapes_next_step(ro: RolloutStatus, step: Step) -> None:
    to = SlotName(ro.to_slot)
    status = during(ro, front=front(to.value, 4321, (to.value, 4321)))
    action = next_of(status, ready_slot(to, port=4321, revision=plan.expected_revision(ro)))
    assert isinstance(action, plan.Advance) and action.step is step


# ----- StoppingOld -------------------------------------------------------------------------------


def test_stopping_old_deletes_its_job_once_then_waits_for_its_exit() -> None:
    status, new = during(rollout(Step.STOPPING_OLD), active_slot="b"), slot(B, port=1)
    assert next_of(status, slot(A, "old"), new) == plan.StopSlot(A, "job-a")
    stopping = slot(A, "old", job=plan.JobView(name="j", active=1, deleting=True))
    waiting = next_of(status, stopping, new)
    # the host agent's own limit (the shutdown delay plus 20 s) is below the default 120 s
    assert isinstance(waiting, plan.Wait) and waiting.until == at(SPEC.shutdown_delay_seconds + 20)
    # the Job is gone at once, but its pod still runs kcp's shutdown delay
    draining = slot(A, "old", job=None, pods=("pod-1",))
    assert isinstance(next_of(status, draining, new), plan.Wait)
    exited = slot(A, "old", exited_at="2026-12-01T12:00:09Z")
    action = next_of(status, exited, new)
    assert isinstance(action, plan.Advance) and action.step is Step.HANDING_OVER_LEASE
    action = next_of(status, new)
    assert isinstance(action, plan.Advance) and action.step is Step.HANDING_OVER_LEASE


def test_an_old_slot_whose_kcpslot_was_deleted_is_waited_for_until_its_pods_exit() -> None:
    # Someone deleted the serving KcpSlot: a recovery roll flipped away from it, but its pod's kcp still
    # stops and holds kcp's controller lease; handing the lease over now would have it renewed again.
    spec = with_roll(stop_timeout_seconds=20)
    status = during(rollout(Step.STOPPING_OLD), active_slot="b")
    busy = {A: ("root-a-old-0-x1",)}
    waiting = next_of(status, slot(B), spec=spec, busy=busy, now=at(19))
    assert isinstance(waiting, plan.Wait) and waiting.until == at(20), waiting
    assert "pods of slot a to exit (its KcpSlot was deleted)" in waiting.reason
    late = next_of(status, slot(B), spec=spec, busy=busy, now=at(20))
    assert isinstance(late, plan.Wait) and "did not exit within 20s of SIGTERM" in late.reason
    action = next_of(status, slot(B), spec=spec, busy={A: ()}, now=at(1))
    assert isinstance(action, plan.Advance) and action.step is Step.HANDING_OVER_LEASE


@pytest.mark.parametrize(
    "old",
    [
        slot(A, "old", job=plan.JobView(name="j", active=1, deleting=True)),
        slot(A, "old", job=None, pods=("pod-1",)),
    ],
    ids=["job-deleting", "job-gone-pod-runs"],
)
def test_an_old_slot_outliving_its_stop_timeout_is_waited_for_not_deleted(old: plan.SlotView) -> None:
    # Its host agent kills kcp at the timeout; a force deletion would remove the pod object while the
    # kubelet still runs its containers, and the lease would be handed over under a live kcp.
    spec = with_roll(stop_timeout_seconds=20)
    status = during(rollout(Step.STOPPING_OLD), active_slot="b")
    early = next_of(status, old, slot(B), spec=spec, now=at(19))
    assert isinstance(early, plan.Wait) and early.until == at(20)
    late = next_of(status, old, slot(B), spec=spec, now=at(600))
    assert isinstance(late, plan.Wait), late
    assert "did not exit within 20s of SIGTERM: its host agent kills kcp" in late.reason
    assert "lease stays with it until its pods are gone" in late.reason


def test_the_kill_is_said_at_the_host_agents_limit_when_the_stop_timeout_is_above_it() -> None:
    # roll.stopTimeoutSeconds 120 (the default), shutdownDelaySeconds 5: the agent kills at 25 s
    status = during(rollout(Step.STOPPING_OLD), active_slot="b")
    killed = slot(A, "old", job=None, exited_at="2026-12-01T12:00:09Z", exit_code=137)
    action = next_of(status, killed, slot(B))
    assert isinstance(action, plan.Advance) and action.warning is not None
    assert "did not exit within 25s of SIGTERM" in action.warning[1]


def test_an_old_slot_its_agent_killed_is_said_in_a_warning_when_it_is_gone() -> None:
    spec = with_roll(stop_timeout_seconds=3)
    status = during(rollout(Step.STOPPING_OLD), active_slot="b")
    killed = slot(A, "old", job=None, exited_at="2026-12-01T12:00:09Z", exit_code=137)
    action = next_of(status, killed, slot(B), spec=spec)
    assert isinstance(action, plan.Advance) and action.step is Step.HANDING_OVER_LEASE
    warning = "slot a's kcp did not exit within 3s of SIGTERM: its host agent killed it"
    assert action.warning == ("SlotKilled", warning)
    stopped = slot(A, "old", job=None, exited_at="2026-12-01T12:00:09Z", exit_code=0)
    action = next_of(status, stopped, slot(B), spec=spec)
    assert isinstance(action, plan.Advance) and action.warning is None


def test_blue_green_stops_whatever_runs_in_the_old_slot() -> None:
    # two kcp processes must not stay on one store past the flip, whatever revision the old one runs
    status = during(rollout(Step.STOPPING_OLD), active_slot="b")
    assert next_of(status, slot(A, "unexpected"), slot(B)) == plan.StopSlot(A, "job-a")


def test_old_slot_is_asked_to_stop_before_it_is_killed() -> None:
    # past the timeout but never asked (an operator restart between the step write and the stop)
    status = during(rollout(Step.STOPPING_OLD), active_slot="b")
    late = at(SPEC.roll.stop_timeout_seconds + 1)
    assert next_of(status, slot(A, "old"), slot(B), now=late) == plan.StopSlot(A, "job-a")


def test_watches_the_old_kcp_holds_after_closing_its_listener_are_closed_at_the_front() -> None:
    unlistened = ({"type": "Listening", "status": "False", "reason": "ShuttingDown", "message": "m"},)
    old = slot(A, "old", job=plan.JobView(name="j", active=1, deleting=True), conditions=unlistened)
    held = during(rollout(Step.STOPPING_OLD), active_slot="b", front=FrontStatus(connections={"a": 3}))
    assert next_of(held, old, slot(B)) == plan.RequestDrain(A)
    # asked once; nothing left open; or still listening (in its shutdown delay): wait for the exit
    asked = during(rollout(Step.STOPPING_OLD), front=FrontStatus(connections={"a": 3}, drain="a"))
    closed = during(rollout(Step.STOPPING_OLD), active_slot="b", front=FrontStatus(connections={"b": 3}))
    listening = slot(A, "old", job=plan.JobView(name="j", active=1, deleting=True))
    for status, old_slot in ((asked, old), (closed, old), (held, listening)):
        assert isinstance(next_of(status, old_slot, slot(B)), plan.Wait)
    # Single: the front is asked to serve the stopping slot still; that ask goes with the drain (the front
    # refuses to drain a backend it is asked to serve), else the watches hold the old kcp until the kill.
    single_held = during(single(Step.STOPPING_OLD), front=FrontStatus(connections={"a": 3}))
    stopping = slot(A, "old", job=old.job, conditions=unlistened)
    assert next_of(single_held, stopping) == plan.RequestDrain(A, withdraw=True)


def test_single_stopping_old_stops_the_serving_slot_then_starts() -> None:
    status = during(single(Step.STOPPING_OLD))
    # the slot being stopped is also the roll's target slot: its going is no SlotLost
    assert next_of(status, slot(A, "old")) == plan.StopSlot(A, "job-a")
    for stopped in [slot(A, "old", exited_at="2026-12-01T12:00:09Z"), None, slot(A, REV)]:
        action = next_of(status, *([stopped] if stopped else []))
        assert isinstance(action, plan.Advance) and action.step is Step.STARTING, stopped


# ----- after the flip ----------------------------------------------------------------------------


AFTER_FLIP = [
    rollout(Step.STOPPING_OLD),
    rollout(Step.HANDING_OVER_LEASE),
    rollout(Step.PROBING),
    rollout(Step.DRAINING),
    rollout(Step.RETIRING),
    single(Step.HANDING_OVER_LEASE),
    single(Step.PROBING),
    single(Step.RETIRING),
]


@pytest.mark.parametrize("ro", AFTER_FLIP, ids=lambda r: f"{r.shape}-{r.step}")
@pytest.mark.parametrize(
    "lost",
    [None, slot(B, exited_at=STAMP, exit_code=137), slot(B, job=plan.JobView(name="j", failed=1))],
    ids=["missing", "exited", "job-failed"],
)
def test_new_slot_lost_after_the_flip_fails_the_roll(ro: RolloutStatus, lost: plan.SlotView | None) -> None:
    to = SlotName(ro.to_slot)
    gone = [dataclasses.replace(lost, name=to)] if lost else []
    others = [slot(A, "old")] if to is B else []
    action = next_of(during(ro, active_slot=ro.to_slot), *others, *gone)
    assert isinstance(action, plan.Fail) and action.reason == "SlotLost"
    assert f"slot {to.value} stopped" in action.message and "after the front moved to it" in action.message
    assert (" with code 137 " in action.message) == (lost is not None and lost.exit_code == 137)


def test_lease_and_probe_carry_what_is_left_of_their_timeouts() -> None:
    status = during(rollout(Step.HANDING_OVER_LEASE, from_holder="old-kcp"), active_slot="b")
    action = next_of(status, slot(B), now=at(10))
    timeout = SPEC.roll.lease_timeout_seconds - 10
    assert action == plan.FreeLease(URL, stale="old-kcp", delete=False, timeout=timeout)
    status = during(rollout(Step.PROBING), active_slot="b")
    action = next_of(status, slot(B), now=at(10))
    timeout = SPEC.roll.probe_timeout_seconds - 10
    assert action == plan.Probe(URL, prefix=f"kcpshard-probe-{REV[:8]}", timeout=timeout, location="root")


def test_drain_waits_for_connections_then_asks_the_front_to_close_them() -> None:
    ro = rollout(Step.DRAINING)
    status = during(ro, active_slot="b", front=FrontStatus(connections={"a": 2, "b": 5}))
    waiting = next_of(status, slot(B))
    assert isinstance(waiting, plan.Wait) and waiting.until == at(SPEC.roll.drain_timeout_seconds)
    assert "2 connections" in waiting.reason
    late = at(SPEC.roll.drain_timeout_seconds)
    assert next_of(status, slot(B), now=late) == plan.RequestDrain(A)
    # asked already: the old kcp has exited, so the roll goes on without asking again
    asked = during(ro, active_slot="b", front=FrontStatus(connections={"a": 2}, drain="a"))
    done = next_of(asked, slot(B), now=late)
    assert isinstance(done, plan.Advance) and done.step is Step.RETIRING
    assert "close the 2 connection(s) left on slot a" in done.message


@pytest.mark.parametrize(
    "fs",
    [FrontStatus(connections={"a": 0, "b": 3}), FrontStatus(connections={"b": 3}), None],
    ids=["zero", "none-listed", "no-front"],
)
def test_drain_ends_when_no_connection_is_left(fs: FrontStatus | None) -> None:
    action = next_of(during(rollout(Step.DRAINING), active_slot="b", front=fs), slot(B))
    assert isinstance(action, plan.Advance) and action.step is Step.RETIRING
    assert "no connections left on slot a" in action.message


@pytest.mark.parametrize(
    "ro", [single(Step.DRAINING), rollout(Step.DRAINING, from_slot=None)], ids=["single", "first-slot"]
)
def test_drain_is_skipped_without_another_slot(ro: RolloutStatus) -> None:
    # in Single shape the "old" slot is the serving one: its connections are the live traffic
    status = during(ro, active_slot=ro.to_slot, front=FrontStatus(connections={"a": 3, "b": 3}))
    action = next_of(status, slot(SlotName(ro.to_slot)), now=at(3600))
    assert action == plan.Advance(Step.RETIRING, "no old slot to drain")


def test_retiring_deletes_the_old_slot_then_finishes() -> None:
    status = during(rollout(Step.RETIRING), active_slot="b")
    assert next_of(status, slot(A, "old"), slot(B)) == plan.DeleteSlot(A, why="retired after the roll")
    finish = next_of(status, slot(B))
    assert isinstance(finish, plan.Finish) and finish.message == f"slot b serves revision {REV}"
    assert (finish.report.result, finish.event, finish.verdict.stalls) == (
        "Succeeded",
        "RollSucceeded",
        False,
    )
    assert finish.verdict.ready == ("True", "Serving", finish.message) and finish.to_slot == slot(B)


def test_single_retiring_keeps_its_only_slot() -> None:
    action = next_of(during(single(Step.RETIRING)), slot(A))
    assert isinstance(action, plan.Finish) and action.message == f"slot a serves revision {REV}"


def test_restored_roll_finishes_on_the_old_revision() -> None:
    restoring = single(Step.RETIRING, restoring=True, failure_reason="SlotExited", failure_message="it died")
    action = next_of(during(restoring), slot(A, "old"))
    assert isinstance(action, plan.Finish) and action.message == "slot a serves the old revision old again"
    # the roll failed, though the old revision serves again: Stalled for the first failure, a Warning
    assert (action.report.result, action.report.message) == ("RolledBack", f"it died; {action.message}")
    assert (action.event, action.warning, action.verdict.stalls) == ("RolledBack", True, True)
    assert action.verdict.stalled[1] == "SlotExited" and action.verdict.reconciling[1] == "RolledBack"


def test_a_failed_recovery_stalls_instead_of_looping() -> None:
    last = RollReport(
        result="Aborted",
        reason="ReadyTimeout",
        to_revision=REV,
        recovery=True,
        message="slot b was not ready",
    )
    status = KcpShardStatus(active_slot="a", active_revision=REV, last_roll=last, front=FRONT_UP)
    action = plan.next_action(observe(status, {}))
    assert isinstance(action, plan.Stall) and action.reason == "SlotLost"
    assert action.message.startswith("slot a is lost; ") and "slot b was not ready" in action.message
    # the retry annotation tries once more
    again = plan.next_action(observe(status, {}, retry_token="1"))
    assert isinstance(again, plan.StartRoll) and again.event.reason == "SlotLost" and again.rollout.recovery


def test_a_front_that_cannot_serve_stalls_a_serving_shard() -> None:
    front = FrontStatus(observed_at=STAMP, error="haproxy exited with signal SIGKILL; restarting it")
    status = KcpShardStatus(active_slot="a", active_revision=REV, front=front)
    action = plan.next_action(observe(status, {A: slot(A)}))
    assert isinstance(action, plan.Stall) and action.reason == "FrontFailed"
    assert "restarting it" in action.message


def test_starting_waits_for_an_earlier_process_of_the_slot_then_gives_up() -> None:
    status = during(rollout(Step.STARTING), active_slot="a")
    busy = plan.Observed(**{**observe(status, {A: slot(A, "old")}).__dict__, "busy": {B: ("pod-b",)}})
    waiting = plan.next_action(busy)
    assert isinstance(waiting, plan.Wait) and "earlier process of slot b" in waiting.reason
    late = plan.Observed(
        **{**busy.__dict__, "now": T0 + datetime.timedelta(seconds=SPEC.roll.ready_timeout_seconds)}
    )
    action = plan.next_action(late)
    assert isinstance(action, plan.Abort) and action.reason == "SlotBusy"
    # once it has stopped, the slot is created
    free = plan.Observed(**{**busy.__dict__, "busy": {}})
    assert isinstance(plan.next_action(free), plan.CreateSlot)


def test_a_failed_roll_stays_failed_after_a_recovery_roll_in_between() -> None:
    failed = RollReport(
        result="Aborted", reason="ReadyTimeout", to_revision=REV, message="slot b was not ready"
    )
    recovered = RollReport(
        result="Succeeded", to_revision="old", recovery=True, message="slot a serves again"
    )
    status = KcpShardStatus(
        active_slot="a", active_revision="old", last_roll=recovered, failed_roll=failed, front=FRONT_UP
    )
    action = plan.next_action(observe(status, {A: slot(A, "old")}))
    assert isinstance(action, plan.Stall) and action.reason == "ReadyTimeout"


# ----- version pairs that must not run side by side ----------------------------------------------

V27 = SPEC.model_copy(update={"kcp": SPEC.kcp.model_copy(update={"version": "v0.27.3"})})
V28 = SPEC.model_copy(update={"kcp": SPEC.kcp.model_copy(update={"version": "v0.28.0"})})
SERVING_V27 = KcpShardStatus(
    active_slot="a", active_revision="old", active_spec=V27.model_dump(mode="json", by_alias=True)
)


def test_a_blue_green_roll_across_a_storage_change_stalls_before_anything_starts() -> None:
    action = next_of(SERVING_V27, slot(A, "old"), spec=V28)
    assert isinstance(action, plan.Stall) and action.reason == "UnsafeSideBySide", action
    for words in ("kcp v0.27.3 serves", "kcp v0.28.0", "crosses the storage change at v0.28.0"):
        assert words in action.message, action.message
    assert (
        "spec.shape: Single" in action.message and "spec.roll.allowUnsafeSideBySide: true" in action.message
    )


def test_the_same_pair_rolls_in_the_single_shape_or_when_the_risk_is_accepted() -> None:
    single_roll = started(
        next_of(SERVING_V27, slot(A, "old"), spec=V28.model_copy(update={"shape": Shape.SINGLE}))
    )
    assert single_roll.shape is Shape.SINGLE and single_roll.to_slot == "a"
    accepted = started(
        next_of(SERVING_V27, slot(A, "old"), spec=with_roll(V28, allow_unsafe_side_by_side=True))
    )
    assert accepted.shape is Shape.BLUE_GREEN and accepted.to_slot == "b"


def test_a_safe_pair_and_a_first_slot_roll_blue_green() -> None:
    assert started(next_of(SERVING_V27, slot(A, "old"), spec=V27.model_copy(update={"front": SPEC.front})))
    assert started(next_of(KcpShardStatus(front=FRONT_UP), spec=V28)).to_slot == "a"  # nothing serves yet


# ----- root shard first --------------------------------------------------------------------------

NON_ROOT = KcpShardSpec.model_validate(
    SPEC_JSON
    | {
        "shard": {
            "name": "beta",
            "root": False,
            "rootShardRef": {"name": "root"},
            "cacheKubeconfigSecretRef": {"name": "cache"},
            "rootShardKubeconfigSecretRef": {"name": "root-kubeconfig"},
        }
    }
)


def non_root_next(root: plan.RootShardView | None, spec: KcpShardSpec = NON_ROOT) -> plan.Action:
    status = KcpShardStatus(active_slot="a", active_revision="old", active_spec=OLD_SPEC_JSON)
    return next_of(status, slot(A, "old"), spec=spec, root_shard=root)


def test_a_non_root_shard_waits_while_its_root_serves_an_older_kcp() -> None:
    action = non_root_next(plan.RootShardView("root", found=True, serving_version="v0.31.0"))
    assert isinstance(action, plan.Hold) and action.reason == "WaitingForRootShard", action
    assert "root shard default/root" in action.message and "kcp v0.32.1 or newer" in action.message
    assert "it serves kcp v0.31.0" in action.message
    assert plan.pause(action, observe()) == plan.RESYNC_SECONDS  # it looks again by itself
    nothing_yet = non_root_next(plan.RootShardView("root", found=True))
    assert isinstance(nothing_yet, plan.Hold) and "it serves nothing yet" in nothing_yet.message


def test_a_non_root_shard_rolls_once_its_root_serves_that_version_or_newer() -> None:
    for version in ("v0.32.1", "v0.33.0"):
        assert started(non_root_next(plan.RootShardView("root", found=True, serving_version=version)))
    # a pre-release of the target is older than it
    action = non_root_next(plan.RootShardView("root", found=True, serving_version="v0.32.1-rc.1"))
    assert isinstance(action, plan.Hold)


def test_a_missing_root_stalls_and_a_root_shard_or_one_without_a_ref_never_waits() -> None:
    missing = non_root_next(plan.RootShardView("root", found=False))
    assert isinstance(missing, plan.Stall) and missing.reason == "RootShardMissing"
    assert "KcpShard default/root, which does not exist" in missing.message
    older_root = plan.RootShardView("root", found=True, serving_version="v0.30.0")
    assert started(non_root_next(older_root, spec=SPEC))  # a root shard is its own root
    assert started(non_root_next(None))  # no ref read: no ordering


# ----- kubectl kcpshard reassert -----------------------------------------------------------------


def test_reassert_rolls_the_serving_revision_to_the_other_slot_once_per_annotation_value() -> None:
    status = KcpShardStatus(active_slot="a", active_revision="old", active_spec=OLD_SPEC_JSON)
    ro = started(next_of(status, slot(A, "old"), reassert_token="t1"))
    assert (ro.from_slot, ro.to_slot) == ("a", "b")
    assert ro.target_revision == "old" and ro.target_spec == OLD_SPEC_JSON  # not the spec's revision
    assert ro.reassert_token == "t1" and ro.shape is Shape.BLUE_GREEN
    done = status.model_copy(
        update={"last_roll": RollReport(result="Succeeded", reassertToken="t1", toRevision="old")}
    )
    assert started(next_of(done, slot(A, "old"), reassert_token="t1")).target_revision == REV  # the spec's
    nothing = KcpShardStatus(front=FRONT_UP)
    assert started(next_of(nothing, reassert_token="t1")).reassert_token is None  # nothing serves yet


@pytest.mark.parametrize(
    ("restarts", "reported", "new"),
    [(0, None, None), (1, None, 1), (3, 1, 2), (2, 2, None)],
    ids=["none", "first", "more", "all-reported"],
)
def test_front_restarts_are_reported_once_before_anything_else(
    restarts: int, reported: int | None, new: int | None
) -> None:
    front = FRONT_UP.model_copy(
        update={"restarts": restarts, "restarts_reported": reported, "last_restart": "x"}
    )
    action = next_of(during(rollout(Step.WAITING_READY), front=front), slot(A, "old"), slot(B))
    if new is None:
        assert not isinstance(action, plan.ReportFrontRestarts), action
    else:
        assert action == plan.ReportFrontRestarts(total=restarts, new=new, last="x")
