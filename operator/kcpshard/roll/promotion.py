"""A person's say in a roll: the promotion gate (`spec.roll.autoPromote: false`) and abort. Pure.

Both are asked for with an annotation whose value is new (`kubectl kcpshard promote|abort` writes a
fresh timestamp); the values present when the roll started are recorded in it and never count, so an
annotation left over from an earlier roll neither promotes nor aborts this one.
"""

from __future__ import annotations

from kcpshard.api.annotations import ABORT, PROMOTE
from kcpshard.api.models import RolloutStatus, Shape, SlotName
from kcpshard.roll.actions import Action, Hold
from kcpshard.roll.failures import failure_action, pre_flip_failure
from kcpshard.roll.observed import Observed
from kcpshard.roll.rollout import deadline, roll_spec
from kcpshard.roll.route import after_flip

WAITING_FOR_PROMOTION = "WaitingForPromotion"


def abort_requested(obs: Observed, rollout: RolloutStatus) -> Action | None:
    """A new abort value before the flip ends the roll as any pre-flip failure does: the old slot serves
    on (Single shape: its revision is started again). After the flip the store has moved on, so it is
    not honoured (the plugin refuses to ask); a roll already putting the old revision back goes on."""
    token = obs.abort_token
    if not token or token == rollout.abort_token or rollout.restoring or after_flip(rollout):
        return None
    return failure_action(
        obs, "Aborted", f"the roll was aborted at step {rollout.step} on request ({ABORT}={token})"
    )


def gate(obs: Observed, rollout: RolloutStatus, to: SlotName) -> Action | None:
    """None when the roll may flip to its ready slot now; else wait for a person (or give up at the
    deadline). Only a BlueGreen roll with a serving old slot waits: in a first roll, a recovery or a
    Single roll nothing serves meanwhile, and waiting would only stretch an outage."""
    spec = roll_spec(obs).roll
    if (
        spec.auto_promote
        or rollout.from_slot is None
        or rollout.shape is not Shape.BLUE_GREEN
        or rollout.recovery
        or rollout.restoring
    ):
        return None
    if obs.promote_token and obs.promote_token != rollout.promote_token:
        return None
    # The flip step starts when the new slot is ready: the deadline counts from there.
    until = deadline(rollout, spec.promotion_deadline_seconds) if spec.promotion_deadline_seconds else None
    if until is not None and obs.now >= until:
        return pre_flip_failure(
            obs,
            rollout,
            "PromotionDeadlineExceeded",
            f"slot {to.value} was ready, but the roll was not promoted within "
            f"{spec.promotion_deadline_seconds}s (spec.roll.promotionDeadlineSeconds)",
        )
    by = f"; it aborts by itself at {until:%H:%M:%S} UTC" if until is not None else ""
    return Hold(
        WAITING_FOR_PROMOTION,
        f"slot {to.value} is ready with revision {rollout.target_revision}; slot {rollout.from_slot} serves "
        f"until the roll is promoted: kubectl kcpshard promote {obs.name} (or kubectl kcpshard abort "
        f"{obs.name}; annotation {PROMOTE}){by}",
        until=until,
    )
