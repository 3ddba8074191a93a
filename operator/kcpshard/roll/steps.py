"""The rules of each step of a roll under way: from what is observed, the one next action. Pure.

Every timeout, URL and flag comes from the roll's own spec (`roll_spec`): the spec recorded when the
roll started.
"""

from __future__ import annotations

import datetime
import hashlib
import signal

from kcpshard.api.models import KcpShardSpec, RolloutStatus, Shape, SlotName
from kcpshard.api.spec import kill_after_seconds
from kcpshard.k8s import names
from kcpshard.kcp.flags import BACKUP_NEEDS_ETCD, front_url
from kcpshard.roll import ending, lease, promotion
from kcpshard.roll.actions import (
    PROBE_PREFIX,
    SHARD_PROBE_PREFIX,
    Action,
    Advance,
    CreateSlot,
    DeleteSlot,
    Flip,
    Probe,
    ProbeVia,
    ReadKcpLease,
    RequestDrain,
    SlotMark,
    StartBackup,
    Step,
    StopSlot,
    Wait,
)
from kcpshard.roll.failures import abort, failure_action, pre_flip_failure
from kcpshard.roll.observed import Observed, SlotView
from kcpshard.roll.rollout import (
    backup_job_name,
    deadline,
    expected_revision,
    identity_cache_stale,
    roll_spec,
    slot_spec,
)
from kcpshard.roll.route import next_step

SIGKILLED = 128 + signal.SIGKILL  # the exit code the host agent reports for a kcp it killed (agent/child.py)

# While kcp's lease cannot be read, read it again after this long (until the handover's deadline).
LEASE_RETRY_SECONDS = 2.0


def remove(slot: SlotView, why: str) -> Action:
    """Delete a slot; one already on its way out is waited for (its deletion event wakes the loop)."""
    if slot.deleting:
        return Wait(f"slot {slot.name.value} is being deleted")
    return DeleteSlot(slot.name, why=why)


def backing_up(obs: Observed, rollout: RolloutStatus) -> Action:
    spec = roll_spec(obs)
    backup = obs.backup
    if spec.store.etcd is None:
        # No Job can snapshot kine: refused before anything runs (the spec's check says so at the start).
        return abort(obs, rollout, "InvalidSpec", BACKUP_NEEDS_ETCD)
    if backup is None:
        job = backup_job_name(obs.name, rollout)
        return StartBackup(job, spec, rollout.target_revision, etcd=spec.store.etcd)
    if backup.error is not None:
        why = f"the store backup (Job {backup.job}) failed: {backup.error}"
        return abort(obs, rollout, "BackupFailed", why)
    if backup.report is not None:
        return Advance(
            next_step(rollout, Step.BACKING_UP),
            f"store saved to {backup.report.path} in {backup.report.seconds:.2f}s",
            backup.report,
        )
    until = deadline(rollout, spec.roll.backup_timeout_seconds)
    if obs.now >= until:
        return abort(
            obs,
            rollout,
            "BackupTimeout",
            f"the store backup (Job {backup.job}) did not finish within "
            f"{spec.roll.backup_timeout_seconds}s; see its logs: kubectl logs job/{backup.job}",
        )
    return Wait("waiting for the store backup", until=until)


def starting(obs: Observed, rollout: RolloutStatus, to: SlotView | None) -> Action:
    spec = roll_spec(obs)
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
            return remove(to, f"never adopted: {stale}")
    to_slot = SlotName(rollout.to_slot)
    if to is None and obs.busy.get(to_slot):
        # A process of an earlier slot object still stops there; the new one must not share its root.
        until = deadline(rollout, spec.roll.ready_timeout_seconds)
        if obs.now >= until:
            return pre_flip_failure(
                obs,
                rollout,
                "SlotBusy",
                f"an earlier process of slot {rollout.to_slot} did not stop within "
                f"{spec.roll.ready_timeout_seconds}s on node {spec.node}; see "
                f"kubectl get pods -l kcpshard.dev/shard={obs.name},kcpshard.dev/slot={rollout.to_slot}",
            )
        return Wait(f"waiting for the earlier process of slot {rollout.to_slot} to stop", until=until)
    if to is None or (to.job is None and to.live_pods == 0):
        # No slot yet, or its Job was never created (an operator stopped between the two writes). The start
        # counter is one no Job of this slot and revision used: a Job of an earlier slot object may still
        # be terminating, and the new slot must never meet it under the same name.
        start = obs.job_starts.get((to_slot, want), -1) + 1
        return CreateSlot(to_slot, want, start, slot_spec(obs, rollout), roll_id=rollout.id)
    return Advance(next_step(rollout, Step.STARTING), f"slot {to.name.value} created")


