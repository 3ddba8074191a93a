"""What a failure means for the roll: one rule, whoever saw the failure (the plan itself or a handler).

Before the flip any failure aborts (Single shape: restores the old revision); after it the roll ends as
Failed and never flips back on a live store. Pure.
"""

from __future__ import annotations

from kcpshard.api.models import RolloutStatus, Shape, SlotName
from kcpshard.kcp.flags import front_url
from kcpshard.roll import ending
from kcpshard.roll.actions import Abort, Action, ReadKcpLease, Record, Stall, Step
from kcpshard.roll.observed import Observed
from kcpshard.roll.rollout import roll_spec
from kcpshard.roll.route import after_flip


def failure_action(obs: Observed, reason: str, message: str) -> Action:
    """A failure seen by a handler: what it means for the roll (or the shard, when no roll runs)."""
    rollout = obs.status.rollout
    if rollout is None:
        return Stall(reason, message)
    if after_flip(rollout):
        return ending.fail(obs, reason, message)
    if Step(rollout.step) is Step.BACKING_UP:
        return abort(obs, rollout, reason, message)  # nothing was touched yet, in either shape
    return pre_flip_failure(obs, rollout, reason, message)


def pre_flip_failure(obs: Observed, rollout: RolloutStatus, reason: str, message: str) -> Action:
    if rollout.restoring:
        why = f"the old revision {rollout.from_revision} did not come back either: {message}"
        return ending.fail(obs, reason, why)
    if rollout.shape is Shape.SINGLE and rollout.from_slot:
        if obs.kcp_lease is None:
            return ReadKcpLease(front_url(roll_spec(obs)))
        # The holder now is the failed process (if it led), never the restored one: the handover waits
        # for another.
        return ending.restore(rollout, reason, message, obs.kcp_lease.holder)
    return abort(obs, rollout, reason, message)


def abort(obs: Observed, rollout: RolloutStatus, reason: str, message: str) -> Abort:
    """Stall with the old slot serving: put the previous record back if the flip was asked for, and
    remove the new slot once the roll has ended."""
    put_back = None
    moved = rollout.from_slot != rollout.to_slot
    if obs.status.active_slot == rollout.to_slot and moved:
        old = obs.slots.get(SlotName(rollout.from_slot)) if rollout.from_slot else None
        if rollout.from_slot and old is not None and old.port:
            put_back = Record(rollout.from_slot, rollout.from_revision, old.port)
        else:
            put_back = Record()  # nothing served before: no record, no backend
    to = SlotName(rollout.to_slot)
    remove = to if to in obs.slots and moved else None
    end = ending.aborted(obs, rollout, reason, message)
    return Abort(reason, message, put_back=put_back, remove=remove, end=end)
