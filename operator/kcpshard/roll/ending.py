"""How a roll ends, as the shard tells it: the report, the conditions, the Event and the re-assert
warning. Decided here, so the status writer only writes what the action carries. Pure."""

from __future__ import annotations

from kcpshard.api.models import RolloutStatus, SlotName
from kcpshard.roll.actions import Event, Fail, Finish, Restore, RollEnd, Step, Triple, Verdict
from kcpshard.roll.observed import Observed
from kcpshard.roll.report import finished_report, reassert_needed, roll_report, stall_message
from kcpshard.roll.route import next_step


def finish(obs: Observed, rollout: RolloutStatus, message: str) -> Finish:
    """The roll reached its end: Ready, or (it restored the old revision) Stalled for the first failure."""
    report = finished_report(rollout, message)
    to_slot = obs.slots.get(SlotName(rollout.to_slot))
    if not rollout.restoring:
        serving: Triple = ("True", "Serving", message)
        verdict = Verdict(serving, ("False", "RollSucceeded", ""), ("False", "Healthy", ""))
        return Finish(message, report, verdict, "RollSucceeded", to_slot=to_slot)
    reason = rollout.failure_reason or "RollFailed"
    shown = stall_message(report, rollout.to_slot, rollout.from_revision, obs.name)
    verdict = Verdict(("False", reason, shown), ("False", "RolledBack", ""), ("True", reason, shown))
    return Finish(message, report, verdict, "RolledBack", warning=True, to_slot=to_slot)


def aborted(obs: Observed, rollout: RolloutStatus, reason: str, why: str) -> RollEnd:
    """Before the flip: the old slot serves on (or again)."""
    serving = (rollout.from_slot, rollout.from_revision)
    return _ended(obs, rollout, "Aborted", reason, why, serving, "RollAborted")


def fail(obs: Observed, reason: str, message: str) -> Fail:
    """After the flip (or a failed restore): the roll ends as failed and the front stays where it is."""
    rollout = obs.status.rollout
    if rollout is None:
        raise ValueError(f"{reason} fails no roll: none is under way")
    serving = (obs.status.active_slot, obs.status.active_revision)
    return Fail(reason, message, end=_ended(obs, rollout, "Failed", reason, message, serving, "RollFailed"))


def restore(rollout: RolloutStatus, reason: str, message: str, holder: str | None) -> Restore:
    """Single shape: the old revision starts again where the old slot stopped."""
    told = f"{message}; starting the old revision {rollout.from_revision} again"
    return Restore(
        reason,
        message,
        holder=holder,
        step=next_step(rollout, Step.STOPPING_OLD),
        event=Event(reason, told, warning=True),
    )


def _ended(
    obs: Observed,
    rollout: RolloutStatus,
    result: str,
    reason: str,
    why: str,
    serving: tuple[str | None, str | None],
    reconciling: str,
) -> RollEnd:
    """Stalled, saying what serves, what failed and what to do; after an aborted upgrade whose kcp ran,
    the command that re-asserts the serving kcp's bootstrap."""
    report = roll_report(rollout, result, why, reason=reason, timestamps=dict(rollout.timestamps))
    message = stall_message(report, *serving, obs.name)
    verdict = Verdict(("False", reason, message), ("False", reconciling, ""), ("True", reason, message))
    reassert = reassert_needed(rollout, result, obs.name)
    return RollEnd(report, verdict, Event(reason, message, warning=True), reassert)
