"""The promotion gate (spec.roll.autoPromote: false) and a person's abort, as the plan decides them."""

from __future__ import annotations

from typing import Any

import pytest
from tests.unit.test_roll_plan import (
    REV,
    SPEC,
    A,
    B,
    at,
    during,
    front,
    next_of,
    ready_slot,
    rollout,
    single,
    slot,
    with_roll,
)

from kcpshard.api.models import KcpShardSpec, Shape
from kcpshard.roll import plan
from kcpshard.roll.plan import Step

GATED = with_roll(auto_promote=False)


def gated_roll(step: Step = Step.FLIPPING, spec: KcpShardSpec = GATED, **kw: Any) -> Any:
    return rollout(step, target_spec=spec.model_dump(mode="json", by_alias=True, exclude_none=True), **kw)


def flip_of(ro: Any, **kw: Any) -> plan.Action:
    return next_of(during(ro), slot(A, "old"), ready_slot(B, port=4321), **kw)


def test_auto_promote_is_the_default_and_flips_at_once() -> None:
    assert SPEC.roll.auto_promote is True
    assert flip_of(rollout(Step.FLIPPING)) == plan.Flip(B, 4321, REV)


def test_a_gated_roll_holds_at_the_flip_with_the_commands_to_go_on() -> None:
    action = flip_of(gated_roll())
    assert isinstance(action, plan.Hold), action
    assert action.reason == "WaitingForPromotion"
    assert "kubectl kcpshard promote shard1" in action.message
    assert "kubectl kcpshard abort shard1" in action.message
    assert "slot a serves" in action.message
    assert action.until is None  # no deadline: it waits as long as it takes
    assert plan.pause(action, plan.Observed(spec=SPEC, revision=REV, now=at(0))) == plan.RESYNC_SECONDS


def test_the_gate_follows_the_spec_the_roll_started_with() -> None:
    # the live spec turned autoPromote off after the roll began: this roll does not wait
    assert flip_of(
        rollout(Step.FLIPPING, target_spec=SPEC.model_dump(mode="json", by_alias=True)), spec=GATED
    ) == (plan.Flip(B, 4321, REV))


def test_a_new_promote_value_opens_the_gate() -> None:
    assert flip_of(gated_roll(promote_token="t1"), promote_token="t2") == plan.Flip(B, 4321, REV)


@pytest.mark.parametrize("token", [None, "t1"], ids=["none", "the-value-at-the-start"])
def test_a_promote_value_from_before_the_roll_does_not_promote(token: str | None) -> None:
    assert isinstance(flip_of(gated_roll(promote_token="t1"), promote_token=token), plan.Hold)


def test_the_deadline_counts_from_the_ready_slot_then_aborts() -> None:
    spec = with_roll(auto_promote=False, promotion_deadline_seconds=30)
    waiting = flip_of(gated_roll(spec=spec), now=at(10))
    assert isinstance(waiting, plan.Hold) and waiting.until == at(30)
    assert plan.pause(waiting, plan.Observed(spec=SPEC, revision=REV, now=at(25))) == 5
    late = flip_of(gated_roll(spec=spec), now=at(30))
    assert isinstance(late, plan.Abort), late
    assert late.reason == "PromotionDeadlineExceeded"
    assert "not promoted within 30s" in late.message
    assert late.remove is B  # the new slot goes; slot a never stopped serving


@pytest.mark.parametrize(
    "ro",
    [
        gated_roll(from_slot=None, from_revision=None),
        gated_roll(recovery=True),
        gated_roll(restoring=True),
    ],
    ids=["first-roll", "recovery", "restoring"],
)
def test_nothing_waits_when_nothing_serves_meanwhile(ro: Any) -> None:
    action = next_of(during(ro, active_slot=ro.from_slot), ready_slot(B, port=4321))
    assert isinstance(action, plan.Flip), action


def test_a_single_roll_never_waits() -> None:
    spec_json = GATED.model_copy(update={"shape": Shape.SINGLE}).model_dump(mode="json", by_alias=True)
    ro = single(Step.FLIPPING, target_spec=spec_json)
    action = next_of(during(ro), ready_slot(A, port=4321))
    assert action == plan.Flip(A, 4321, REV)


def test_the_front_already_asked_is_past_the_gate() -> None:
    # an operator restarted after it wrote the flip: the gate is not asked again
    status = during(gated_roll(), front=front("b", 4321, ("a", 1111)))
    assert isinstance(next_of(status, slot(A, "old"), ready_slot(B, port=4321)), plan.Wait)


@pytest.mark.parametrize("step", [Step.STARTING, Step.WAITING_READY, Step.FLIPPING])
def test_abort_before_the_flip_stops_the_new_slot_and_keeps_the_old(step: Step) -> None:
    ro = rollout(step, abort_token="t1")
    action = next_of(during(ro), slot(A, "old"), slot(B), abort_token="t2")
    assert isinstance(action, plan.Abort), action
    assert action.reason == "Aborted" and "kcpshard.dev/abort=t2" in action.message
    assert action.remove is B


def test_abort_during_the_backup_ends_the_roll_before_anything_started() -> None:
    action = next_of(during(rollout(Step.BACKING_UP)), slot(A, "old"), abort_token="t2")
    assert isinstance(action, plan.Abort) and action.remove is None


def test_abort_of_a_single_roll_puts_the_old_revision_back() -> None:
    action = next_of(during(single(Step.WAITING_READY)), slot(A), abort_token="t2")
    assert isinstance(action, plan.Restore) and action.reason == "Aborted"


@pytest.mark.parametrize("step", [Step.STOPPING_OLD, Step.HANDING_OVER_LEASE, Step.PROBING, Step.DRAINING])
def test_abort_after_the_flip_is_not_honoured(step: Step) -> None:
    ro = rollout(step)
    action = next_of(during(ro, active_slot="b"), slot(A, "old"), ready_slot(B), abort_token="t2")
    assert not isinstance(action, plan.Abort | plan.Restore), action


def test_an_abort_value_from_before_the_roll_does_not_abort() -> None:
    action = next_of(
        during(rollout(Step.FLIPPING, abort_token="t1")),
        slot(A, "old"),
        ready_slot(B, port=4321),
        abort_token="t1",
    )
    assert action == plan.Flip(B, 4321, REV)


def test_a_new_roll_records_the_annotations_it_started_with() -> None:
    from tests.unit.test_roll_plan import FRONT_UP, OLD_SPEC_JSON, observe

    from kcpshard.api.models import KcpShardStatus

    status = KcpShardStatus(active_slot="a", active_revision="old", active_spec=OLD_SPEC_JSON, front=FRONT_UP)
    obs = observe(status, {A: slot(A, "old")}, promote_token="p0", abort_token="x0")
    action = plan.next_action(obs)
    assert isinstance(action, plan.StartRoll), action
    assert (action.rollout.promote_token, action.rollout.abort_token) == ("p0", "x0")
