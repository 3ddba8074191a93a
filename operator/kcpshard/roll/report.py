"""The roll report: the timestamps a roll records, the durations read from them, and what a person reads
when a roll did not succeed. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kcpshard.api import conditions as cond
from kcpshard.api.annotations import RETRY
from kcpshard.api.models import RolloutStatus, RollReport
from kcpshard.roll.actions import Step
from kcpshard.roll.observed import SlotView

RETRY_ANNOTATION = RETRY  # the one name, shared with the plugin (api/annotations.py)

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
    # Single stops the old slot first: its exit counts from the roll's start (after the backup).
    ("oldExit", ("started", "backedUp"), "oldExited"),
    # From whichever came last: blue/green stops the old slot after the flip, Single before the start.
    ("leaseHandover", ("flipped", "oldExited"), "leaseHandedOver"),
    ("probe", ("leaseHandedOver",), "probed"),
    # The probe in its parts: reaching kcp and creating the workspace, kcp's controllers making it
    # Ready, deleting it (kcp's finalizers are not waited for).
    ("probeCreate", ("leaseHandedOver",), "probeCreated"),
    ("probeWorkspaceReady", ("probeCreated",), "probeWorkspaceReady"),
    ("probeDelete", ("probeWorkspaceReady",), "probed"),
    ("drain", ("probed",), "drained"),
    ("outage", ("oldExited",), "flipped"),
    ("total", ("started",), "finished"),
)


def durations(timestamps: Mapping[str, str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, starts, end in REPORT_SPANS:
        if name in out:  # a second way to measure the same span applies only where the first did not
            continue
        begun = [cond.parse_time(timestamps[s]) for s in starts if s in timestamps]
        if begun and end in timestamps:
            delta = cond.parse_time(timestamps[end]) - max(begun)
            if delta.total_seconds() >= 0:  # "outage" exists only where the old slot exited first (Single)
                out[name] = round(delta.total_seconds(), 3)
    return out


def slot_durations(
    slot: SlotView | None, spans: Mapping[str, float], timestamps: Mapping[str, str]
) -> dict[str, float]:
    """What the node and the kcp process took, as the slot's host agent saw it, and the operator's
    share: the rest.

    `slotStart`: the slot created to its kcp started (the node starting the pod's container and the
    agent in it). The operator's share is the total less that and the time spent waiting on kcp: the
    new process from start to ready, the old one's exit (its shutdown delay), the lease pick-up, the
    probe, and the backup Job when there is one.
    """
    out: dict[str, float] = {}
    if slot is not None and slot.started_at and slot.ready_at:
        delta = cond.parse_time(slot.ready_at) - cond.parse_time(slot.started_at)
        out["kcpStartToReady"] = round(delta.total_seconds(), 3)
        if "slotCreated" in timestamps:
            start = cond.parse_time(slot.started_at) - cond.parse_time(timestamps["slotCreated"])
            out["slotStart"] = round(max(start.total_seconds(), 0.0), 3)
    if "total" in spans and "kcpStartToReady" in out:
        waited = out["kcpStartToReady"] + out.get("slotStart", 0.0)
        waited += sum(spans.get(k, 0.0) for k in ("backup", "oldExit", "leaseHandover", "probe"))
        out["operatorShare"] = round(max(spans["total"] - waited, 0.0), 3)
    return out


def roll_report(rollout: RolloutStatus, result: str, message: str, **extra: Any) -> RollReport:
    return RollReport(
        result=result,
        fromSlot=rollout.from_slot,
        toSlot=rollout.to_slot,
        fromRevision=rollout.from_revision,
        toRevision=rollout.target_revision,
        shape=rollout.shape,
        backup=rollout.backup,
        retryToken=rollout.retry_token,
        reassertToken=rollout.reassert_token,
        recovery=rollout.recovery,
        message=message,
        **extra,
    )


def finished_report(rollout: RolloutStatus, message: str) -> RollReport:
    """The report of a roll that reached its end: Succeeded, or RolledBack when it restored the old one.
    Not yet stamped: `measured` adds when it finished and what each step took."""
    timestamps = dict(rollout.timestamps)
    if not rollout.restoring:
        return roll_report(rollout, "Succeeded", message, timestamps=timestamps)
    why = rollout.failure_message or "the new revision failed"
    return roll_report(
        rollout, "RolledBack", f"{why}; {message}", reason=rollout.failure_reason, timestamps=timestamps
    )


def measured(report: RollReport, to_slot: SlotView | None, finished_at: str) -> RollReport:
    """A finished roll's report with its end stamped and each step's duration read from the stamps."""
    timestamps = {**report.timestamps, "finished": finished_at}
    spans = durations(timestamps)
    taken = spans | slot_durations(to_slot, spans, timestamps)
    if report.backup is not None:
        taken["backupJob"] = round(report.backup.seconds, 3)
    return report.model_copy(update={"timestamps": timestamps, "durations": taken})


def ended(report: RollReport, at: str) -> RollReport:
    """An aborted or failed roll's report with its end stamped (`aborted`, `failed`)."""
    return report.model_copy(update={"timestamps": {**report.timestamps, report.result.lower(): at}})


def finished_text(report: RollReport) -> str:
    """The Event of a finished roll: what it did, and how long it took (and the planned outage)."""
    total, outage = report.durations.get("total"), report.durations.get("outage")
    text = f"{report.message} in {total}s" if total is not None else report.message
    return text + (f" (planned outage {outage}s)" if outage is not None else "")


_OUTCOME = {"Aborted": "was aborted", "Failed": "failed", "RolledBack": "was rolled back"}


def retry_hint(name: str) -> str:
    return (
        f"change the spec, or retry with: kubectl annotate kcpshard {name} "
        f"{RETRY_ANNOTATION}=$(date +%s) --overwrite"
    )


REASSERT_CONDITION = "BootstrapReassertNeeded"


def reassert_needed(rollout: RolloutStatus, result: str, name: str) -> str | None:
    """After an aborted version upgrade whose new kcp had started: why the serving kcp should re-assert
    its bootstrap (docs/design.md#re-assert-after-an-aborted-upgrade), and the one command that does it;
    None when nothing to do.

    Only an abort leaves it to the user: the old kcp served throughout and never bootstrapped again. A
    Single roll that rolled back started the old kcp again, which re-asserted its bootstrap by itself.
    """
    target = ((rollout.target_spec or {}).get("kcp") or {}).get("version")
    serving = rollout.from_version
    if result != "Aborted" or not serving or not target or serving == target:
        return None
    if "slotStarting" not in rollout.timestamps:
        return None  # the new kcp never ran: it wrote nothing
    return (
        f"kcp {target} started during the aborted upgrade from {serving} and may have written its "
        f"bootstrap objects to the store while kcp {serving} serves: run `kubectl kcpshard reassert {name}` "
        f"to roll the serving revision once more so kcp {serving} re-asserts its own (or roll on to {target})"
    )


def stall_message(last: RollReport, active_slot: str | None, active_revision: str | None, name: str) -> str:
    """What a person reads when the last roll did not succeed: what serves, what failed, what to do."""
    serving = (
        f"slot {active_slot} serves revision {active_revision}; " if active_slot else "nothing serves yet; "
    )
    outcome = _OUTCOME.get(last.result, last.result)
    return f"{serving}the roll to revision {last.to_revision} {outcome}: {last.message} ({retry_hint(name)})"
