"""Which lease holder counts as the new slot's kcp at the handover (a pure rule of the reconciler)."""

from __future__ import annotations

from kcpshard.api.models import RolloutStatus
from kcpshard.controller.reconciler import _new_holder

STARTED = "2026-12-01T12:00:00.000000Z"
OLD_EXITED = "2026-12-01T12:00:10.000000Z"


def _rollout(from_holder: str | None, **stamps: str) -> RolloutStatus:
    return RolloutStatus(
        step="HandingOverLease",
        to_slot="b",
        target_revision="r",
        from_holder=from_holder,
        started_at=STARTED,
        timestamps={"started": STARTED, **stamps},
    )


def _lease(holder: str | None, renewed: str) -> dict:
    return {"spec": {"holderIdentity": holder, "renewTime": renewed}}


def test_another_holder_than_the_recorded_one_is_new() -> None:
    assert _new_holder(_lease("new", STARTED), _rollout("old")) == "new"
    assert _new_holder(_lease("old", "2026-12-01T12:00:20Z"), _rollout("old")) is None
    assert _new_holder(None, _rollout("old")) is None
    assert _new_holder(_lease(None, STARTED), _rollout(None)) is None


def test_without_a_recorded_holder_only_a_renewal_after_the_old_exit_counts() -> None:
    # the serving kcp died before the roll: its lease stays until it expires and is not the new one
    dead = _lease("dead", "2026-12-01T12:00:05.000000Z")
    assert _new_holder(dead, _rollout(None, oldExited=OLD_EXITED)) is None
    live = _lease("new", "2026-12-01T12:00:11.000000Z")
    assert _new_holder(live, _rollout(None, oldExited=OLD_EXITED)) == "new"


def test_first_slot_counts_from_the_roll_start() -> None:
    predecessor = _lease("deleted-shards-kcp", "2026-12-01T11:59:59.000000Z")
    assert _new_holder(predecessor, _rollout(None)) is None
    assert _new_holder(_lease("mine", "2026-12-01T12:00:03.000000Z"), _rollout(None)) == "mine"