def waiting_ready(obs: Observed, rollout: RolloutStatus, to: SlotView | None) -> Action:
    spec = roll_spec(obs)
    if to is None:
        return pre_flip_failure(
            obs, rollout, "SlotLost", f"slot {rollout.to_slot} disappeared before it was ready"
        )
    seed_failure = to.failed("Seeded")
    if seed_failure is not None:
        reason = str(seed_failure.get("reason") or "SeedFailed")
        if reason not in ("StoreUnreachable", "MissingSecret"):
            reason = "SeedFailed"
        return pre_flip_failure(
            obs, rollout, reason, f"slot {to.name.value}: {seed_failure.get('message', '')}"
        )
    job_name = to.job.name if to.job else "?"
    if to.exited_at is not None or (to.job is not None and to.job.finished) or to.gone:
        code = f" with code {to.exit_code}" if to.exit_code is not None else ""
        why = f" ({to.job.message})" if to.job is not None and to.job.message else ""
        return pre_flip_failure(
            obs,
            rollout,
            "SlotExited",
            f"slot {to.name.value} exited{code} before it was ready{why}; see kubectl logs job/{job_name}",
        )
    if to.true("Ready") and to.port:
        ready = f"slot {to.name.value} is ready on port {to.port}"
        return Advance(next_step(rollout, Step.WAITING_READY), ready)
    until = deadline(rollout, spec.roll.ready_timeout_seconds)
    if obs.now >= until:
        if to.started_at is None and not to.conditions:
            what = (
                f"its host agent never reported: is the pod of Job {job_name} running on node "
                f"{spec.node}? (kubectl describe pods -l job-name={job_name})"
            )
        else:
            what = (
                f"Seeded={to.state('Seeded')}, Listening={to.state('Listening')}, Ready={to.state('Ready')}; "
                f"see kubectl logs job/{job_name}"
            )
        return pre_flip_failure(
            obs,
            rollout,
            "ReadyTimeout",
            f"slot {to.name.value} was not ready within {spec.roll.ready_timeout_seconds}s ({what})",
        )
    return Wait("waiting for the new slot to be ready", until=until)


def flipping(obs: Observed, rollout: RolloutStatus, to: SlotView | None) -> Action:
    spec = roll_spec(obs)
    front = obs.status.front
    if to is None or not to.port or to.gone:
        return pre_flip_failure(obs, rollout, "SlotLost", f"slot {rollout.to_slot} stopped during the flip")
    if front is not None and front.observed_backend == to.name.value and front.observed_port == to.port:
        return flipped(rollout, to.name, to.port)
    if front is None or front.desired_backend != to.name.value or front.desired_port != to.port:
        gate = promotion.gate(obs, rollout, to.name)
        if gate is not None:
            return gate
        return Flip(to.name, to.port, expected_revision(rollout))
    until = deadline(rollout, spec.roll.flip_timeout_seconds)
    if obs.now >= until:
        return pre_flip_failure(
            obs,
            rollout,
            "FlipTimeout",
            f"the front did not confirm slot {to.name.value} within {spec.roll.flip_timeout_seconds}s; "
            f"check the front agent on node {spec.node} "
            f"(kubectl logs deployment/{names.front_name(obs.name)})",
        )
    return Wait("waiting for the front to confirm the flip", until=until)


