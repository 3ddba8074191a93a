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
from kcpshard.api.models import KcpShardSpec, KcpShardStatus, RolloutStatus, SlotName


class Step(enum.StrEnum):
    STARTING = "Starting"
    WAITING_READY = "WaitingReady"
    FLIPPING = "Flipping"
    STOPPING_OLD = "StoppingOld"
    HANDING_OVER_LEASE = "HandingOverLease"
    PROBING = "Probing"
    DRAINING = "Draining"
    RETIRING = "Retiring"


@dataclass(frozen=True)
class JobView:
    name: str
    active: int = 0
    succeeded: int = 0
    failed: int = 0
    deleting: bool = False

    @property
    def finished(self) -> bool:
        return self.failed > 0 or self.succeeded > 0


@dataclass(frozen=True)
class SlotView:
    name: SlotName
    revision: str
    start: int = 0
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
class Observed:
    spec: KcpShardSpec
    generation: int
    status: KcpShardStatus
    revision: str
    now: datetime.datetime
    slots: Mapping[SlotName, SlotView] = field(default_factory=dict)
    invalid: tuple[str, ...] = ()


# ----- actions -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    """Base of every planned action."""


@dataclass(frozen=True)
class Steady(Action):
    """Nothing to do: the active slot runs the desired revision."""


@dataclass(frozen=True)
class Stall(Action):
    reason: str
    message: str


@dataclass(frozen=True)
class StartRoll(Action):
    rollout: RolloutStatus


@dataclass(frozen=True)
class Advance(Action):
    step: Step
    message: str


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
class Abort(Action):
    """Before the flip: stop the new slot, keep the old one serving, stall."""

    reason: str
    message: str


@dataclass(frozen=True)
class Wait(Action):
    reason: str
    until: datetime.datetime | None = None


# ----- planning ----------------------------------------------------------------------------------


def _deadline(rollout: RolloutStatus, seconds: int) -> datetime.datetime:
    started = rollout.step_started_at or rollout.started_at
    return cond.parse_time(started) + datetime.timedelta(seconds=seconds)


def _blocked_by_last_roll(obs: Observed) -> Stall | None:
    """A roll that failed stays failed until the spec changes (a new revision)."""
    last = obs.status.last_roll
    if last is not None and last.result != "Succeeded" and last.to_revision == obs.revision:
        return Stall(
            reason="RollFailed",
            message=f"the roll to revision {obs.revision} failed: {last.message} "
            "(change the spec to try again)",
        )
    return None


def _start(obs: Observed) -> Action:
    status = obs.status
    active = SlotName(status.active_slot) if status.active_slot else None
    if active is not None and status.active_revision == obs.revision:
        return Steady()
    if obs.invalid:
        return Stall(reason="InvalidSpec", message="; ".join(obs.invalid))
    blocked = _blocked_by_last_roll(obs)
    if blocked is not None:
        return blocked
    to_slot = active.other() if active is not None else SlotName.A
    now = cond.now_precise()
    return StartRoll(
        RolloutStatus(
            step=Step.STARTING.value,
            from_slot=active.value if active else None,
            to_slot=to_slot.value,
            target_revision=obs.revision,
            from_revision=status.active_revision,
            target_generation=obs.generation,
            shape=obs.spec.shape,
            started_at=now,
            step_started_at=now,
            timestamps={"started": now},
        )
    )


def _starting(obs: Observed, rollout: RolloutStatus, to: SlotView | None) -> Action:
    if to is not None and (to.revision != rollout.target_revision or to.exited_at or to.deleting):
        # Never adopt a slot we did not start for this roll: a leftover of another
        # revision, or one that already ran and stopped, goes first.
        return DeleteSlot(to.name, why="left over from an earlier roll")
    if to is None:
        return CreateSlot(SlotName(rollout.to_slot), rollout.target_revision, start=0)
    return Advance(Step.WAITING_READY, f"slot {to.name.value} created")


