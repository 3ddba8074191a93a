"""Pure planning of a roll: from what is observed, the one next action.

The controller observes (shard, slots, Jobs, front), asks `next_action`, carries the action out, and
observes again. When a handler saw something the roll depends on (a new lease holder, a probe that
failed), the controller hands it back in `Observed.outcome` and asks again: every decision is made
here, none by a handler. Nothing here talks to anything: every rule of a safe roll is a branch of this
package and is unit-tested as such.

The step of a roll lives in `status.rollout.step` and is written *before* the action it names, so an
operator restarted at any point re-derives the same next action (every action is idempotent).
"""

from __future__ import annotations

from kcpshard.api import conditions as cond
from kcpshard.api.models import KcpShardSpec, RolloutStatus, Shape, SlotName, shard_name_problems
from kcpshard.kcp import flags as kcp_flags
from kcpshard.kcp import versions
from kcpshard.kcp.errors import VersionError
from kcpshard.roll import health, lease, promotion, steps
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
    KillSlot,
    Probe,
    ReadKcpLease,
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
from kcpshard.roll.conflicts import front_conflicts, store_conflicts
from kcpshard.roll.failures import after_flip, failure_action
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
from kcpshard.roll.outcomes import (
    Failed,
    HolderSeen,
    LeaseWatched,
    NoNewHolder,
    Outcome,
    ProbeNotReady,
    ProbeReady,
    Refused,
)
from kcpshard.roll.report import LEAVE_STAMP, REPORT_SPANS, RETRY_ANNOTATION, durations, stall_message
from kcpshard.roll.rollout import deadline, expected_revision, job_of, roll_spec

# A request the API server refused (400, 403, 422) is asked again this rarely, while the shard is Stalled.
API_REJECTED = "ApiRejected"
REFUSED_RETRY_SECONDS = 60.0

# The roll's one entry for the loop and the tests: its functions, and the types and helpers it decides with.
__all__ = [
    "LEAVE_STAMP",
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
    "KillSlot",
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
    "Steady",
    "Step",
    "StopSlot",
    "durations",
    "expected_revision",
    "failure_action",
    "invalid",
    "next_action",
    "pause",
]


