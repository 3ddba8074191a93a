"""Ready only when a client gets answers: which part of the serving path is down, as the plan says it."""

from __future__ import annotations

import pytest
from tests.unit.test_roll_plan import STAMP, B, failed_condition, next_of, ready_slot, serving, slot

from kcpshard.api.models import FrontStatus
from kcpshard.roll import plan


def test_front_confirming_the_ready_active_slot_is_steady() -> None:
    assert isinstance(next_of(serving(), ready_slot(B)), plan.Steady)


@pytest.mark.parametrize(
    "front",
    [
        None,
        FrontStatus(observed_at=STAMP),
        FrontStatus(observed_at=STAMP, observed_backend="a", observed_port=4321),
        FrontStatus(observed_at=STAMP, observed_backend="b", observed_port=9999),
    ],
    ids=["no-front-status", "no-backend", "other-slot", "other-port"],
)
def test_a_front_that_does_not_serve_the_active_slot_is_not_ready(front: FrontStatus | None) -> None:
    status = serving().model_copy(update={"front": front})
    action = next_of(status, ready_slot(B))
    assert isinstance(action, plan.Stall) and action.reason == "FrontNotServing", action
    assert "does not serve slot b" in action.message and "deployment/shard1-front" in action.message


def test_a_kcp_that_cannot_reach_its_store_names_the_store() -> None:
    down = failed_condition("Ready", "ReadyzFailing", "[-]etcd failed: reason withheld")
    action = next_of(serving(), slot(B, conditions=(down,), port=4321))
    assert isinstance(action, plan.Stall) and action.reason == "StoreNotReady", action
    assert "cannot reach the store (http://127.0.0.1:2379): [-]etcd failed" in action.message


def test_any_other_readyz_failure_is_the_slot() -> None:
    down = failed_condition("Ready", "ReadyzFailing", "[-]poststarthook/bootstrap failed")
    action = next_of(serving(), slot(B, conditions=(down,), port=4321))
    assert isinstance(action, plan.Stall) and action.reason == "SlotNotReady", action
    assert "kubectl logs job/job-b" in action.message


def test_a_slot_not_yet_reporting_ready_is_not_judged() -> None:
    # Ready=Unknown (an agent restarted and probes again): no verdict, the front decides
    assert isinstance(next_of(serving(), slot(B, port=4321)), plan.Steady)
