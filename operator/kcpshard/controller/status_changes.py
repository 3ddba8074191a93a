"""The changes the operator makes to a KcpShard's status, as pure functions of the status read.

Each returns a `StatusFn` for the resourceVersion-guarded read-modify-write of `kcpshard.k8s.status`:
it gets a copy of the status as it is now and returns the new one, or None when there is nothing to
write (the change is already there: a round redone after a restart writes nothing twice).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from kcpshard.api import conditions as cond
from kcpshard.api.models import RolloutStatus, RollReport
from kcpshard.roll.actions import Advance, Flip, Record, Restore, Step, Triple, Verdict
from kcpshard.roll.report import LEAVE_STAMP, REASSERT_CONDITION

if TYPE_CHECKING:  # the type only: these changes write nothing themselves
    from kcpshard.k8s.status import StatusFn


def dump(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def with_conditions(
    status: dict[str, Any], generation: int | None, *, ready: Triple, reconciling: Triple, stalled: Triple
) -> dict[str, Any]:
    conditions = status.get("conditions") or []
    for type_, (state, reason, message) in (
        ("Ready", ready),
        ("Reconciling", reconciling),
        ("Stalled", stalled),
    ):
        conditions = cond.set_condition(
            conditions, type_, state, reason, message, observed_generation=generation
        )
    status["conditions"] = conditions
    return status


def progressing(status: dict[str, Any], generation: int, message: str) -> dict[str, Any]:
    return with_conditions(
        status,
        generation,
        ready=("False", "Progressing", message),
        reconciling=("True", "Progressing", message),
        stalled=("False", "Progressing", ""),
    )


def stalled_conditions(
    status: dict[str, Any], generation: int, reason: str, message: str, *, reconciling: str
) -> dict[str, Any]:
    """Stalled=True and not Ready, for `reason`; Reconciling=False (with `reconciling` as its reason)."""
    return with_conditions(
        status,
        generation,
        ready=("False", reason, message),
        reconciling=("False", reconciling, ""),
        stalled=("True", reason, message),
    )


def first_sight(generation: int) -> StatusFn:
    def change(status: dict[str, Any]) -> dict[str, Any] | None:
        if status.get("conditions"):
            return None
        status["conditions"] = cond.set_condition(
            [], "Ready", "Unknown", "Observed", "seen by the operator", observed_generation=generation
        )
        return status

    return change


def stall(generation: int, reason: str, message: str) -> StatusFn:
    """Stalled=True; None when it already says exactly that (so the Event is not repeated)."""

    def change(status: dict[str, Any]) -> dict[str, Any] | None:
        stalled = cond.find(status.get("conditions"), "Stalled")
        if stalled and stalled.get("status") == "True" and stalled.get("message") == message:
            return None
        if not status.get("rollout"):
            status["observedGeneration"] = generation
        return stalled_conditions(status, generation, reason, message, reconciling=reason)

    return change


def hold(generation: int, reason: str, message: str) -> StatusFn:
    """Reconciling=True for `reason`: the next roll waits on something outside the shard (not Stalled:
    it goes on by itself). Ready=False: the shard does not run its spec yet. None when already said."""

    def change(status: dict[str, Any]) -> dict[str, Any] | None:
        reconciling = cond.find(status.get("conditions"), "Reconciling")
        if reconciling and reconciling.get("reason") == reason and reconciling.get("message") == message:
            return None
        return with_conditions(
            status,
            generation,
            ready=("False", reason, message),
            reconciling=("True", reason, message),
            stalled=("False", reason, ""),
        )

    return change


def steady(generation: int, message: str) -> StatusFn:
    def change(status: dict[str, Any]) -> dict[str, Any] | None:
        status["observedGeneration"] = generation
        return with_conditions(
            status,
            generation,
            ready=("True", "Serving", message),
            reconciling=("False", "Idle", ""),
            stalled=("False", "Healthy", ""),
        )

    return change


def admin_secret(name: str) -> StatusFn:
    def change(status: dict[str, Any]) -> dict[str, Any] | None:
        status["adminKubeconfigSecret"] = name
        return status

    return change


def start_roll(rollout: RolloutStatus, generation: int, message: str) -> StatusFn:
    def change(status: dict[str, Any]) -> dict[str, Any] | None:
        if status.get("rollout"):
            return None  # someone (a previous run of ours) started it already
        status["rollout"] = dump(rollout)
        return progressing(status, generation, message)

    return change


def advance(rollout: RolloutStatus, action: Advance, generation: int, at: str) -> StatusFn:
    """The next step, stamped when the roll leaves the current one (the report reads the stamps)."""
    stamp = LEAVE_STAMP.get(Step(rollout.step))

    def change(status: dict[str, Any]) -> dict[str, Any] | None:
        current = status.get("rollout")
        if not current or current.get("step") != rollout.step:
            return None  # already advanced
        current["step"] = action.step.value
        current["stepStartedAt"] = at
        stamps = current.setdefault("timestamps", {})
        if stamp:
            stamps[stamp] = at
        stamps.update(action.stamps)
        if action.step is Step.STARTING:
            stamps.setdefault("slotStarting", at)
        if action.backup is not None:
            current["backup"] = dump(action.backup)
        if action.active_spec is not None:
            status["activeSpec"] = dict(action.active_spec)
        return progressing(status, generation, f"{action.message}; next: {action.step.value}")

    return change


def flip(action: Flip, generation: int) -> StatusFn:
    """The new active record and the front's desired backend in one write: the record never lags behind
    what the front is asked to serve. A roll that waited for promotion is progressing again."""

    def change(status: dict[str, Any]) -> dict[str, Any] | None:
        status["activeSlot"] = action.slot.value
        status["activeRevision"] = action.revision
        front = status.setdefault("front", {})
        front["desiredBackend"] = action.slot.value
        front["desiredPort"] = action.port
        front.pop("drain", None)
        message = f"asked the front to serve slot {action.slot.value} on port {action.port}"
        return progressing(status, generation, message)

    return change


def front_restarts_reported(total: int) -> StatusFn:
    """The operator's own key beside the agent's count; None once recorded (no second Event)."""

    def change(status: dict[str, Any]) -> dict[str, Any] | None:
        front = status.setdefault("front", {})
        if front.get("restartsReported") == total:
            return None
        front["restartsReported"] = total
        return status

    return change


def request_drain(slot: str, *, withdraw: bool = False) -> StatusFn:
    def change(status: dict[str, Any]) -> dict[str, Any] | None:
        front = status.setdefault("front", {})
        front["drain"] = slot
        if withdraw and front.get("desiredBackend") == slot:
            front.pop("desiredBackend", None)
            front.pop("desiredPort", None)
        return status

    return change


def finish(rollout: RolloutStatus, report: RollReport, generation: int, verdict: Verdict) -> StatusFn:
    def change(status: dict[str, Any]) -> dict[str, Any] | None:
        if not status.get("rollout"):
            return None
        status.pop("rollout", None)
        status["lastRoll"] = dump(report)
        if rollout.restoring:
            status["failedRoll"] = dump(report)
        elif not (rollout.recovery or rollout.reassert_token):
            status.pop(
                "failedRoll", None
            )  # a roll that succeeded; a recovery or re-assert proves nothing new
        if not rollout.restoring and cond.find(status.get("conditions"), REASSERT_CONDITION):
            # Any kcp that started and served since has bootstrapped the store with its own version.
            status["conditions"] = cond.set_condition(
                status["conditions"], REASSERT_CONDITION, "False", "Reasserted", report.message
            )
        status["observedGeneration"] = rollout.target_generation or generation
        if status.get("front"):
            status["front"].pop("drain", None)
        return _with_verdict(status, generation, verdict)

    return change


def end_roll(
    rollout: RolloutStatus,
    report: RollReport,
    generation: int,
    verdict: Verdict,
    put_back: Record | None = None,
    *,
    reassert: str | None = None,
) -> StatusFn:
    """A roll that did not succeed: its report, and Stalled with what serves and what to do; after an
    aborted upgrade whose kcp started, BootstrapReassertNeeded=True with the command that re-asserts."""

    def change(status: dict[str, Any]) -> dict[str, Any] | None:
        if not status.get("rollout"):
            return None
        if put_back is not None:
            _put_back(status, put_back)
        if reassert is not None:
            status["conditions"] = cond.set_condition(
                status.get("conditions"), REASSERT_CONDITION, "True", "UpgradeAborted", reassert
            )
        status.pop("rollout", None)
        status["lastRoll"] = status["failedRoll"] = dump(report)
        status["observedGeneration"] = rollout.target_generation or generation
        return _with_verdict(status, generation, verdict)

    return change


def _with_verdict(status: dict[str, Any], generation: int, verdict: Verdict) -> dict[str, Any]:
    return with_conditions(
        status, generation, ready=verdict.ready, reconciling=verdict.reconciling, stalled=verdict.stalled
    )


def _put_back(status: dict[str, Any], record: Record) -> None:
    """The flip was asked for but not confirmed: the previous record and backend, or none."""
    front = status.setdefault("front", {})
    fields: tuple[tuple[dict[str, Any], str, str | int | None], ...] = (
        (status, "activeSlot", record.slot),
        (status, "activeRevision", record.revision),
        (front, "desiredBackend", record.slot),
        (front, "desiredPort", record.port),
    )
    for where, key, value in fields:
        if value is None:
            where.pop(key, None)
        else:
            where[key] = value


def restore(action: Restore, generation: int, at: str) -> StatusFn:
    def change(status: dict[str, Any]) -> dict[str, Any] | None:
        current = status.get("rollout")
        if not current or current.get("restoring"):
            return None
        current.update(
            restoring=True,
            failureReason=action.reason,
            failureMessage=action.message,
            step=action.step.value,
            stepStartedAt=at,
        )
        if action.holder:
            current["fromHolder"] = action.holder
        current.setdefault("timestamps", {})["restoreStarted"] = at
        return progressing(status, generation, action.event.message)

    return change


def slot_condition(type_: str, state: cond.Status, reason: str, message: str, holder: str | None) -> StatusFn:
    def change(status: dict[str, Any]) -> dict[str, Any] | None:
        status["conditions"] = cond.set_condition(status.get("conditions"), type_, state, reason, message)
        if holder:
            status["holderIdentity"] = holder
        return status

    return change
