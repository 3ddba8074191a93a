"""The steps of a roll in order, and where the flip falls among them: the one home of the step order.

The plan moves a roll along it (`next_step`), the failure rule asks whether a step is past the flip
(`after_flip`), and `kubectl kcpshard` draws its checklist from it (`route`), all from the roll's own
record (`status.rollout`, or a finished roll's report). Pure.
"""

from __future__ import annotations

from kcpshard.api.models import RolloutStatus, RollReport, Shape
from kcpshard.roll.actions import Step

# Every step a roll of each shape may take, in order. Blue/green stops the old slot after the flip (it
# serves until then); Single stops it before the new one starts (a planned outage: never two on one store).
_ORDER = {
    Shape.BLUE_GREEN: (
        Step.BACKING_UP,
        Step.STARTING,
        Step.WAITING_READY,
        Step.FLIPPING,
        Step.STOPPING_OLD,
        Step.HANDING_OVER_LEASE,
        Step.PROBING,
        Step.DRAINING,
        Step.RETIRING,
    ),
    Shape.SINGLE: (
        Step.BACKING_UP,
        Step.STOPPING_OLD,
        Step.STARTING,
        Step.WAITING_READY,
        Step.FLIPPING,
        Step.HANDING_OVER_LEASE,
        Step.PROBING,
        Step.DRAINING,
        Step.RETIRING,
    ),
}


def past_flip(step: Step, shape: Shape) -> bool:
    """From this step on the front serves the new slot: the store has moved on, nothing goes back."""
    order = _ORDER[shape]
    return order.index(step) > order.index(Step.FLIPPING)


def after_flip(rollout: RolloutStatus) -> bool:
    """The roll under way is past its flip (`Step(rollout.step)` raises ValueError for an unknown step)."""
    return past_flip(Step(rollout.step), rollout.shape)


def has_old(roll: RolloutStatus | RollReport) -> bool:
    """The roll replaces a serving slot: Single in place, blue/green on the other slot."""
    return roll.from_slot is not None and (roll.shape is Shape.SINGLE or roll.from_slot != roll.to_slot)


def takes_backup(rollout: RolloutStatus) -> bool:
    """A roll saves the store first when its spec asks (roll.backup), unless it starts the serving
    revision again (a recovery, a re-assert): that brings nothing new to the store."""
    if rollout.recovery or rollout.reassert_token:
        return False
    return bool(((rollout.target_spec or {}).get("roll") or {}).get("backup"))


def steps(shape: Shape, *, old: bool, backup: bool, restoring: bool = False) -> tuple[Step, ...]:
    """The steps of one roll: the backup only when it takes one; the old slot stopped and drained only
    when there is one (not stopped again by a roll that restores it)."""
    skipped = set()
    if not backup:
        skipped.add(Step.BACKING_UP)
    if not old or (shape is Shape.BLUE_GREEN and restoring):
        skipped.add(Step.STOPPING_OLD)
    if not old:
        skipped.add(Step.DRAINING)
    return tuple(step for step in _ORDER[shape] if step not in skipped)


def first_step(rollout: RolloutStatus) -> Step:
    """Where a roll starts: its backup, or its first step without one."""
    return steps(rollout.shape, old=has_old(rollout), backup=takes_backup(rollout))[0]


def next_step(rollout: RolloutStatus, step: Step) -> Step:
    """The step of this roll that follows `step` (found even from a step the roll would skip)."""
    taken = steps(rollout.shape, old=has_old(rollout), backup=True, restoring=rollout.restoring)
    order = _ORDER[rollout.shape]
    return next(later for later in order[order.index(step) + 1 :] if later in taken)


def route(roll: RolloutStatus | RollReport) -> tuple[Step, ...]:
    """The steps a roll goes (or went) through, in order, as its record shows them."""
    backup = roll.backup is not None or "backedUp" in roll.timestamps
    if isinstance(roll, RolloutStatus):
        backup = backup or roll.step == Step.BACKING_UP or takes_backup(roll)
        return steps(roll.shape, old=has_old(roll), backup=backup, restoring=roll.restoring)
    return steps(roll.shape, old=has_old(roll), backup=backup)
