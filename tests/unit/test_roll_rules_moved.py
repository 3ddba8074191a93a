"""The rules that moved from the controller's handlers into the plan, one test each: first sight, an
unparsable or invalid spec, the shard's own objects, what a handler's outcome leads to (the post-flip
failure rule, the lease handover, the probe), the lease reads a decision needs, the identitycache rule,
and one spec per roll."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import pytest

from fakes import REV, SPEC
from kcpshard.api.models import Condition, KcpShardSpec, KcpShardStatus, RolloutStatus, Shape, SlotName
from kcpshard.roll import plan
from kcpshard.roll.actions import (
    Abort,
    Advance,
    CreateFront,
    CreateSharedSecret,
    Event,
    Fail,
    FirstSight,
    Probe,
    ReadKcpLease,
    Record,
    Restore,
    SlotMark,
    Stall,
    StartRoll,
    Step,
    UpdateFront,
    Wait,
)
from kcpshard.roll.observed import FrontWorkload, JobView, LeaseReading, Observed, ShardOnly, SlotView
from kcpshard.roll.outcomes import Failed, HolderSeen, NoNewHolder, ProbeNotReady, ProbeReady

T0 = datetime.datetime(2026, 12, 1, 12, 0, 0, tzinfo=datetime.UTC)
STAMP = "2026-12-01T12:00:00Z"
SEEN = [Condition(type="Ready", status="Unknown", reason="Observed", last_transition_time=STAMP)]
URL = "https://127.0.0.1:6443"
A, B = SlotName.A, SlotName.B


def spec_with(**update: Any) -> KcpShardSpec:
    return SPEC.model_copy(update=update)


def rollout(step: Step, **kw: Any) -> RolloutStatus:
    kw.setdefault("from_slot", "a")
    kw.setdefault("from_revision", "old")
    kw.setdefault("id", "r1")
    kw.setdefault("to_slot", "b")
    return RolloutStatus(step=step.value, target_revision=REV, started_at=STAMP, **kw)


def slot(name: SlotName, revision: str = REV, **kw: Any) -> SlotView:
    kw.setdefault("job", JobView(name=f"job-{name.value}", active=1))
    return SlotView(name=name, revision=revision, roll_id="r1", **kw)


def seen(ro: RolloutStatus | None = None, *slots: SlotView, **kw: Any) -> Observed:
    status = KcpShardStatus(conditions=SEEN, rollout=ro, active_slot="a", active_revision="old")
    if "status" in kw:
        status = kw.pop("status")
    kw.setdefault("kcp_lease", LeaseReading())
    kw.setdefault("spec", SPEC)
    kw.setdefault("now", T0)
    return Observed(name="root", revision=REV, status=status, slots={s.name: s for s in slots}, **kw)


# ----- what used to be written while observing ---------------------------------------------------


def test_first_sight_comes_before_anything_else() -> None:
    new = dataclasses.replace(seen(), status=KcpShardStatus(), shared_secret=False)
    assert plan.next_action(new) == FirstSight()
    assert plan.next_action(ShardOnly(status=KcpShardStatus(), spec_error="spec.node: bad")) == FirstSight()


def test_a_spec_that_does_not_parse_stalls_and_a_deleted_shard_waits() -> None:
    bad = ShardOnly(status=KcpShardStatus(conditions=SEEN), spec_error="spec.node: Field required")
    assert plan.next_action(bad) == Stall("InvalidSpec", "spec.node: Field required")
    deleting = ShardOnly(status=KcpShardStatus(), deleting=True)
    action = plan.next_action(deleting)
    assert isinstance(action, Wait) and plan.pause(action, deleting) == plan.RESYNC_SECONDS


# ----- what used to be done on every round before the plan ---------------------------------------


def test_the_shared_secret_then_the_front_are_made_before_the_roll_goes_on() -> None:
    assert plan.next_action(seen(shared_secret=False)) == CreateSharedSecret()
    assert plan.next_action(seen(front=FrontWorkload.ABSENT)) == CreateFront()
    assert plan.next_action(seen(front=FrontWorkload.STALE)) == UpdateFront()
    assert plan.pause(CreateFront(), seen()) is None  # the next round follows at once


def test_an_invalid_spec_gets_no_new_front() -> None:
    bad = spec_with(extra_args=["--secure-port=6443"])
    action = plan.next_action(
        seen(spec=bad, front=FrontWorkload.ABSENT, status=KcpShardStatus(conditions=SEEN))
    )
    assert isinstance(action, Stall) and action.reason == "InvalidSpec"


# ----- the failure rule, once --------------------------------------------------------------------


def test_a_failure_without_a_roll_stalls() -> None:
    outcome = Failed("NoRootMaterial", "no admin.kubeconfig")
    assert plan.next_action(seen(), outcome) == Stall("NoRootMaterial", "no admin.kubeconfig")


@pytest.mark.parametrize(
    "ro",
    [
        rollout(Step.STOPPING_OLD),
        rollout(Step.HANDING_OVER_LEASE),
        rollout(Step.PROBING),
        rollout(Step.DRAINING),
    ],
    ids=lambda r: r.step,
)
def test_a_failure_after_the_flip_fails_the_roll(ro: RolloutStatus) -> None:
    # blue/green's StoppingOld is after the flip too: the handlers' rule used to miss it
    action = plan.next_action(seen(ro, slot(A, "old"), slot(B, port=1)), Failed("X", "broke"))
    assert isinstance(action, Fail) and (action.reason, action.message) == ("X", "broke")
    # the front stays on the new slot: the stall says what serves, and the roll's report is Failed
    assert action.end.report.result == "Failed" and action.end.event == Event(
        "X", action.end.verdict.stalled[2], True
    )
    assert action.end.verdict.reconciling == ("False", "RollFailed", "")


def test_a_failure_while_backing_up_aborts_even_in_single_shape() -> None:
    # nothing was touched yet: the old slot keeps serving (restoring it would stop it)
    ro = rollout(Step.BACKING_UP, shape=Shape.SINGLE, to_slot="a")
    action = plan.next_action(seen(ro, slot(A, "old")), Failed("BackupFailed", "needs etcd"))
    assert isinstance(action, Abort) and action.reason == "BackupFailed"


def test_an_abort_after_the_flip_was_asked_puts_the_previous_record_back_and_removes_the_new_slot() -> None:
    status = KcpShardStatus(
        conditions=SEEN, rollout=rollout(Step.FLIPPING), active_slot="b", active_revision=REV
    )
    obs = seen(None, slot(A, "old", port=1111), slot(B, port=4321), status=status)
    action = plan.failure_action(obs, "FlipTimeout", "no confirmation")
    assert isinstance(action, Abort) and (action.reason, action.message) == ("FlipTimeout", "no confirmation")
    assert (action.put_back, action.remove) == (Record("a", "old", 1111), B)
    assert action.end.report.result == "Aborted" and action.end.verdict.reconciling[1] == "RollAborted"
    first = KcpShardStatus(
        conditions=SEEN, rollout=rollout(Step.FLIPPING, from_slot=None, from_revision=None), active_slot="b"
    )
    action = plan.failure_action(seen(None, slot(B, port=4321), status=first), "FlipTimeout", "m")
    assert isinstance(action, Abort) and action.put_back == Record()


def test_a_single_roll_failing_before_the_flip_reads_the_lease_then_restores() -> None:
    ro = rollout(Step.WAITING_READY, shape=Shape.SINGLE, to_slot="a")
    unread = seen(ro, kcp_lease=None)
    assert plan.failure_action(unread, "SlotExited", "m") == ReadKcpLease(URL)
    read = seen(ro, kcp_lease=LeaseReading(found=True, holder="failed-kcp"))
    restore = plan.failure_action(read, "SlotExited", "m")
    assert isinstance(restore, Restore) and (restore.reason, restore.holder) == ("SlotExited", "failed-kcp")
    # the old revision starts again where the old slot stopped, and a person is told so
    assert restore.step is Step.STARTING
    assert restore.event == Event("SlotExited", "m; starting the old revision old again", warning=True)


# ----- the lease handover ------------------------------------------------------------------------


def test_the_handover_reads_the_lease_first() -> None:
    ro = rollout(Step.HANDING_OVER_LEASE, from_holder="old-kcp")
    assert plan.next_action(seen(ro, slot(B, port=1), kcp_lease=None)) == ReadKcpLease(URL)


def test_a_lease_that_cannot_be_read_is_read_again_until_the_deadline() -> None:
    ro = rollout(Step.HANDING_OVER_LEASE, from_holder="old-kcp")
    error = LeaseReading(error="connection refused")
    action = plan.next_action(seen(ro, slot(B, port=1), kcp_lease=error))
    assert action == Wait(
        "could not read kcp's controller lease: connection refused", until=T0 + datetime.timedelta(seconds=2)
    )
    late = dataclasses.replace(
        seen(ro, slot(B, port=1), kcp_lease=error), now=T0 + datetime.timedelta(hours=1)
    )
    action = plan.next_action(late)
    assert isinstance(action, Fail) and action.reason == "LeaseTimeout"


def test_a_new_holder_seen_by_the_handler_advances_to_the_probe() -> None:
    ro = rollout(Step.HANDING_OVER_LEASE, from_holder="old-kcp")
    action = plan.next_action(seen(ro, slot(B, port=1)), HolderSeen("new-kcp"))
    mark = SlotMark(
        "b", "LeaseHandedOver", "True", "NewHolder", "controller lease held by new-kcp", "new-kcp"
    )
    assert action == Advance(Step.PROBING, "controller lease held by new-kcp", marks=(mark,))


def test_no_new_holder_in_time_fails_the_roll_naming_the_new_slots_job() -> None:
    ro = rollout(Step.HANDING_OVER_LEASE, from_holder="old-kcp")
    action = plan.next_action(seen(ro, slot(B, port=1)), NoNewHolder(4.0, "holder old-kcp"))
    assert isinstance(action, Fail) and action.reason == "LeaseTimeout"
    assert action.message == (
        "no new holder of kcp's controller lease within 4s (holder old-kcp); kcp's controllers are not "
        "running: see kubectl logs job/job-b"
    )


# ----- the probe ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("from_slot", "step"), [("a", Step.DRAINING), (None, Step.RETIRING)])
def test_a_ready_probe_marks_the_slot_and_moves_on(from_slot: str | None, step: Step) -> None:
    ro = rollout(Step.PROBING, from_slot=from_slot)
    stamps = (("probeCreated", "t1"), ("probeWorkspaceReady", "t2"))
    action = plan.next_action(seen(ro, slot(B, port=1)), ProbeReady("ws-1", 0.5, stamps=stamps))
    message = "workspace ws-1 became Ready in 0.50s and was deleted"
    mark = SlotMark("b", "Probed", "True", "WorkspaceReady", message)
    assert action == Advance(step, message, marks=(mark,), stamps=stamps)  # the report's probe parts


def test_a_probe_not_ready_fails_the_roll() -> None:
    action = plan.next_action(
        seen(rollout(Step.PROBING), slot(B, port=1)), ProbeNotReady(4.0, "Initializing")
    )
    assert isinstance(action, Fail) and action.reason == "ProbeFailed"
    assert "did not become Ready within 4s (Initializing)" in action.message


def non_root(version: str) -> KcpShardSpec:
    shard = SPEC.shard.model_copy(update={"root": False, "name": "s2"})
    return spec_with(shard=shard, kcp=SPEC.kcp.model_copy(update={"version": version}))


@pytest.mark.parametrize(
    ("runs", "stale"),
    [
        (non_root("v0.33.0"), "v0.33.0"),
        (non_root("v0.32.1"), None),
        (SPEC, None),
        (non_root("v0.34.0-rc.1"), "v0.34.0-rc.1"),
    ],
    ids=["non-root-0.33", "non-root-0.32", "root", "pre-release"],
)
def test_the_identity_cache_is_deleted_by_the_probe_of_a_non_root_shard_from_v0_33(
    runs: KcpShardSpec, stale: str | None
) -> None:
    action = plan.next_action(seen(rollout(Step.PROBING), slot(B, port=1), target_spec=runs))
    assert isinstance(action, Probe) and action.stale_identity_cache == stale


# ----- a roll starting ---------------------------------------------------------------------------


def test_a_roll_from_a_serving_slot_reads_the_lease_holder_first_and_records_it() -> None:
    status = KcpShardStatus(conditions=SEEN, active_slot="a", active_revision="old")
    assert plan.next_action(seen(None, slot(A, "old"), status=status, kcp_lease=None)) == ReadKcpLease(URL)
    read = seen(None, slot(A, "old"), status=status, kcp_lease=LeaseReading(found=True, holder="old-kcp"))
    action = plan.next_action(read)
    assert isinstance(action, StartRoll) and action.rollout.from_holder == "old-kcp"
    unreadable = seen(None, slot(A, "old"), status=status, kcp_lease=LeaseReading(error="refused"))
    action = plan.next_action(unreadable)
    assert isinstance(action, StartRoll) and action.rollout.from_holder is None


def test_the_first_slot_needs_no_lease_reading() -> None:
    from kcpshard.api.models import FrontStatus

    status = KcpShardStatus(conditions=SEEN, front=FrontStatus(observed_at=STAMP))
    action = plan.next_action(seen(None, status=status, kcp_lease=None))
    assert isinstance(action, StartRoll) and action.rollout.from_slot is None


# ----- one spec per roll -------------------------------------------------------------------------


def test_a_roll_goes_by_the_spec_it_started_with_not_the_live_one() -> None:
    started = spec_with(roll=SPEC.roll.model_copy(update={"ready_timeout_seconds": 30}))
    live = spec_with(
        roll=SPEC.roll.model_copy(update={"ready_timeout_seconds": 3000}),
        front=SPEC.front.model_copy(update={"port": 7443}),
    )
    ro = rollout(Step.WAITING_READY)
    obs = seen(
        ro, slot(A, "old"), slot(B), spec=live, target_spec=started, now=T0 + datetime.timedelta(seconds=30)
    )
    action = plan.next_action(obs)
    assert isinstance(action, Abort) and "was not ready within 30s" in action.message
    probe = plan.next_action(seen(rollout(Step.PROBING), slot(B, port=1), spec=live, target_spec=started))
    assert isinstance(probe, Probe) and probe.url == URL  # kcp through the roll's front, not 7443
    create = plan.next_action(seen(rollout(Step.STARTING), slot(A, "old"), spec=live, target_spec=started))
    assert create == plan.CreateSlot(B, REV, 0, started, roll_id="r1")


def test_a_recorded_spec_that_does_not_parse_ends_the_roll() -> None:
    obs = seen(
        rollout(Step.WAITING_READY),
        slot(A, "old"),
        slot(B),
        target_spec_error="status.targetSpec.kcp: missing",
    )
    action = plan.next_action(obs)
    assert isinstance(action, Abort) and action.reason == "InvalidSpec"
    assert "status.targetSpec.kcp: missing" in action.message


def test_the_flip_records_the_rolls_spec_as_the_active_one_and_publishes_the_admin_kubeconfig() -> None:
    from kcpshard.api.models import FrontStatus

    target = SPEC.model_dump(mode="json", by_alias=True, exclude_none=True)
    front = FrontStatus(desired_backend="b", desired_port=4321, observed_backend="b", observed_port=4321)
    status = KcpShardStatus(conditions=SEEN, rollout=rollout(Step.FLIPPING, target_spec=target), front=front)
    ready = slot(B, port=4321, conditions=({"type": "Ready", "status": "True"},))
    action = plan.next_action(seen(None, slot(A, "old"), ready, status=status))
    assert isinstance(action, Advance) and action.step is Step.STOPPING_OLD
    assert action.active_spec == target and action.publish_admin
    assert [(m.slot, m.type, m.status) for m in action.marks] == [
        ("b", "Flipped", "True"),
        ("a", "Flipped", "False"),
    ]
