"""`kubectl kcpshard status`: the shard, its roll as a checklist, the new slot and the last roll, from
the objects (plain dicts, as the API returns them). Pure: nothing here talks to a server or a terminal.

The looks follow `kubectl argo rollouts get rollout`: a header of `Key:  value` lines, then the roll
as a checklist with a status glyph, a time and a duration per item.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kcpshard.plugin import objects
from kcpshard.plugin.checklist import UNICODE, Glyphs, Mark, item_lines, slot_items, step_items
from kcpshard.plugin.clock import clock, seconds
from kcpshard.plugin.objects import Obj, version
from kcpshard.roll.phase import Phase
from kcpshard.roll.phase import phase as roll_phase
from kcpshard.roll.route import after_flip

KEY_WIDTH = 17  # "Name:" and its value, as argo rollouts aligns them


PHASE_MARK = {
    Phase.HEALTHY: Mark.DONE,
    Phase.PROGRESSING: Mark.RUNNING,
    Phase.PAUSED: Mark.PAUSED,
    Phase.DEGRADED: Mark.FAILED,
    Phase.TERMINATING: Mark.RUNNING,
}


def phase(shard: Obj) -> tuple[Phase, str]:
    """The shard's phase and why, by the roll's rule (`kcpshard.roll.phase`), which the Argo CD health
    check (deploy/argocd/resource_customizations/kcpshard.dev/KcpShard/health.lua) follows in Lua."""
    metadata = objects.meta(shard)
    status = objects.shard_status(shard)
    return roll_phase(
        status, generation=metadata.get("generation"), deleting=bool(metadata.get("deletionTimestamp"))
    )


def _slot_named(slots: Iterable[Obj], slot: str | None) -> Obj | None:
    for candidate in slots:
        if (candidate.get("spec") or {}).get("slot") == slot and not objects.meta(candidate).get(
            "deletionTimestamp"
        ):
            return candidate
    return None


def _kv(key: str, value: str) -> str:
    label = f"{key}:" if key else ""
    return f"{label:<{KEY_WIDTH}}{value}".rstrip()


def _serving(status: Obj) -> str:
    """What the front sends clients to now, and the recorded active slot when the flip is still under way."""
    active = status.get("activeSlot")
    front = status.get("front") or {}
    backend, port = front.get("observedBackend"), front.get("observedPort")
    if backend is None:
        return f"slot {active} (the front has not reported yet)" if active else "nothing yet"
    text = f"slot {backend} (front {backend}:{port})" if port else f"slot {backend}"
    if active and active != backend:
        text += f"; slot {active} is recorded active, the front follows"
    return text


def active_version(status: Obj) -> str | None:
    # The active record moves to the new slot before the flip, and activeSpec follows it only at the end.
    rollout = status.get("rollout") or {}
    if rollout and status.get("activeRevision") == rollout.get("targetRevision"):
        return version(rollout.get("targetSpec")) or version(status.get("activeSpec"))
    return version(status.get("activeSpec"))


def _report_summary(report: Obj, glyphs: Glyphs) -> str:
    result = str(report.get("result") or "?")
    mark = Mark.DONE if result == "Succeeded" else Mark.FAILED
    parts = [f"{glyphs(mark)} {result}"]
    if report.get("reason"):
        parts[0] += f" ({report['reason']})"
    if report.get("fromSlot") and report.get("fromSlot") != report.get("toSlot"):
        parts.append(f"slot {report['fromSlot']} {glyphs.arrow} {report.get('toSlot')}")
    elif report.get("toSlot"):
        parts.append(f"slot {report['toSlot']}")
    if report.get("fromRevision") and report.get("fromRevision") != report.get("toRevision"):
        parts.append(f"revision {report['fromRevision']} {glyphs.arrow} {report.get('toRevision')}")
    elif report.get("toRevision"):
        parts.append(f"revision {report['toRevision']}")
    total = (report.get("durations") or {}).get("total")
    if total is not None:
        parts.append(f"total {seconds(float(total))}")
    if report.get("recovery"):
        parts.append("recovery")
    return "  ".join(parts)


# The report's durations in the order a roll goes.
DURATION_ORDER = (
    "backup",
    "startToReady",
    "kcpStartToReady",
    "flip",
    "oldExit",
    "outage",
    "leaseHandover",
    "probe",
    "drain",
    "total",
    "operatorShare",
)


def durations_line(durations: Mapping[str, Any]) -> str:
    known = [k for k in DURATION_ORDER if k in durations and k != "total"] + sorted(
        k for k in durations if k not in DURATION_ORDER
    )
    return "  ".join(f"{k} {seconds(float(durations[k]))}" for k in known)


def status_lines(
    shard: Obj,
    slots: Sequence[Obj] = (),
    *,
    now: datetime.datetime | None = None,
    glyphs: Glyphs = UNICODE,
    note: str | None = None,
) -> list[str]:
    """`kubectl kcpshard status NAME`: the shard, its roll as a checklist, the new slot, the last roll.

    `now` adds the running time of the step under way (a live view); without it the lines change only
    when the objects do.
    """
    meta, spec, status = objects.meta(shard), shard.get("spec") or {}, objects.status_of(shard)
    ph, message = phase(shard)
    rollout = status.get("rollout")
    lines = [
        _kv("Name", str(meta.get("name", ""))),
        _kv("Namespace", str(meta.get("namespace", ""))),
        _kv("Status", f"{glyphs(PHASE_MARK[ph])} {ph.value}"),
    ]
    if message:
        lines.append(_kv("Message", message))
    lines.append(_kv("Shape", str((rollout or {}).get("shape") or spec.get("shape") or "BlueGreen")))
    lines.append(_kv("Serving", _serving(status)))
    serving_version = active_version(status)
    revision = str(status.get("activeRevision") or "none")
    lines.append(_kv("Revision", f"{revision} (kcp {serving_version})" if serving_version else revision))
    if rollout:
        target_version = version(rollout.get("targetSpec")) or version(spec)
        target = f"slot {rollout.get('toSlot')}, revision {rollout.get('targetRevision')}"
        if target_version:
            target += f" (kcp {target_version})"
        lines.append(_kv("Rolling to", target))
        started = f"{clock(rollout.get('startedAt'))}"
        if rollout.get("recovery"):
            started += "  (recovery: the serving slot was lost)"
        if rollout.get("restoring"):
            started += "  (restoring the old revision)"
        lines.append(_kv("Started", started))
    if note:
        lines.append(_kv("Note", note))

    if rollout:
        lines += ["", f"Steps ({rollout.get('step')}):"]
        lines += item_lines(step_items(rollout, running=True, now=now), glyphs)
        slot_name = rollout.get("toSlot")
    else:
        slot_name = status.get("activeSlot")
    slot = _slot_named(slots, slot_name) if slot_name else None
    if slot_name:
        port = objects.status_of(slot).get("port")
        head = f"Slot {slot_name} ({'new' if rollout else 'serving'}" + (f", port {port})" if port else ")")
        if slot is None:
            lines += ["", head + (": no KcpSlot yet" if rollout else ": its KcpSlot is gone")]
        else:
            lines += ["", head + ":", *item_lines(slot_items(slot, now=now if rollout else None), glyphs)]
    for other in slots:
        if other is slot or objects.meta(other).get("deletionTimestamp"):
            continue
        other_spec, other_status = other.get("spec") or {}, objects.status_of(other)
        state = (
            "exited"
            if other_status.get("exitedAt")
            else ("running" if other_status.get("pid") else "starting")
        )
        lines.append(f"  slot {other_spec.get('slot')}: revision {other_spec.get('revision')}, {state}")

    last = status.get("lastRoll")
    if last:
        lines += ["", _kv("Last roll", _report_summary(last, glyphs))]
        if (last.get("durations") or {}) and last.get("result") == "Succeeded":
            lines.append(_kv("", durations_line(last["durations"])))
        if last.get("result") != "Succeeded" and last.get("message"):
            lines.append(_kv("", str(last["message"])))
        if not rollout:
            lines += ["", "Steps of the last roll:", *item_lines(step_items(last, running=False), glyphs)]
    return lines


def can_abort(shard: Obj) -> tuple[bool, str]:
    """Whether `abort` may ask the operator to stop the roll, and if not, why not."""
    name = objects.meta(shard).get("name")
    rollout = objects.shard_status(shard).rollout
    if rollout is None:
        return False, f"kcpshard {name} has no roll under way: nothing to abort"
    try:
        past_flip = after_flip(rollout)
    except ValueError:
        past_flip = False  # a step this plugin does not know: the operator judges
    if past_flip:
        return False, (
            f"the roll of kcpshard {name} is past the flip (step {rollout.step}): the front serves slot "
            f"{rollout.to_slot} and the store has moved on, so it cannot go back; roll forward "
            "with a spec change instead"
        )
    return True, ""