def flipped(rollout: RolloutStatus, to: SlotName, port: int) -> Advance:
    """The front serves the new slot: mark both slots, record the spec that now serves, publish its
    kcp-admin kubeconfig, and go on with the shape's next step."""
    message = f"the front serves slot {to.value} on port {port}"
    # Blue/green stops the old slot now; Single stopped it before this one started. After either, and
    # after a first slot too (a shard created again on a kept store finds its predecessor's lease), the
    # lease is handed over.
    nxt = next_step(rollout, Step.FLIPPING)
    # The slots' conditions go first: an operator stopped between the writes redoes them all.
    marks = [SlotMark(to.value, "Flipped", "True", "FrontServes", message)]
    if rollout.from_slot and rollout.from_slot != to.value:
        moved = f"the front serves slot {to.value}"
        marks.append(SlotMark(rollout.from_slot, "Flipped", "False", "FrontMovedOn", moved))
    serving = rollout.target_spec if not rollout.restoring else None
    return Advance(nxt, message, marks=tuple(marks), active_spec=serving, publish_admin=True)


def stopping_old(obs: Observed, rollout: RolloutStatus, old: SlotView | None) -> Action:
    single = rollout.shape is Shape.SINGLE
    nxt = next_step(rollout, Step.STOPPING_OLD)
    waiting = "waiting for the old slot to exit"
    if old is None and not single and rollout.from_slot is not None:
        # Its KcpSlot was deleted by someone, but its pods' kcp serves until the flip, then stops: kcp's
        # controller lease is free only once they have exited. Judged as a slot whose Job is gone.
        name = SlotName(rollout.from_slot)
        old = SlotView(name, rollout.from_revision or "", pods=obs.busy.get(name, ()))
        waiting = f"waiting for the pods of slot {name.value} to exit (its KcpSlot was deleted)"
    timeout = kill_after_seconds(roll_spec(obs))
    if old is None or old.gone or (single and old.revision != rollout.from_revision):
        stopped = f"slot {rollout.from_slot} has stopped"
        if old is not None and old.exit_code == SIGKILLED:
            killed = f"slot {old.name.value}'s kcp did not exit within {timeout}s of SIGTERM"
            killed += ": its host agent killed it"
            return Advance(nxt, stopped, warning=("SlotKilled", killed))
        return Advance(nxt, stopped)
    if old.job is not None and not old.job.deleting:
        return StopSlot(old.name, old.job.name)
    if watches_held(obs, old):
        return RequestDrain(old.name, withdraw=single)
    until = deadline(rollout, timeout)
    if obs.now >= until:
        # The host agent kills kcp at this timeout (it reads it at SIGTERM), else the kubelet does at the
        # pod's grace period. Never a force deletion: it removes the pod object at once while the kubelet
        # still gives the containers their first grace period (kubernetes/kubernetes#83916, #113717),
        # and the old kcp could still lead when its lease is handed over.
        return Wait(
            f"slot {old.name.value} did not exit within {timeout}s of SIGTERM: its host agent kills kcp, "
            "or the kubelet at the end of the pod's grace period; kcp's controller lease stays with it "
            "until its pods are gone (a pod left Terminating: its node is down)"
        )
    return Wait(waiting, until=until)


def watches_held(obs: Observed, old: SlotView) -> bool:
    """The old kcp closed its listener (its shutdown delay is over) but the front still has connections
    to it: watches, which kcp holds until its HTTP server's shutdown timeout (60 s) while their clients
    see no events. Closed at the front, they resume on the new slot (blue/green: the front serves it), or
    (Single) the new process starts as soon as the old one exits, not after those 60 s or the kill."""
    front, unlistened = obs.status.front, old.failed("Listening")
    return (
        unlistened is not None
        and unlistened.get("reason") == "ShuttingDown"
        and front is not None
        and front.connections.get(old.name.value, 0) > 0
        and front.drain != old.name.value
    )


