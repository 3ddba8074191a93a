"""kcp's controller lease at the handover (kcpshard.roll.lease): which holder counts as the new slot's
kcp, when the handover is done, and what is done otherwise. These rules lived in the controller."""

from __future__ import annotations

import datetime

from kcpshard.api.models import RolloutStatus
from kcpshard.roll import lease
from kcpshard.roll.actions import Advance, FreeLease, SlotMark, Step, WatchLeaseHolder
from kcpshard.roll.observed import LeaseReading

STARTED = "2026-12-01T12:00:00.000000Z"
OLD_EXITED = "2026-12-01T12:00:10.000000Z"
NOW = datetime.datetime(2026, 12, 1, 12, 0, 20, tzinfo=datetime.UTC)
DEADLINE = NOW + datetime.timedelta(seconds=30)
URL = "https://127.0.0.1:6443"


def _rollout(from_holder: str | None, **stamps: str) -> RolloutStatus:
    return RolloutStatus(
        step="HandingOverLease",
        to_slot="b",
        target_revision="r",
        from_holder=from_holder,
        started_at=STARTED,
        timestamps={"started": STARTED, **stamps},
    )


def _lease(holder: str | None, renewed: str = STARTED) -> LeaseReading:
    return LeaseReading(found=True, holder=holder, renew_time=renewed)


def test_another_holder_than_the_recorded_one_is_new() -> None:
    assert lease.new_holder(_lease("new", STARTED), _rollout("old")) == "new"
    assert lease.new_holder(_lease("old", "2026-12-01T12:00:20Z"), _rollout("old")) is None
    assert lease.new_holder(LeaseReading(found=False), _rollout("old")) is None
    assert lease.new_holder(_lease(None, STARTED), _rollout(None)) is None


def test_without_a_recorded_holder_only_a_renewal_after_the_old_exit_counts() -> None:
    # the serving kcp died before the roll: its lease stays until it expires and is not the new one
    dead = _lease("dead", "2026-12-01T12:00:05.000000Z")
    assert lease.new_holder(dead, _rollout(None, oldExited=OLD_EXITED)) is None
    live = _lease("new", "2026-12-01T12:00:11.000000Z")
    assert lease.new_holder(live, _rollout(None, oldExited=OLD_EXITED)) == "new"


def test_first_slot_counts_from_the_roll_start() -> None:
    predecessor = _lease("deleted-shards-kcp", "2026-12-01T11:59:59.000000Z")
    assert lease.new_holder(predecessor, _rollout(None)) is None
    assert lease.new_holder(_lease("mine", "2026-12-01T12:00:03.000000Z"), _rollout(None)) == "mine"


def test_a_new_holder_hands_over_and_marks_the_new_slot() -> None:
    action = lease.hand_over(_lease("new"), _rollout("old"), URL, NOW, DEADLINE)
    message = "controller lease held by new"
    mark = SlotMark("b", "LeaseHandedOver", "True", "NewHolder", message, holder="new")
    assert action == Advance(Step.PROBING, message, marks=(mark,))


def test_the_recorded_holder_is_stale_its_lease_is_freed() -> None:
    action = lease.hand_over(_lease("old"), _rollout("old"), URL, NOW, DEADLINE)
    assert action == FreeLease(URL, stale="old", delete=True, timeout=30.0)


def test_no_lease_at_all_is_waited_for_without_a_delete() -> None:
    action = lease.hand_over(LeaseReading(found=False), _rollout("old"), URL, NOW, DEADLINE)
    assert action == FreeLease(URL, stale="old", delete=False, timeout=30.0)


def test_an_unrecorded_holder_is_watched_before_its_lease_is_deleted() -> None:
    # a live new holder's lease is never deleted: first see whether it renews (within half the time left)
    silent = _lease("someone", "2026-12-01T12:00:05.000000Z")
    action = lease.hand_over(silent, _rollout(None, oldExited=OLD_EXITED), URL, NOW, DEADLINE)
    assert action == WatchLeaseHolder(URL, window=lease.RENEW_WINDOW_SECONDS)
    short = lease.hand_over(
        silent, _rollout(None, oldExited=OLD_EXITED), URL, NOW, NOW + datetime.timedelta(seconds=4)
    )
    assert short == WatchLeaseHolder(URL, window=2.0)


def test_a_holder_that_renews_during_the_watch_is_the_new_one() -> None:
    first = _lease("someone", "2026-12-01T12:00:05.000000Z")
    renewed = _lease("someone", "2026-12-01T12:00:21.000000Z")
    action = lease.after_watch(first, renewed, _rollout(None), URL, NOW, DEADLINE)
    assert isinstance(action, Advance) and action.marks[0].holder == "someone"
    # one that took the lease meanwhile is alive too
    taken = lease.after_watch(first, _lease("other"), _rollout(None), URL, NOW, DEADLINE)
    assert isinstance(taken, Advance) and taken.marks[0].holder == "other"


def test_a_silent_holder_is_stale_its_lease_is_freed() -> None:
    first = _lease("someone", "2026-12-01T12:00:05.000000Z")
    action = lease.after_watch(first, first, _rollout(None), URL, NOW, DEADLINE)
    assert action == FreeLease(URL, stale="someone", delete=True, timeout=30.0)
    gone = lease.after_watch(first, LeaseReading(found=False), _rollout(None), URL, NOW, DEADLINE)
    assert gone == FreeLease(URL, stale="someone", delete=True, timeout=30.0)