def next_action(obs: Observed | ShardOnly) -> Action:
    if isinstance(obs, ShardOnly):
        return _shard_only(obs)
    if obs.outcome is not None:
        return _follow_up(obs, obs.outcome)
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
        return _start(obs)
    if obs.target_spec_error is not None:
        return failure_action(
            obs, "InvalidSpec", f"the spec recorded for this roll does not parse: {obs.target_spec_error}"
        )
    to = obs.slots.get(SlotName(rollout.to_slot))
    old = obs.slots.get(SlotName(rollout.from_slot)) if rollout.from_slot else None
    if after_flip(rollout) and (to is None or to.gone):
        code = f" with code {to.exit_code}" if to is not None and to.exit_code is not None else ""
        return Fail(
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
    return steps.retiring(rollout, old)


def pause(action: Action, obs: Observed | ShardOnly) -> float | None:
    """How long the loop waits after `action` (unless woken); None: observe again at once."""
    if isinstance(action, Wait | Hold) and action.until is not None:
        if not isinstance(obs, Observed):
            return RESYNC_SECONDS
        remaining = (action.until - obs.now).total_seconds()
        return max(min(remaining, RESYNC_SECONDS), 0.05)
    if isinstance(action, Stall) and action.reason == API_REJECTED:
        return REFUSED_RETRY_SECONDS  # the same request would meet the same answer: ask again rarely
    if isinstance(action, Wait | Steady | Stall | Hold | KillSlot):
        return RESYNC_SECONDS
    return None


def invalid(obs: Observed) -> list[str]:
    """What only the operator can judge wrong in the spec: flags, another shard's front port or store."""
    me = (obs.created, obs.namespace, obs.name)
    return [
        *shard_name_problems(obs.name),
        *kcp_flags.validate(obs.spec),
        *front_conflicts(obs.spec, me, obs.neighbours),
        *store_conflicts(obs.spec, me, obs.neighbours),
    ]


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


def _follow_up(obs: Observed, outcome: Outcome) -> Action:
    """What a handler saw decides the next action of the same round."""
    if isinstance(outcome, Failed):
        return failure_action(obs, outcome.reason, outcome.message)
    if isinstance(outcome, Refused):
        return Stall(
            reason=API_REJECTED,
            message=f"the API server refused a request of the operator ({outcome.status} {outcome.reason}): "
            f"{outcome.message}; the operator tries again every {REFUSED_RETRY_SECONDS:.0f}s and on any "
            "change of the shard",
        )
    rollout = obs.status.rollout
    if rollout is None:
        raise ValueError(f"{outcome!r} with no roll under way")
    spec = roll_spec(obs)
    if isinstance(outcome, LeaseWatched):
        first = obs.kcp_lease or LeaseReading()
        until = deadline(rollout, spec.roll.lease_timeout_seconds)
        return lease.after_watch(first, outcome.last, rollout, kcp_flags.front_url(spec), obs.now, until)
    if isinstance(outcome, HolderSeen):
        return lease.handed_over(outcome.holder, rollout.to_slot)
    if isinstance(outcome, NoNewHolder):
        return failure_action(
            obs,
            "LeaseTimeout",
            f"no new holder of kcp's controller lease within {outcome.waited:.0f}s ({outcome.detail}); kcp's "
            f"controllers are not running: see kubectl logs job/{job_of(obs, rollout.to_slot)}",
        )
    if isinstance(outcome, ProbeReady):
        ready = f"workspace {outcome.workspace} became Ready in {outcome.ready_seconds:.2f}s"
        return steps.probed(rollout, f"{ready} and was deleted")
    if isinstance(outcome, ProbeNotReady):
        return failure_action(
            obs,
            "ProbeFailed",
            f"the probe workspace did not become Ready within {outcome.waited:.0f}s ({outcome.detail}); the "
            "shard serves, but its controllers do not work: see kcp's logs",
        )
    raise TypeError(f"no rule follows {outcome!r}")


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
    return steps.after_backup(shape, has_old)


def _rollout(
    obs: Observed,
    *,
    step: Step,
    to_slot: SlotName,
    revision: str,
    target_spec: dict[str, object] | None,
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
        # What the steering annotations say now is not for this roll: only a later value is.
        promote_token=obs.promote_token,
        abort_token=obs.abort_token,
        recovery=recovery,
        started_at=now,
        step_started_at=now,
        timestamps={"started": now, **({"slotStarting": now} if step is Step.STARTING else {})},
    )


def _start_roll(obs: Observed, rollout: RolloutStatus, *, recovery: bool = False) -> Action:
    """Start a roll. With an old slot, the lease holder before anything changes is recorded: for sure
    not the new slot's kcp, so the handover waits for another holder than this one."""
    if rollout.from_slot is None:
        return StartRoll(rollout, recovery=recovery)
    if obs.kcp_lease is None:
        return ReadKcpLease(kcp_flags.front_url(obs.spec))  # the front follows the live spec
    if obs.kcp_lease.holder:
        rollout = rollout.model_copy(update={"from_holder": obs.kcp_lease.holder})
    return StartRoll(rollout, recovery=recovery)


def _root_first(obs: Observed) -> Action | None:
    """A non-root shard never runs a newer kcp than its root serves (DESIGN.md section 4: a v0.32 shard
    beside a v0.31 root never becomes ready), so its roll waits until the root has rolled."""
    root = obs.root_shard
    if obs.spec.shard.root or root is None:
        return None
    if not root.found:
        return Stall(
            "RootShardMissing",
            f"spec.shard.rootShardRef names KcpShard {obs.namespace}/{root.name}, which does not exist: "
            "create the root shard first, or correct the name",
        )
    target = obs.spec.kcp.version
    try:
        behind = root.serving_version is None or versions.parse(root.serving_version) < versions.parse(target)
    except VersionError:
        return None  # an unknown version is InvalidSpec's to report
    if not behind:
        return None
    serves = f"it serves kcp {root.serving_version}" if root.serving_version else "it serves nothing yet"
    return Hold(
        "WaitingForRootShard",
        f"waiting for root shard {obs.namespace}/{root.name} to serve kcp {target} or newer ({serves}); "
        "the roll starts by itself once it does",
    )


def _unsafe_side_by_side(obs: Observed) -> str | None:
    """Why the serving kcp and the spec's must not run at once on one store, unless the user accepts it."""
    serving = ((obs.status.active_spec or {}).get("kcp") or {}).get("version")
    if not isinstance(serving, str) or obs.spec.roll.allow_unsafe_side_by_side:
        return None
    try:
        safe, why = versions.side_by_side_safe(serving, obs.spec.kcp.version)
    except VersionError:
        return None  # an unknown version is InvalidSpec's to report
    if safe:
        return None
    return (
        f"kcp {serving} serves and the spec asks for kcp {obs.spec.kcp.version}, which must not run side by "
        f"side on one store ({why}); nothing was started. Set spec.shape: Single for this roll (a planned "
        "outage: the old kcp stops before the new one starts), or spec.roll.allowUnsafeSideBySide: true "
        "to roll blue/green and accept the risk"
    )


def _reassert(obs: Observed, active: SlotName | None) -> Action | None:
    """`kubectl kcpshard reassert`: roll the serving revision once more (blue/green, to the other slot),
    so its kcp re-asserts its bootstrap over what an aborted upgrade's kcp wrote. Once per annotation
    value: the report records it, whatever the roll's result."""
    status = obs.status
    token = obs.reassert_token
    if not token or active is None or not status.active_revision or not status.active_spec:
        return None
    if token in {r.reassert_token for r in (status.last_roll, status.failed_roll) if r is not None}:
        return None
    rollout = _rollout(
        obs,
        step=Step.STARTING,
        to_slot=active.other(),
        revision=status.active_revision,
        target_spec=status.active_spec,
        shape=Shape.BLUE_GREEN,
    )
    return _start_roll(obs, rollout.model_copy(update={"reassert_token": token}))


def _start(obs: Observed) -> Action:
    status = obs.status
    active = SlotName(status.active_slot) if status.active_slot else None
    if active is not None and status.active_revision:
        view = obs.slots.get(active)
        # Lost, not only gone: the replacement starts at once, while a deleted slot's kcp still runs out
        # its shutdown delay (and serves), so the outage shrinks to what is left of that delay, or none.
        if view is None or view.lost:
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
            recovery = _rollout(
                obs,
                step=Step.STARTING,
                to_slot=active.other(),
                revision=status.active_revision,
                target_spec=status.active_spec,
                shape=Shape.BLUE_GREEN,
                recovery=True,
            )
            return _start_roll(obs, recovery, recovery=True)
    reassert = _reassert(obs, active)
    if reassert is not None:
        return reassert
    problems = invalid(obs)
    if problems:
        return Stall(reason="InvalidSpec", message="; ".join(problems))
    blocked = _blocked_by_last_roll(obs)
    if blocked is not None:
        return blocked
    front = status.front
    if front is not None and front.error:
        # The front agent keeps retrying; the shard is not served until it succeeds.
        return Stall(
            reason="FrontFailed", message=f"the front on node {obs.spec.node} cannot serve: {front.error}"
        )
    down = health.front_down(obs, active)
    if down is not None:
        return down
    if active is not None and status.active_revision == obs.revision:
        down = health.serving_problem(obs, active)
        if down is not None:
            return down
        return Steady(
            f"slot {active.value} serves revision {status.active_revision} (kcp {obs.spec.kcp.version})"
        )
    if active is None and (front is None or front.observed_at is None):
        return Wait(f"waiting for the front on node {obs.spec.node} to start")
    waiting = _root_first(obs)
    if waiting is not None:
        return waiting
    shape = obs.spec.shape if active is not None else Shape.BLUE_GREEN
    unsafe = _unsafe_side_by_side(obs) if shape is Shape.BLUE_GREEN and active is not None else None
    if unsafe is not None:
        return Stall(reason="UnsafeSideBySide", message=unsafe)
    to_slot = (
        active if shape is Shape.SINGLE and active is not None else (active.other() if active else SlotName.A)
    )
    rollout = _rollout(
        obs,
        step=_first_step(obs.spec, shape, active is not None),
        to_slot=to_slot,
        revision=obs.revision,
        target_spec=obs.spec.model_dump(mode="json", by_alias=True, exclude_none=True),
        shape=shape,
    )
    return _start_roll(obs, rollout)