def handing_over(obs: Observed, rollout: RolloutStatus) -> Action:
    spec = roll_spec(obs)
    url = front_url(spec)
    reading = obs.kcp_lease
    if reading is None:
        return ReadKcpLease(url)
    until = deadline(rollout, spec.roll.lease_timeout_seconds)
    if reading.error is not None:
        message = f"could not read kcp's controller lease: {reading.error}"
        if obs.now >= until:
            return failure_action(obs, "LeaseTimeout", message)
        return Wait(message, until=min(until, obs.now + datetime.timedelta(seconds=LEASE_RETRY_SECONDS)))
    return lease.hand_over(reading, rollout, url, obs.now, until)


def probe_via(obs: Observed, spec: KcpShardSpec) -> ProbeVia | None:
    """A non-root shard hosts no `root` workspace (real kcp answers 404 there), so its probe workspace is
    made in `root` on its root shard and placed on this shard; None for a root shard, or a non-root one
    whose root is not known (its probe goes through its own front, as a root's does)."""
    root = obs.root_shard
    if spec.shard.root or root is None or not root.found or not root.front_url:
        return None
    return ProbeVia(root.name, root.front_url)


def probe_leftovers(spec: KcpShardSpec, via: ProbeVia | None) -> str:
    """The name prefix of a shard's probe workspaces. A non-root shard's are made in its root's `root`
    workspace beside the root's own, so theirs carry a digest of the shard's name."""
    if via is None:
        return PROBE_PREFIX
    digest = hashlib.sha256(spec.shard.name.encode()).hexdigest()[:6]
    return f"{SHARD_PROBE_PREFIX}{digest}-"


def probing(obs: Observed, rollout: RolloutStatus) -> Action:
    spec, runs = roll_spec(obs), slot_spec(obs, rollout)
    until = deadline(rollout, spec.roll.probe_timeout_seconds)
    via = probe_via(obs, spec)
    leftovers = probe_leftovers(spec, via)
    return Probe(
        front_url(spec),
        prefix=f"{leftovers}{rollout.target_revision[:8]}",
        leftovers=leftovers,
        timeout=max((until - obs.now).total_seconds(), 0.1),
        stale_identity_cache=runs.kcp.version if identity_cache_stale(runs) else None,
        via=via,
        location=spec.shard.name,
    )


def probed(rollout: RolloutStatus, message: str, stamps: tuple[tuple[str, str], ...] = ()) -> Advance:
    mark = SlotMark(rollout.to_slot, "Probed", "True", "WorkspaceReady", message)
    return Advance(next_step(rollout, Step.PROBING), message, marks=(mark,), stamps=stamps)


def draining(obs: Observed, rollout: RolloutStatus) -> Action:
    old = rollout.from_slot
    if old is None or old == rollout.to_slot:
        return Advance(next_step(rollout, Step.DRAINING), "no old slot to drain")
    front = obs.status.front
    open_conns = front.connections.get(old, 0) if front else 0
    if open_conns == 0:
        return Advance(next_step(rollout, Step.DRAINING), f"no connections left on slot {old}")
    until = deadline(rollout, roll_spec(obs).roll.drain_timeout_seconds)
    if obs.now >= until:
        if front is None or front.drain != old:
            return RequestDrain(SlotName(old))
        # The front was asked to close them; the old kcp has exited anyway, so do not wait on it forever.
        return Advance(
            next_step(rollout, Step.DRAINING),
            f"asked the front to close the {open_conns} connection(s) left on slot {old}",
        )
    return Wait(f"{open_conns} connections still open on slot {old}", until=until)


def retiring(obs: Observed, rollout: RolloutStatus, old: SlotView | None) -> Action:
    if old is not None and rollout.from_slot is not None and rollout.from_slot != rollout.to_slot:
        return remove(old, "retired after the roll")
    if rollout.restoring:
        message = f"slot {rollout.to_slot} serves the old revision {rollout.from_revision} again"
    elif rollout.reassert_token:
        message = (
            f"slot {rollout.to_slot} serves revision {rollout.target_revision}; "
            "its kcp re-asserted its bootstrap"
        )
    else:
        message = f"slot {rollout.to_slot} serves revision {rollout.target_revision}"
    return ending.finish(obs, rollout, message)
