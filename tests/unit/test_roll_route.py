"""The step order and the flip, one rule (kcpshard.roll.route): the plan moves a roll along it, the
failure rule and `kubectl kcpshard abort` ask it whether a step is past the flip, and the plugin's
checklist is drawn from it. Each case here is checked against all of them."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from fakes import REV, SPEC
from kcpshard.api.models import KcpShardStatus, RolloutStatus, RollReport, Shape
from kcpshard.plugin import checklist, render
from kcpshard.roll import plan, route
from kcpshard.roll.actions import Step
from kcpshard.roll.observed import LeaseReading, Observed

STAMP = "2026-12-01T12:00:00Z"
T0 = datetime.datetime(2026, 12, 1, 12, 0, 0, tzinfo=datetime.UTC)
SEEN = [{"type": "Ready", "status": "Unknown", "reason": "Observed", "lastTransitionTime": STAMP}]


def rollout(step: Step = Step.STARTING, **kw: Any) -> RolloutStatus:
    kw.setdefault("from_slot", "a")
    kw.setdefault("to_slot", "b" if kw.get("shape", Shape.BLUE_GREEN) is Shape.BLUE_GREEN else "a")
    return RolloutStatus(step=step.value, target_revision=REV, started_at=STAMP, from_revision="old", **kw)


# (shape, a serving slot to replace, a backup) -> every step, in order
ROUTES = {
    (Shape.BLUE_GREEN, True, False): "Starting WaitingReady Flipping StoppingOld HandingOverLease Probing "
    "Draining Retiring",
    (Shape.BLUE_GREEN, False, False): "Starting WaitingReady Flipping HandingOverLease Probing Retiring",
    (Shape.SINGLE, True, False): "StoppingOld Starting WaitingReady Flipping HandingOverLease Probing "
    "Draining Retiring",
    (Shape.BLUE_GREEN, True, True): "BackingUp Starting WaitingReady Flipping StoppingOld HandingOverLease "
    "Probing Draining Retiring",
    (Shape.SINGLE, True, True): "BackingUp StoppingOld Starting WaitingReady Flipping HandingOverLease "
    "Probing Draining Retiring",
}


def _roll(shape: Shape, old: bool, backup: bool) -> RolloutStatus:
    return rollout(shape=shape, from_slot="a" if old else None, target_spec={"roll": {"backup": backup}})


@pytest.mark.parametrize(("key", "expected"), ROUTES.items(), ids=lambda v: str(v))
def test_the_plan_walks_the_route_the_plugin_draws(key: tuple[Shape, bool, bool], expected: str) -> None:
    roll = _roll(*key)
    drawn = [s.value for s in route.route(roll)]
    assert " ".join(drawn) == expected
    walked = [route.first_step(roll)]
    while walked[-1] is not Step.RETIRING:
        walked.append(route.next_step(roll, walked[-1]))
    assert [s.value for s in walked] == drawn
    # the checklist of a roll under way lists the same steps
    items = checklist.step_items(roll.model_dump(mode="json", by_alias=True, exclude_none=True), running=True)
    assert [i.name for i in items] == [s for s in drawn if s != "BackingUp" or key[2]]


def test_a_report_is_drawn_by_the_same_route() -> None:
    report = RollReport(result="Succeeded", from_slot="a", to_slot="b", timestamps={"backedUp": STAMP})
    assert route.route(report)[:2] == (Step.BACKING_UP, Step.STARTING)


# (step, shape) -> past the flip: the front serves the new slot, the store has moved on
PAST_FLIP = {
    (Step.BACKING_UP, Shape.BLUE_GREEN): False,
    (Step.STARTING, Shape.BLUE_GREEN): False,
    (Step.WAITING_READY, Shape.BLUE_GREEN): False,
    (Step.FLIPPING, Shape.BLUE_GREEN): False,
    (Step.STOPPING_OLD, Shape.BLUE_GREEN): True,
    (Step.STOPPING_OLD, Shape.SINGLE): False,
    (Step.STARTING, Shape.SINGLE): False,
    (Step.HANDING_OVER_LEASE, Shape.BLUE_GREEN): True,
    (Step.HANDING_OVER_LEASE, Shape.SINGLE): True,
    (Step.PROBING, Shape.SINGLE): True,
    (Step.DRAINING, Shape.BLUE_GREEN): True,
    (Step.RETIRING, Shape.SINGLE): True,
}


@pytest.mark.parametrize(("key", "past"), PAST_FLIP.items(), ids=lambda v: str(v))
def test_past_the_flip_is_one_rule_for_the_plan_and_the_plugin(key: tuple[Step, Shape], past: bool) -> None:
    step, shape = key
    roll = rollout(step, shape=shape)
    assert route.after_flip(roll) is past
    # the failure rule: past the flip a failure fails the roll, before it the roll aborts (or restores)
    status = KcpShardStatus.model_validate({"conditions": SEEN}).model_copy(
        update={"rollout": roll, "active_slot": "a", "active_revision": "old"}
    )
    obs = Observed(name="root", revision=REV, status=status, spec=SPEC, now=T0, kcp_lease=LeaseReading())
    assert isinstance(plan.failure_action(obs, "X", "broke"), plan.Fail) is past
    # `kubectl kcpshard abort` refuses past the flip
    shard = {"metadata": {"name": "root"}, "status": {"rollout": roll.model_dump(mode="json", by_alias=True)}}
    assert render.can_abort(shard)[0] is not past
