"""Ready only when a client gets answers: which part of the serving path is down, as the plan says it."""

from __future__ import annotations

import datetime

import pytest
from tests.unit.test_roll_plan import (
    SPEC,
    STAMP,
    T0,
    B,
    failed_condition,
    next_of,
    ready_slot,
    serving,
    slot,
    started,
)

from kcpshard.api.models import FrontStatus, KcpShardStatus
from kcpshard.roll import plan
from kcpshard.roll.observed import FrontAvailability, FrontPodView, FrontWorkload


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


@pytest.mark.parametrize("check", ["etcd", "etcd-readiness"])
def test_a_kcp_that_cannot_reach_its_store_names_the_store(check: str) -> None:
    down = failed_condition("Ready", "ReadyzFailing", f"[-]{check} failed: reason withheld")
    action = next_of(serving(), slot(B, conditions=(down,), port=4321))
    assert isinstance(action, plan.Stall) and action.reason == "StoreNotReady", action
    assert f"cannot reach the store (http://127.0.0.1:2379): [-]{check} failed" in action.message


def test_any_other_readyz_failure_is_the_slot() -> None:
    down = failed_condition("Ready", "ReadyzFailing", "[-]poststarthook/bootstrap failed")
    action = next_of(serving(), slot(B, conditions=(down,), port=4321))
    assert isinstance(action, plan.Stall) and action.reason == "SlotNotReady", action
    assert "kubectl logs job/job-b" in action.message


def test_a_slot_not_yet_reporting_ready_is_not_judged() -> None:
    # Ready=Unknown (an agent restarted and probes again): no verdict, the front decides
    assert isinstance(next_of(serving(), slot(B, port=4321)), plan.Steady)


# ----- the front Deployment itself ---------------------------------------------------------------

PENDING = FrontPodView("shard1-front-x1", "Pending", "waiting: ContainerCreating")
SINCE = "2026-12-01T12:00:00Z"  # T0: unavailable since the plan's now


def _down(*pods: FrontPodView) -> FrontAvailability:
    return FrontAvailability(False, since=SINCE, pods=pods)


def test_an_available_front_is_not_judged_further() -> None:
    action = next_of(serving(), ready_slot(B), front_availability=FrontAvailability(True))
    assert isinstance(action, plan.Steady)


def test_a_new_shard_waits_for_its_front_until_the_timeout_then_stalls_naming_node_and_pod() -> None:
    waiting = next_of(KcpShardStatus(), front_availability=_down(PENDING))
    assert isinstance(waiting, plan.Wait) and waiting.until == T0 + datetime.timedelta(seconds=60)
    assert "pod shard1-front-x1 is Pending (waiting: ContainerCreating)" in waiting.reason
    late = T0 + datetime.timedelta(seconds=60)
    stalled = next_of(KcpShardStatus(), front_availability=_down(PENDING), now=late)
    assert isinstance(stalled, plan.Stall) and stalled.reason == "FrontFailed", stalled
    assert "the front on node n1 has not been available for 60s" in stalled.message
    assert "pod shard1-front-x1 is Pending" in stalled.message
    nothing = next_of(KcpShardStatus(), front_availability=_down(), now=late)
    assert isinstance(nothing, plan.Stall) and "no pod of deployment shard1-front exists" in nothing.message


def test_a_serving_shard_whose_front_is_down_is_not_ready_at_once_then_front_failed() -> None:
    crashed = FrontPodView("shard1-front-x1", "Running", "waiting: CrashLoopBackOff, restarted 3 times")
    action = next_of(serving(), ready_slot(B), front_availability=_down(crashed))
    assert isinstance(action, plan.Stall) and action.reason == "FrontNotServing", action
    assert "CrashLoopBackOff" in action.message
    late = T0 + datetime.timedelta(seconds=61)
    action = next_of(serving(), ready_slot(B), front_availability=_down(crashed), now=late)
    assert isinstance(action, plan.Stall) and action.reason == "FrontFailed", action


def test_no_roll_starts_while_the_front_is_down() -> None:
    spec = SPEC.model_copy(update={"kcp": SPEC.kcp.model_copy(update={"version": "v0.33.0"})})
    action = next_of(serving(), ready_slot(B), spec=spec, front_availability=_down(PENDING))
    assert isinstance(action, plan.Stall), action


def test_a_replacement_front_is_waited_for_then_failed_while_the_old_one_serves() -> None:
    replacing = FrontAvailability(True, replacing_since=SINCE, pods=(PENDING,))
    waiting = next_of(serving(), ready_slot(B), front_availability=replacing)
    assert isinstance(waiting, plan.Wait) and "is being replaced" in waiting.reason
    late = T0 + datetime.timedelta(seconds=60)
    stalled = next_of(serving(), ready_slot(B), front_availability=replacing, now=late)
    assert isinstance(stalled, plan.Stall) and stalled.reason == "FrontFailed", stalled
    assert "the new front on node n1 did not become ready within 60s" in stalled.message
    assert "the front it replaces serves on" in stalled.message


NEWER = SPEC.model_copy(update={"kcp": SPEC.kcp.model_copy(update={"version": "v0.33.0"})})


def test_a_stale_front_waits_for_the_roll_under_way() -> None:
    rolling = serving().model_copy(update={"rollout": started(next_of(serving(), ready_slot(B), spec=NEWER))})
    assert not isinstance(next_of(rolling, ready_slot(B), front=FrontWorkload.STALE), plan.UpdateFront)
    assert isinstance(next_of(serving(), ready_slot(B), front=FrontWorkload.STALE), plan.UpdateFront)


def test_a_node_that_is_not_ready_is_named_and_never_turns_into_front_failed() -> None:
    why = "node n1 is Unknown since 2026-12-01T12:00:00Z (Kubelet stopped posting node status.)"
    lost = FrontAvailability(
        False, since=SINCE, pods=(FrontPodView("shard1-front-x1", "Running"),), node_down=why
    )
    for now in (T0, T0 + datetime.timedelta(seconds=600)):
        action = next_of(serving(), ready_slot(B), front_availability=lost, now=now)
        assert isinstance(action, plan.Stall) and action.reason == "NodeNotReady", action
        assert action.message.startswith(why)
        assert f"the front agent last reported serving slot b at {STAMP}" in action.message
        assert "once node n1 is Ready again" in action.message
    new = next_of(KcpShardStatus(), front_availability=lost)
    assert isinstance(new, plan.Stall) and "the front agent has not reported serving" in new.message
