"""Pure planning of a roll: from what is observed, the one next action.

The controller observes (shard, slots, Jobs, front), asks `next_action`, carries the action out, and
observes again. When a handler saw something the roll depends on (a new lease holder, a probe that
failed), the controller asks again with that outcome (`next_action(observed, outcome)`): every
decision is made here, none by a handler. Nothing here talks to anything: every rule of a safe roll is
a branch of this package and is unit-tested as such.

The step of a roll lives in `status.rollout.step` and is written *before* the action it names, so an
operator restarted at any point re-derives the same next action (every action is idempotent).
"""

from __future__ import annotations

from kcpshard.api.models import SlotName
from kcpshard.roll import promotion, steps
from kcpshard.roll.actions import (
    RESYNC_SECONDS,
    Abort,
    Action,
    Advance,
    CreateFront,
    CreateSharedSecret,
    CreateSlot,
    DeleteSlot,
    Fail,
    Finish,
    FirstSight,
    Flip,
    FreeLease,
    Hold,
    Probe,
    ReportFrontRestarts,
    RequestDrain,
    Restore,
    Stall,
    StartBackup,
    StartRoll,
    Steady,
    Step,
    StopSlot,
    UpdateFront,
    Wait,
)
from kcpshard.roll.ending import fail
from kcpshard.roll.failures import failure_action
from kcpshard.roll.follow_up import API_REJECTED, REFUSED_RETRY_SECONDS, follow_up
from kcpshard.roll.observed import (
    BackupView,
    FrontWorkload,
    JobView,
    LeaseReading,
    Neighbour,
    Observed,
    RootShardView,
    ShardOnly,
    SlotView,
)
from kcpshard.roll.outcomes import PROBE_STAMPS, Outcome, SlotCreated
from kcpshard.roll.report import LEAVE_STAMP, REPORT_SPANS, RETRY_ANNOTATION, durations
from kcpshard.roll.rollout import expected_revision
from kcpshard.roll.route import after_flip
from kcpshard.roll.start import start
from kcpshard.roll.validity import invalid

# The roll's one entry for the loop and the tests: its functions, and the types and helpers it decides with.
__all__ = [
    "LEAVE_STAMP",
    "PROBE_STAMPS",
    "REPORT_SPANS",
    "RESYNC_SECONDS",
    "RETRY_ANNOTATION",
    "Abort",
    "Action",
    "Advance",
    "BackupView",
    "CreateSlot",
    "DeleteSlot",
    "Fail",
    "Finish",
    "Flip",
    "FreeLease",
    "Hold",
    "JobView",
    "LeaseReading",
    "Neighbour",
    "Observed",
    "Probe",
    "ReportFrontRestarts",
    "RequestDrain",
    "Restore",
    "RootShardView",
    "SlotView",
    "StartBackup",
    "StartRoll",
    "Steady",
    "Step",
    "StopSlot",
    "after_flip",
    "durations",
    "expected_revision",
    "failure_action",
    "invalid",
    "next_action",
    "pause",
]


