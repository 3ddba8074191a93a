"""A shard with no roll under way: what it needs next, and how a roll starts. Pure.

A lost serving slot is started again first; then a re-assert asked for; then what stops any roll (an
invalid spec, the last roll's failure, a front that cannot serve); a shard that serves its spec is
steady; else a roll starts, unless it must wait for its root shard or must not run side by side.
"""

from __future__ import annotations

from kcpshard.api import conditions as cond
from kcpshard.api.models import RolloutStatus, Shape, SlotName
from kcpshard.kcp import flags as kcp_flags
from kcpshard.kcp import versions
from kcpshard.kcp.errors import VersionError
from kcpshard.roll import health
from kcpshard.roll.actions import Action, Event, Hold, ReadKcpLease, Stall, StartRoll, Steady, Step, Wait
from kcpshard.roll.observed import Observed
from kcpshard.roll.report import stall_message
from kcpshard.roll.route import first_step
from kcpshard.roll.validity import invalid


def start(obs: Observed) -> Action:
    """No roll under way: recover a lost serving slot, re-assert, stall, serve on, or start a roll."""
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
        to_slot=to_slot,
        revision=obs.revision,
        target_spec=obs.spec.model_dump(mode="json", by_alias=True, exclude_none=True),
        shape=shape,
    )
    return _start_roll(obs, rollout)


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
        to_slot=active.other(),
        revision=status.active_revision,
        target_spec=status.active_spec,
        shape=Shape.BLUE_GREEN,
        reassert_token=token,
    )
    return _start_roll(obs, rollout)


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


def _root_first(obs: Observed) -> Action | None:
    """A non-root shard never runs a newer kcp than its root serves (docs/design.md#root-shard-first), so
    its roll waits until the root has rolled."""
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


def _rollout(
    obs: Observed,
    *,
    to_slot: SlotName,
    revision: str,
    target_spec: dict[str, object] | None,
    shape: Shape,
    recovery: bool = False,
    reassert_token: str | None = None,
) -> RolloutStatus:
    status = obs.status
    now = cond.precise(obs.now)
    rollout = RolloutStatus(
        step=Step.STARTING.value,
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
        reassert_token=reassert_token,
        # What the steering annotations say now is not for this roll: only a later value is.
        promote_token=obs.promote_token,
        abort_token=obs.abort_token,
        recovery=recovery,
        started_at=now,
        step_started_at=now,
    )
    step = first_step(rollout)
    stamps = {"started": now, **({"slotStarting": now} if step is Step.STARTING else {})}
    return rollout.model_copy(update={"step": step.value, "timestamps": stamps})


def _start_roll(obs: Observed, rollout: RolloutStatus, *, recovery: bool = False) -> Action:
    """Start a roll. With an old slot, the lease holder before anything changes is recorded: for sure
    not the new slot's kcp, so the handover waits for another holder than this one."""
    if rollout.from_slot is None:
        return _started(rollout, recovery)
    if obs.kcp_lease is None:
        return ReadKcpLease(kcp_flags.front_url(obs.spec))  # the front follows the live spec
    if obs.kcp_lease.holder:
        rollout = rollout.model_copy(update={"from_holder": obs.kcp_lease.holder})
    return _started(rollout, recovery)


def _started(rollout: RolloutStatus, recovery: bool) -> StartRoll:
    """A recovery is told as a Warning: the serving slot was lost."""
    message = start_message(rollout, recovery=recovery)
    return StartRoll(rollout, Event("SlotLost" if recovery else "RollStarted", message, warning=recovery))


def start_message(rollout: RolloutStatus, *, recovery: bool = False) -> str:
    """What a roll that starts does, as a person reads it."""
    if recovery:
        what = (
            f"slot {rollout.from_slot} (revision {rollout.from_revision}) stopped while serving; "
            f"starting its revision again on slot {rollout.to_slot}"
        )
    elif rollout.reassert_token:
        what = (
            f"rolling the serving revision {rollout.from_revision} once more, from slot "
            f"{rollout.from_slot} to slot {rollout.to_slot}, so its kcp re-asserts its bootstrap objects "
            "(kubectl kcpshard reassert)"
        )
    elif rollout.from_slot and rollout.shape is Shape.SINGLE:
        what = (
            f"rolling slot {rollout.from_slot} ({rollout.from_revision}) in place, Single shape: "
            "the old process stops first (planned outage)"
        )
    elif rollout.from_slot:
        what = f"rolling from slot {rollout.from_slot} ({rollout.from_revision}) to slot {rollout.to_slot}"
    else:
        what = f"starting the first slot {rollout.to_slot}"
    return f"{what} (revision {rollout.target_revision})"