def _waiting_ready(obs: Observed, rollout: RolloutStatus, to: SlotView | None) -> Action:
    if to is None:
        return Abort("SlotLost", f"slot {rollout.to_slot} disappeared before it was ready")
    seed_failure = to.failed("Seeded")
    if seed_failure is not None:
        return Abort("SeedFailed", f"slot {to.name.value}: {seed_failure.get('message', '')}")
    if to.exited_at is not None or (to.job is not None and to.job.failed):
        code = f" with code {to.exit_code}" if to.exit_code is not None else ""
        return Abort(
            "SlotExited", f"slot {to.name.value} exited{code} before it was ready; see its Job's logs"
        )
    deadline = _deadline(rollout, obs.spec.roll.ready_timeout_seconds)
    if to.true("Ready") and to.port:
        return Advance(Step.FLIPPING, f"slot {to.name.value} is ready on port {to.port}")
    if obs.now >= deadline:
        return Abort(
            "ReadyTimeout",
            f"slot {to.name.value} was not ready within {obs.spec.roll.ready_timeout_seconds}s "
            f"(Seeded={to.true('Seeded')}, Listening={to.true('Listening')}); see its Job's logs",
        )
    return Wait("waiting for the new slot to be ready", until=deadline)


def _flipping(obs: Observed, rollout: RolloutStatus, to: SlotView | None) -> Action:
    front = obs.status.front
    if to is None or not to.port:
        return Stall("SlotLost", f"slot {rollout.to_slot} disappeared during the flip")
    if front is not None and front.observed_backend == to.name.value and front.observed_port == to.port:
        nxt = Step.STOPPING_OLD if rollout.from_slot else Step.PROBING
        return Advance(nxt, f"the front serves slot {to.name.value}")
    if front is None or front.desired_backend != to.name.value or front.desired_port != to.port:
        return Flip(to.name, to.port)
    deadline = _deadline(rollout, obs.spec.roll.flip_timeout_seconds)
    if obs.now >= deadline:
        return Stall(
            "FlipTimeout",
            f"the front did not confirm slot {to.name.value} within "
            f"{obs.spec.roll.flip_timeout_seconds}s; check the front Deployment on node {obs.spec.node}",
        )
    return Wait("waiting for the front to confirm the flip", until=deadline)


def _stopping_old(obs: Observed, rollout: RolloutStatus, old: SlotView | None) -> Action:
    if old is None or old.gone:
        return Advance(Step.HANDING_OVER_LEASE, f"slot {rollout.from_slot} has stopped")
    if old.job is not None and not old.job.deleting:
        return StopSlot(old.name)
    # The runner (kubelet) kills after the grace period; we only wait for the report.
    return Wait(
        "waiting for the old slot to exit", until=_deadline(rollout, obs.spec.roll.stop_timeout_seconds)
    )


def _draining(obs: Observed, rollout: RolloutStatus) -> Action:
    old = rollout.from_slot
    if old is None:
        return Advance(Step.RETIRING, "no old slot to drain")
    front = obs.status.front
    open_conns = front.connections.get(old, 0) if front else 0
    if open_conns == 0:
        return Advance(Step.RETIRING, f"no connections left on slot {old}")
    deadline = _deadline(rollout, obs.spec.roll.drain_timeout_seconds)
    if obs.now >= deadline:
        if front is None or front.drain != old:
            return RequestDrain(SlotName(old))
        return Wait("waiting for the front to close the old slot's connections")
    return Wait(f"{open_conns} connections still open on slot {old}", until=deadline)


def _retiring(rollout: RolloutStatus, old: SlotView | None) -> Action:
    if old is not None and rollout.from_slot is not None:
        return DeleteSlot(old.name, why="retired after the roll")
    return Finish(f"slot {rollout.to_slot} serves revision {rollout.target_revision}")


def next_action(obs: Observed) -> Action:
    rollout = obs.status.rollout
    if rollout is None:
        return _start(obs)
    to = obs.slots.get(SlotName(rollout.to_slot))
    old = obs.slots.get(SlotName(rollout.from_slot)) if rollout.from_slot else None
    step = Step(rollout.step)
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


# Each step's duration in the report: (name, from timestamp, to timestamp).
REPORT_SPANS = (
    ("startToReady", "started", "ready"),
    ("flip", "ready", "flipped"),
    ("oldExit", "flipped", "oldExited"),
    ("leaseHandover", "oldExited", "leaseHandedOver"),
    ("probe", "leaseHandedOver", "probed"),
    ("drain", "probed", "drained"),
    ("total", "started", "finished"),
)


def durations(timestamps: Mapping[str, str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, start, end in REPORT_SPANS:
        if start in timestamps and end in timestamps:
            delta = cond.parse_time(timestamps[end]) - cond.parse_time(timestamps[start])
            out[name] = round(delta.total_seconds(), 3)
    return out