def next_action(obs: Observed | ShardOnly, outcome: Outcome | None = None) -> Action:
    """The one next action; `outcome`: what the last action's handler saw, this round."""
    if isinstance(obs, ShardOnly):
        return _shard_only(obs)
    if outcome is not None:
        return follow_up(obs, outcome)
    if not obs.status.conditions:
        return FirstSight()  # Ready=Unknown on first sight, before anything else
    made = _shard_objects(obs)
    if made is not None:
        return made
    restarts = _front_restarts(obs)
    if restarts is not None:
        return restarts
    rollout = obs.status.rollout
    if rollout is None:
        return start(obs)
    if obs.target_spec_error is not None:
        return failure_action(
            obs, "InvalidSpec", f"the spec recorded for this roll does not parse: {obs.target_spec_error}"
        )
    to = obs.slots.get(SlotName(rollout.to_slot))
    old = obs.slots.get(SlotName(rollout.from_slot)) if rollout.from_slot else None
    if after_flip(rollout) and (to is None or to.gone):
        code = f" with code {to.exit_code}" if to is not None and to.exit_code is not None else ""
        return fail(
            obs,
            "SlotLost",
            f"slot {rollout.to_slot} stopped{code} after the front moved to it; "
            "the operator starts its revision again on the other slot",
        )
    aborted = promotion.abort_requested(obs, rollout)
    if aborted is not None:
        return aborted
    step = Step(rollout.step)
    if step is Step.BACKING_UP:
        return steps.backing_up(obs, rollout)
    if step is Step.STARTING:
        return steps.starting(obs, rollout, to)
    if step is Step.WAITING_READY:
        return steps.waiting_ready(obs, rollout, to)
    if step is Step.FLIPPING:
        return steps.flipping(obs, rollout, to)
    if step is Step.STOPPING_OLD:
        return steps.stopping_old(obs, rollout, old)
    if step is Step.HANDING_OVER_LEASE:
        return steps.handing_over(obs, rollout)
    if step is Step.PROBING:
        return steps.probing(obs, rollout)
    if step is Step.DRAINING:
        return steps.draining(obs, rollout)
    return steps.retiring(obs, rollout, old)


# Actions that only write the shard's status: the plan goes on from the status the write returned, in the
# same round, since nothing else it read has changed (controller/reconciler.py).
GOES_ON_AFTER_WRITE = (StartRoll, Advance, Flip, RequestDrain)


def status_only(action: Action) -> bool:
    """Whether `action` only writes the shard's status (the loop may hold that write: status_writer.py)."""
    return isinstance(action, GOES_ON_AFTER_WRITE)


def goes_on_after_write(action: Action, after: Outcome | None) -> bool:
    """Whether the round plans again from `action`'s own status write instead of observing again: not
    after a slot was created (`after`), which the round's observation does not hold."""
    return status_only(action) and not isinstance(after, SlotCreated)


def pause(action: Action, obs: Observed | ShardOnly) -> float | None:
    """How long the loop waits after `action` (unless woken); None: observe again at once."""
    if isinstance(action, Wait | Hold) and action.until is not None:
        if not isinstance(obs, Observed):
            return RESYNC_SECONDS
        remaining = (action.until - obs.now).total_seconds()
        return max(min(remaining, RESYNC_SECONDS), 0.05)
    if isinstance(action, Stall) and action.reason == API_REJECTED:
        return REFUSED_RETRY_SECONDS  # the same request would meet the same answer: ask again rarely
    if isinstance(action, Wait | Steady | Stall | Hold):
        return RESYNC_SECONDS
    return None


def _shard_only(obs: ShardOnly) -> Action:
    if obs.deleting:
        return Wait("the shard is being deleted: its finalizer stops its slots and front")
    if not obs.status.conditions:
        return FirstSight()
    return Stall("InvalidSpec", obs.spec_error or "the spec does not parse")


def _shard_objects(obs: Observed) -> Action | None:
    """The shared-material Secret and the front Deployment exist for every shard."""
    if not obs.shared_secret:
        return CreateSharedSecret()
    if obs.front is FrontWorkload.CURRENT or invalid(obs):
        return None  # an invalid spec gets no new front: it might contend for another shard's port
    if obs.front is FrontWorkload.STALE and obs.status.rollout is not None:
        return None  # a roll flips through the front it started with; the new one comes after it
    return CreateFront() if obs.front is FrontWorkload.ABSENT else UpdateFront()


def _front_restarts(obs: Observed) -> ReportFrontRestarts | None:
    """Each HAProxy restart the front agent counted becomes a Warning Event, once: the front serves on
    through one (the other process of its pair takes new connections), but a person should know."""
    front = obs.status.front
    new = front.restarts - (front.restarts_reported or 0) if front is not None else 0
    if front is None or new <= 0:
        return None
    return ReportFrontRestarts(total=front.restarts, new=new, last=front.last_restart or "")
