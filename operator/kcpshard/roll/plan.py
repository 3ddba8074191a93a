"""Pure planning of a roll: from what is observed, the one next action.

The controller observes (shard, slots, Jobs, front), asks `next_action`, carries the
action out, and observes again. Nothing here talks to anything: every rule of a
safe roll is a branch of this module and is unit-tested as such.

The step of a roll lives in `status.rollout.step` and is written *before* the
action it names, so an operator restarted at any point re-derives the same next
action (every action is idempotent).
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kcpshard.api import conditions as cond
from kcpshard.api.models import (
    BackupReport,
    KcpShardSpec,
    KcpShardStatus,
    RolloutStatus,
    RollReport,
    Shape,
    SlotName,
)


class Step(enum.StrEnum):
    BACKING_UP = "BackingUp"
    STARTING = "Starting"
    WAITING_READY = "WaitingReady"
    FLIPPING = "Flipping"
    STOPPING_OLD = "StoppingOld"
    HANDING_OVER_LEASE = "HandingOverLease"
    PROBING = "Probing"
    DRAINING = "Draining"
    RETIRING = "Retiring"


# Steps after the front was confirmed on the new slot: a failure here never flips back.
POST_FLIP = frozenset({Step.HANDING_OVER_LEASE, Step.PROBING, Step.DRAINING, Step.RETIRING})

RETRY_ANNOTATION = "kcpshard.dev/retry"


@dataclass(frozen=True)
class JobView:
    name: str
    active: int = 0
    succeeded: int = 0
    failed: int = 0
    deleting: bool = False
    message: str = ""  # the Failed condition's reason and message, when there is one

    @property
    def finished(self) -> bool:
        return self.failed > 0 or self.succeeded > 0


@dataclass(frozen=True)
class SlotView:
    name: SlotName
    revision: str
    start: int = 0
    roll_id: str | None = None
    conditions: tuple[Mapping[str, Any], ...] = ()
    port: int | None = None
    exited_at: str | None = None
    exit_code: int | None = None
    started_at: str | None = None
    ready_at: str | None = None
    deleting: bool = False
    job: JobView | None = None
    live_pods: int = 0

    def true(self, type_: str) -> bool:
        return cond.is_true(self.conditions, type_)

    def state(self, type_: str) -> str:
        """`True`, `False` or `Unknown`, as a person reads it in a message."""
        found = cond.find(self.conditions, type_)
        return str(found.get("status", "Unknown")) if found is not None else "Unknown"

    def failed(self, type_: str) -> Mapping[str, Any] | None:
        found = cond.find(self.conditions, type_)
        return found if found is not None and found.get("status") == "False" else None

    @property
    def gone(self) -> bool:
        """Its process has ended: its agent reported the exit, or no pod of it runs any more.

        A deleted Job vanishes at once while its pod still runs kcp's shutdown delay, so
        the Job alone says nothing about the process.
        """
        if self.exited_at is not None:
            return True
        job_done = self.job is None or self.job.finished
        return job_done and self.live_pods == 0


@dataclass(frozen=True)
class BackupView:
    """The backup Job of this roll: None fields while it runs."""

    job: str
    report: BackupReport | None = None
    error: str | None = None


@dataclass(frozen=True)
class Observed:
    spec: KcpShardSpec
    generation: int
    status: KcpShardStatus
    revision: str
    now: datetime.datetime
    slots: Mapping[SlotName, SlotView] = field(default_factory=dict)
    # Live pods per slot name, whatever KcpSlot they belong to (a deleted slot's pod may still stop).
    busy: Mapping[SlotName, int] = field(default_factory=dict)
    invalid: tuple[str, ...] = ()
    retry_token: str | None = None
    backup: BackupView | None = None
    name: str = "<name>"  # the shard's, for commands in messages


# ----- actions -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    """Base of every planned action."""


@dataclass(frozen=True)
class Steady(Action):
    """Nothing to do: the active slot runs the desired revision."""


@dataclass(frozen=True)
class Because(Action):
    """An action that says why: a CamelCase reason and a message a person can act on."""

    reason: str
    message: str


@dataclass(frozen=True)
class Stall(Because):
    """Do nothing more until the spec (or the retry annotation) changes."""


@dataclass(frozen=True)
class StartRoll(Action):
    rollout: RolloutStatus
    recovery: bool = False


@dataclass(frozen=True)
class Advance(Action):
    step: Step
    message: str
    backup: BackupReport | None = None


@dataclass(frozen=True)
class StartBackup(Action):
    """Run the store snapshot Job of this roll."""


@dataclass(frozen=True)
class CreateSlot(Action):
    slot: SlotName
    revision: str
    start: int


@dataclass(frozen=True)
class DeleteSlot(Action):
    """Remove a KcpSlot (and through ownerReferences its Job): a leftover or a retired slot."""

    slot: SlotName
    why: str


@dataclass(frozen=True)
class Flip(Action):
    slot: SlotName
    port: int


@dataclass(frozen=True)
class StopSlot(Action):
    slot: SlotName


@dataclass(frozen=True)
class KillSlot(Action):
    """The slot outlived its stop timeout: delete its pods at once (the kubelet sends SIGKILL)."""

    slot: SlotName


@dataclass(frozen=True)
class HandOverLease(Action):
    deadline: datetime.datetime


@dataclass(frozen=True)
class Probe(Action):
    deadline: datetime.datetime


@dataclass(frozen=True)
class RequestDrain(Action):
    slot: SlotName


@dataclass(frozen=True)
class Finish(Action):
    message: str


@dataclass(frozen=True)
class Abort(Because):
    """Before the flip: stop the new slot, keep (or put back) the old one serving, stall."""


@dataclass(frozen=True)
class Restore(Because):
    """Single shape: the new revision failed after the old slot stopped; start the old revision again."""


@dataclass(frozen=True)
class Fail(Because):
    """After the flip: end the roll as failed and stall; never flip back on a live store."""


@dataclass(frozen=True)
class Wait(Action):
    reason: str
    until: datetime.datetime | None = None


# ----- planning ----------------------------------------------------------------------------------


def _deadline(rollout: RolloutStatus, seconds: int) -> datetime.datetime:
    started = rollout.step_started_at or rollout.started_at
    return cond.parse_time(started) + datetime.timedelta(seconds=seconds)


def expected_revision(rollout: RolloutStatus) -> str:
    """The revision the new slot must run: the target, or the old one while restoring it."""
    if rollout.restoring and rollout.from_revision:
        return rollout.from_revision
    return rollout.target_revision


_OUTCOME = {"Aborted": "was aborted", "Failed": "failed", "RolledBack": "was rolled back"}


def _retry_hint(name: str) -> str:
    return (
        f"change the spec, or retry with: kubectl annotate kcpshard {name} "
        f"{RETRY_ANNOTATION}=$(date +%s) --overwrite"
    )


def stall_message(last: RollReport, active_slot: str | None, active_revision: str | None, name: str) -> str:
    """What a person reads when the last roll did not succeed: what serves, what failed, what to do."""
    serving = (
        f"slot {active_slot} serves revision {active_revision}; " if active_slot else "nothing serves yet; "
    )
    outcome = _OUTCOME.get(last.result, last.result)
    return f"{serving}the roll to revision {last.to_revision} {outcome}: {last.message} ({_retry_hint(name)})"


def _blocked_by_last_roll(obs: Observed) -> Stall | None:
    """A roll that failed stays failed until the spec changes or the retry annotation does."""
    last = obs.status.failed_roll or obs.status.last_roll
    if (
        last is not None
        and last.result != "Succeeded"
        and last.to_revision == obs.revision
        and last.retry_token == obs.retry_token
    ):
        message = stall_message(last, obs.status.active_slot, obs.status.active_revision, obs.name)
        return Stall(reason=last.reason or "RollFailed", message=message)
    return None


def _first_step(spec: KcpShardSpec, shape: Shape, has_old: bool) -> Step:
    if spec.roll.backup:
        return Step.BACKING_UP
    return _after_backup(shape, has_old)


def _after_backup(shape: Shape, has_old: bool) -> Step:
    # Single shape: the old slot stops first (a planned outage), then the new one starts in its place.
    return Step.STOPPING_OLD if shape is Shape.SINGLE and has_old else Step.STARTING


def _rollout(
    obs: Observed,
    *,
    step: Step,
    to_slot: SlotName,
    revision: str,
    target_spec: dict[str, Any] | None,
    shape: Shape,
    recovery: bool = False,
) -> RolloutStatus:
    status = obs.status
    now = cond.precise(obs.now)
    return RolloutStatus(
        step=step.value,
        id=f"{revision[:6]}-{int(obs.now.timestamp() * 1000) % 10**9:09d}",
        from_slot=status.active_slot,
        to_slot=to_slot.value,
        target_revision=revision,
        from_revision=status.active_revision,
        from_version=((status.active_spec or {}).get("kcp") or {}).get("version"),
        target_generation=obs.generation,
        shape=shape,
        target_spec=target_spec,
        retry_token=obs.retry_token,
        recovery=recovery,
        started_at=now,
        step_started_at=now,
        timestamps={"started": now, **({"slotStarting": now} if step is Step.STARTING else {})},
    )


def _start(obs: Observed) -> Action:
    status = obs.status
    active = SlotName(status.active_slot) if status.active_slot else None
    if active is not None and status.active_revision:
        view = obs.slots.get(active)
        if view is None or view.gone:
            last = obs.status.last_roll
            if (
                last is not None
                and last.recovery
                and last.result != "Succeeded"
                and last.to_revision == status.active_revision
                and last.retry_token == obs.retry_token
            ):
                # Starting it again failed too: say so, and do not loop.
                message = stall_message(last, None, None, obs.name)
                return Stall(reason="SlotLost", message=f"slot {active.value} is lost; {message}")
            # The serving slot died (its host agent or kcp was killed, or someone deleted it): start its
            # revision again on the other slot at once, whatever else is pending.
            return StartRoll(
                _rollout(
                    obs,
                    step=Step.STARTING,
                    to_slot=active.other(),
                    revision=status.active_revision,
                    target_spec=status.active_spec,
                    shape=Shape.BLUE_GREEN,
                    recovery=True,
                ),
                recovery=True,
            )
    if obs.invalid:
        return Stall(reason="InvalidSpec", message="; ".join(obs.invalid))
    blocked = _blocked_by_last_roll(obs)
    if blocked is not None:
        return blocked
    front = status.front
    if front is not None and front.error:
        # The front agent keeps retrying; the shard is not served until it succeeds.
        return Stall(
            reason="FrontFailed", message=f"the front on node {obs.spec.node} cannot serve: {front.error}"
        )
    if active is not None and status.active_revision == obs.revision:
        return Steady()
    if active is None and (front is None or front.observed_at is None):
        return Wait(f"waiting for the front on node {obs.spec.node} to start")
    shape = obs.spec.shape if active is not None else Shape.BLUE_GREEN
    to_slot = (
        active if shape is Shape.SINGLE and active is not None else (active.other() if active else SlotName.A)
    )
    return StartRoll(
        _rollout(
            obs,
            step=_first_step(obs.spec, shape, active is not None),
            to_slot=to_slot,
            revision=obs.revision,
            target_spec=obs.spec.model_dump(mode="json", by_alias=True, exclude_none=True),
            shape=shape,
        )
    )


def pre_flip_failure(rollout: RolloutStatus, reason: str, message: str) -> Action:
    if rollout.restoring:
        return Fail(reason, f"the old revision {rollout.from_revision} did not come back either: {message}")
    if rollout.shape is Shape.SINGLE and rollout.from_slot:
        return Restore(reason, message)
    return Abort(reason, message)


def _backing_up(obs: Observed, rollout: RolloutStatus) -> Action:
    backup = obs.backup
    if backup is None:
        return StartBackup()
    if backup.error is not None:
        return Abort("BackupFailed", f"the store backup (Job {backup.job}) failed: {backup.error}")
    if backup.report is not None:
        nxt = _after_backup(rollout.shape, rollout.from_slot is not None)
        return Advance(
            nxt, f"store saved to {backup.report.path} in {backup.report.seconds:.2f}s", backup.report
        )
    deadline = _deadline(rollout, obs.spec.roll.backup_timeout_seconds)
    if obs.now >= deadline:
        return Abort(
            "BackupTimeout",
            f"the store backup (Job {backup.job}) did not finish within "
            f"{obs.spec.roll.backup_timeout_seconds}s; see its logs: kubectl logs job/{backup.job}",
        )
    return Wait("waiting for the store backup", until=deadline)


def _starting(obs: Observed, rollout: RolloutStatus, to: SlotView | None) -> Action:
    want = expected_revision(rollout)
    if to is not None:
        stale = None
        if to.revision != want:
            stale = f"it runs revision {to.revision}, not {want}"
        elif to.roll_id != rollout.id:
            stale = "it was not started by this roll"
        elif to.exited_at or to.deleting or (to.job is not None and to.job.finished):
            stale = "it already ran and stopped"
        if stale is not None:
            # Never adopt a slot this roll did not start: whatever runs there goes first.
            return DeleteSlot(to.name, why=f"never adopted: {stale}")
    if to is None and obs.busy.get(SlotName(rollout.to_slot), 0):
        # A process of an earlier slot object still stops there; the new one must not share its root.
        deadline = _deadline(rollout, obs.spec.roll.ready_timeout_seconds)
        if obs.now >= deadline:
            return pre_flip_failure(
                rollout,
                "SlotBusy",
                f"an earlier process of slot {rollout.to_slot} did not stop within "
                f"{obs.spec.roll.ready_timeout_seconds}s on node {obs.spec.node}; see "
                f"kubectl get pods -l kcpshard.dev/shard={obs.name},kcpshard.dev/slot={rollout.to_slot}",
            )
        return Wait(f"waiting for the earlier process of slot {rollout.to_slot} to stop", until=deadline)
    if to is None or (to.job is None and to.live_pods == 0):
        # No slot yet, or its Job was never created (an operator stopped between the two writes).
        return CreateSlot(SlotName(rollout.to_slot), want, start=0)
    return Advance(Step.WAITING_READY, f"slot {to.name.value} created")


def _waiting_ready(obs: Observed, rollout: RolloutStatus, to: SlotView | None) -> Action:
    if to is None:
        return pre_flip_failure(
            rollout, "SlotLost", f"slot {rollout.to_slot} disappeared before it was ready"
        )
    seed_failure = to.failed("Seeded")
    if seed_failure is not None:
        reason = str(seed_failure.get("reason") or "SeedFailed")
        if reason not in ("StoreUnreachable", "MissingSecret"):
            reason = "SeedFailed"
        return pre_flip_failure(rollout, reason, f"slot {to.name.value}: {seed_failure.get('message', '')}")
    job_name = to.job.name if to.job else "?"
    if to.exited_at is not None or (to.job is not None and to.job.finished) or to.gone:
        code = f" with code {to.exit_code}" if to.exit_code is not None else ""
        why = f" ({to.job.message})" if to.job is not None and to.job.message else ""
        return pre_flip_failure(
            rollout,
            "SlotExited",
            f"slot {to.name.value} exited{code} before it was ready{why}; see kubectl logs job/{job_name}",
        )
    if to.true("Ready") and to.port:
        return Advance(Step.FLIPPING, f"slot {to.name.value} is ready on port {to.port}")
    deadline = _deadline(rollout, obs.spec.roll.ready_timeout_seconds)
    if obs.now >= deadline:
        if to.started_at is None and not to.conditions:
            what = (
                f"its host agent never reported: is the pod of Job {job_name} running on node "
                f"{obs.spec.node}? (kubectl describe pods -l job-name={job_name})"
            )
        else:
            what = (
                f"Seeded={to.state('Seeded')}, Listening={to.state('Listening')}, Ready={to.state('Ready')}; "
                f"see kubectl logs job/{job_name}"
            )
        return pre_flip_failure(
            rollout,
            "ReadyTimeout",
            f"slot {to.name.value} was not ready within {obs.spec.roll.ready_timeout_seconds}s ({what})",
        )
    return Wait("waiting for the new slot to be ready", until=deadline)


def _flipping(obs: Observed, rollout: RolloutStatus, to: SlotView | None) -> Action:
    front = obs.status.front
    if to is None or not to.port or to.gone:
        return pre_flip_failure(rollout, "SlotLost", f"slot {rollout.to_slot} stopped during the flip")
    if front is not None and front.observed_backend == to.name.value and front.observed_port == to.port:
        if rollout.shape is Shape.BLUE_GREEN and rollout.from_slot and not rollout.restoring:
            nxt = Step.STOPPING_OLD
        elif rollout.from_slot:
            nxt = Step.HANDING_OVER_LEASE  # Single shape: the old slot stopped before this one started
        else:
            # The first slot too: a shard created again on a kept store finds its predecessor's lease.
            nxt = Step.HANDING_OVER_LEASE
        return Advance(nxt, f"the front serves slot {to.name.value} on port {to.port}")
    if front is None or front.desired_backend != to.name.value or front.desired_port != to.port:
        return Flip(to.name, to.port)
    deadline = _deadline(rollout, obs.spec.roll.flip_timeout_seconds)
    if obs.now >= deadline:
        return pre_flip_failure(
            rollout,
            "FlipTimeout",
            f"the front did not confirm slot {to.name.value} within {obs.spec.roll.flip_timeout_seconds}s; "
            f"check the front agent on node {obs.spec.node} (kubectl logs deployment/{obs.name}-front)",
        )
    return Wait("waiting for the front to confirm the flip", until=deadline)


def _stopping_old(obs: Observed, rollout: RolloutStatus, old: SlotView | None) -> Action:
    single = rollout.shape is Shape.SINGLE
    nxt = Step.STARTING if single else Step.HANDING_OVER_LEASE
    if old is None or old.gone or (single and old.revision != rollout.from_revision):
        return Advance(nxt, f"slot {rollout.from_slot} has stopped")
    if old.job is not None and not old.job.deleting:
        return StopSlot(old.name)
    deadline = _deadline(rollout, obs.spec.roll.stop_timeout_seconds)
    if obs.now >= deadline:
        # kcp and its host agent outlived SIGTERM and the grace period: the kubelet kills them.
        return KillSlot(old.name)
    return Wait("waiting for the old slot to exit", until=deadline)


def _draining(obs: Observed, rollout: RolloutStatus) -> Action:
    old = rollout.from_slot
    if old is None or old == rollout.to_slot:
        return Advance(Step.RETIRING, "no old slot to drain")
    front = obs.status.front
    open_conns = front.connections.get(old, 0) if front else 0
    if open_conns == 0:
        return Advance(Step.RETIRING, f"no connections left on slot {old}")
    deadline = _deadline(rollout, obs.spec.roll.drain_timeout_seconds)
    if obs.now >= deadline:
        if front is None or front.drain != old:
            return RequestDrain(SlotName(old))
        # The front was asked to close them; the old kcp has exited anyway, so do not wait on it forever.
        return Advance(
            Step.RETIRING, f"asked the front to close the {open_conns} connection(s) left on slot {old}"
        )
    return Wait(f"{open_conns} connections still open on slot {old}", until=deadline)


def _retiring(rollout: RolloutStatus, old: SlotView | None) -> Action:
    if old is not None and rollout.from_slot is not None and rollout.from_slot != rollout.to_slot:
        return DeleteSlot(old.name, why="retired after the roll")
    if rollout.restoring:
        return Finish(f"slot {rollout.to_slot} serves the old revision {rollout.from_revision} again")
    return Finish(f"slot {rollout.to_slot} serves revision {rollout.target_revision}")


def next_action(obs: Observed) -> Action:
    rollout = obs.status.rollout
    if rollout is None:
        return _start(obs)
    to = obs.slots.get(SlotName(rollout.to_slot))
    old = obs.slots.get(SlotName(rollout.from_slot)) if rollout.from_slot else None
    step = Step(rollout.step)
    after_flip = step in POST_FLIP or (step is Step.STOPPING_OLD and rollout.shape is Shape.BLUE_GREEN)
    if after_flip and (to is None or to.gone):
        code = f" with code {to.exit_code}" if to is not None and to.exit_code is not None else ""
        return Fail(
            "SlotLost",
            f"slot {rollout.to_slot} stopped{code} after the front moved to it; "
            "the operator starts its revision again on the other slot",
        )
    if step is Step.BACKING_UP:
        return _backing_up(obs, rollout)
    if step is Step.STARTING:
        return _starting(obs, rollout, to)
    if step is Step.WAITING_READY:
        return _waiting_ready(obs, rollout, to)
    if step is Step.FLIPPING:
        return _flipping(obs, rollout, to)
    if step is Step.STOPPING_OLD:
        return _stopping_old(obs, rollout, old)
    if step is Step.HANDING_OVER_LEASE:
        return HandOverLease(_deadline(rollout, obs.spec.roll.lease_timeout_seconds))
    if step is Step.PROBING:
        return Probe(_deadline(rollout, obs.spec.roll.probe_timeout_seconds))
    if step is Step.DRAINING:
        return _draining(obs, rollout)
    return _retiring(rollout, old)


# The report timestamp written when a roll leaves each step (and "slotStarting" on entering Starting).
LEAVE_STAMP = {
    Step.BACKING_UP: "backedUp",
    Step.STARTING: "slotCreated",
    Step.WAITING_READY: "ready",
    Step.FLIPPING: "flipped",
    Step.STOPPING_OLD: "oldExited",
    Step.HANDING_OVER_LEASE: "leaseHandedOver",
    Step.PROBING: "probed",
    Step.DRAINING: "drained",
}


# Each step's duration in the report: (name, from timestamp, to timestamp).
REPORT_SPANS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("backup", ("started",), "backedUp"),
    ("startToReady", ("slotStarting",), "ready"),
    ("flip", ("ready",), "flipped"),
    ("oldExit", ("flipped",), "oldExited"),
    # From whichever came last: blue/green stops the old slot after the flip, Single before the start.
    ("leaseHandover", ("flipped", "oldExited"), "leaseHandedOver"),
    ("probe", ("leaseHandedOver",), "probed"),
    ("drain", ("probed",), "drained"),
    ("outage", ("oldExited",), "flipped"),
    ("total", ("started",), "finished"),
)


def durations(timestamps: Mapping[str, str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, starts, end in REPORT_SPANS:
        begun = [cond.parse_time(timestamps[s]) for s in starts if s in timestamps]
        if begun and end in timestamps:
            delta = cond.parse_time(timestamps[end]) - max(begun)
            if delta.total_seconds() >= 0:  # "outage" exists only where the old slot exited first (Single)
                out[name] = round(delta.total_seconds(), 3)
    return out
