"""What `kubectl kcpshard` prints: pure functions from the objects (plain dicts, as the API returns
them) to lines. Nothing here talks to a server or a terminal.

The looks follow `kubectl argo rollouts get rollout`: a header of `Key:  value` lines, then the roll
as a checklist with a status glyph, a time and a duration per item; tables follow `kubectl get`.
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kcpshard.api import conditions as cond
from kcpshard.k8s.duration import human_duration
from kcpshard.roll.actions import Step
from kcpshard.roll.failures import POST_FLIP
from kcpshard.roll.promotion import WAITING_FOR_PROMOTION
from kcpshard.roll.report import LEAVE_STAMP

Obj = Mapping[str, Any]

KEY_WIDTH = 17  # "Name:" and its value, as argo rollouts aligns them


class Phase(enum.StrEnum):
    """The shard's health as a person (and Argo CD) reads it."""

    HEALTHY = "Healthy"
    PROGRESSING = "Progressing"
    PAUSED = "Paused"
    DEGRADED = "Degraded"
    TERMINATING = "Terminating"


class Mark(enum.Enum):
    DONE = "done"
    RUNNING = "running"
    PAUSED = "paused"
    FAILED = "failed"
    PENDING = "pending"


@dataclass(frozen=True)
class Glyphs:
    marks: Mapping[Mark, str]
    arrow: str

    def __call__(self, mark: Mark) -> str:
        return self.marks[mark]


UNICODE = Glyphs(
    {Mark.DONE: "✔", Mark.RUNNING: "◌", Mark.PAUSED: "॥", Mark.FAILED: "✖", Mark.PENDING: "·"}, "→"
)
ASCII = Glyphs(
    {Mark.DONE: "+", Mark.RUNNING: "*", Mark.PAUSED: "=", Mark.FAILED: "x", Mark.PENDING: "."}, "->"
)

PHASE_MARK = {
    Phase.HEALTHY: Mark.DONE,
    Phase.PROGRESSING: Mark.RUNNING,
    Phase.PAUSED: Mark.PAUSED,
    Phase.DEGRADED: Mark.FAILED,
    Phase.TERMINATING: Mark.RUNNING,
}


# ----- reading the objects -------------------------------------------------------------------------


def _status(obj: Obj | None) -> Obj:
    return (obj or {}).get("status") or {}


def _meta(obj: Obj | None) -> Obj:
    return (obj or {}).get("metadata") or {}


def condition(obj: Obj | None, type_: str) -> Obj:
    return cond.find(_status(obj).get("conditions"), type_) or {}


def _is(obj: Obj | None, type_: str, status: str = "True") -> bool:
    return condition(obj, type_).get("status") == status


def phase(shard: Obj) -> tuple[Phase, str]:
    """The shard's phase and the message that says why: the rules of the Argo CD health check
    (deploy/argocd/resource_customizations/kcpshard.dev/KcpShard/health.lua), in the same order.

    A roll under way (or waiting for promotion) comes first; then a spec the operator has not acted on
    yet (a Stalled of an older generation is no verdict on the current spec); then Stalled; then Ready.
    """
    status = _status(shard)
    if _meta(shard).get("deletionTimestamp"):
        return Phase.TERMINATING, "the shard is being deleted"
    if not status.get("conditions"):
        return Phase.PROGRESSING, "waiting for the operator to see the shard"
    reconciling = condition(shard, "Reconciling")
    ready = condition(shard, "Ready")
    if reconciling.get("status") == "True":
        if reconciling.get("reason") == WAITING_FOR_PROMOTION:
            return Phase.PAUSED, str(reconciling.get("message") or "waiting for promotion")
        return Phase.PROGRESSING, str(reconciling.get("message") or "")
    if status.get("rollout"):
        return Phase.PROGRESSING, str(ready.get("message") or "")
    generation, observed = _meta(shard).get("generation"), status.get("observedGeneration")
    if observed is not None and generation is not None and observed != generation:
        return Phase.PROGRESSING, f"waiting for the operator to act on generation {generation}"
    if _is(shard, "Stalled"):
        return Phase.DEGRADED, str(condition(shard, "Stalled").get("message") or "")
    if ready.get("status") == "True":
        return Phase.HEALTHY, str(ready.get("message") or "")
    return Phase.PROGRESSING, str(ready.get("message") or "not ready yet")


def _version(spec: Obj | None) -> str | None:
    version = ((spec or {}).get("kcp") or {}).get("version")
    return str(version) if version else None


def _time(value: str | None) -> datetime.datetime | None:
    if not value:
        return None
    try:
        return cond.parse_time(value)
    except ValueError:
        return None


def clock(value: str | None) -> str:
    """HH:MM:SS (UTC) of a timestamp, '' when there is none."""
    at = _time(value)
    return at.strftime("%H:%M:%S") if at else ""


def seconds(value: float) -> str:
    """A duration as a person reads it: 0.21s, 3.4s, 1m12s, 2h3m."""
    if value < 10:
        return f"{value:.2f}s"
    if value < 60:
        return f"{value:.1f}s"
    whole = int(value)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60}s"
    return f"{whole // 3600}h{whole % 3600 // 60}m"


def between(start: str | None, end: str | None) -> str:
    """The time from `start` to `end`; in whole seconds when either is stamped to the second only
    (conditions' lastTransitionTime), so a coarse time does not pose as a precise one."""
    began, ended = _time(start), _time(end)
    if began is None or ended is None:
        return ""
    if "." not in str(start) or "." not in str(end):
        whole = int(ended.replace(microsecond=0).timestamp() - began.replace(microsecond=0).timestamp())
        return f"{whole}s" if whole >= 0 else ""
    if ended < began:
        return ""
    return seconds((ended - began).total_seconds())


def _elapsed(since: str | None, now: datetime.datetime | None) -> str:
    """How long something has run so far; '' in a view without a clock."""
    began = _time(since)
    if now is None or began is None:
        return ""
    return seconds(max(0.0, (now - began).total_seconds()))


def age(created: str | None, now: datetime.datetime) -> str:
    """kubectl's AGE column."""
    at = _time(created)
    return human_duration((now - at).total_seconds()) if at is not None else "<unknown>"


# ----- the roll as steps -------------------------------------------------------------------------


def step_order(roll: Obj) -> list[Step]:
    """The steps this roll (a `status.rollout` or a `RollReport`) goes through, in order."""
    stamps = roll.get("timestamps") or {}
    shape = roll.get("shape") or "BlueGreen"
    # Single shape rolls in place (the new slot is the old one's); blue/green to the other slot
    has_old = bool(roll.get("fromSlot")) and (shape == "Single" or roll.get("fromSlot") != roll.get("toSlot"))
    target_backup = (((roll.get("targetSpec") or {}).get("roll")) or {}).get("backup")
    steps: list[Step] = []
    if "backedUp" in stamps or roll.get("backup") or roll.get("step") == Step.BACKING_UP or target_backup:
        steps.append(Step.BACKING_UP)
    if shape == "Single" and has_old:
        steps += [Step.STOPPING_OLD, Step.STARTING, Step.WAITING_READY, Step.FLIPPING]
    else:
        steps += [Step.STARTING, Step.WAITING_READY, Step.FLIPPING]
        if has_old and not roll.get("restoring"):
            steps.append(Step.STOPPING_OLD)
    steps += [Step.HANDING_OVER_LEASE, Step.PROBING, Step.DRAINING, Step.RETIRING]
    return steps


def _leave_stamp(step: Step) -> str:
    return LEAVE_STAMP.get(step, "finished")


@dataclass(frozen=True)
class Item:
    """One line of a checklist."""

    mark: Mark
    name: str
    time: str = ""
    duration: str = ""
    note: str = ""


def step_items(roll: Obj, *, running: bool, now: datetime.datetime | None = None) -> list[Item]:
    """The checklist of a roll's steps. `running`: a roll under way (else a finished report)."""
    stamps: Mapping[str, str] = roll.get("timestamps") or {}
    order = step_order(roll)
    current = roll.get("step") if running else None
    result = roll.get("result")
    failed_at: Step | None = None
    if not running and result and result != "Succeeded":
        # the first step that never left is where it ended
        failed_at = next((s for s in order if _leave_stamp(s) not in stamps), None)
    items: list[Item] = []
    previous = stamps.get("started")
    reached_current = False
    for step in order:
        left = stamps.get(_leave_stamp(step))
        if running and step == current:
            reached_current = True
            began = roll.get("stepStartedAt") or previous
            items.append(Item(Mark.RUNNING, step.value, clock(began), _elapsed(began, now), "now"))
            continue
        if step == failed_at:
            end = stamps.get(str(result).lower()) or stamps.get("finished")
            items.append(Item(Mark.FAILED, step.value, clock(end), between(previous, end), str(result)))
            reached_current = True
            continue
        if left is not None and not reached_current:
            items.append(Item(Mark.DONE, step.value, clock(left), between(previous, left)))
            previous = left
        elif not running and not reached_current and result == "Succeeded":
            # a step the roll had no use for (e.g. no old slot to drain): done without a stamp
            items.append(Item(Mark.DONE, step.value))
        elif running and not reached_current and current in {s.value for s in order}:
            items.append(Item(Mark.DONE, step.value))
        else:
            items.append(Item(Mark.PENDING, step.value))
    return items


def slot_items(slot: Obj | None, *, now: datetime.datetime | None = None) -> list[Item]:
    """The new slot's step conditions (Seeded ... Probed) with the time each turned and how long it took."""
    conditions = _status(slot).get("conditions") or []
    previous = _status(slot).get("startedAt") or _meta(slot).get("creationTimestamp")
    items: list[Item] = []
    waiting_marked = False
    for type_ in cond.SLOT_STEPS:
        found = cond.find(conditions, type_) or {}
        at = found.get("lastTransitionTime")
        state = found.get("status")
        if state == "True":
            items.append(
                Item(Mark.DONE, type_, clock(at), between(previous, at), str(found.get("reason") or ""))
            )
            previous = at
        elif state == "False":
            items.append(
                Item(
                    Mark.FAILED, type_, clock(at), "", str(found.get("message") or found.get("reason") or "")
                )
            )
            waiting_marked = True
        elif not waiting_marked and slot is not None:
            items.append(
                Item(Mark.RUNNING, type_, "", _elapsed(previous, now), str(found.get("message") or ""))
            )
            waiting_marked = True
        else:
            items.append(Item(Mark.PENDING, type_))
    return items


def _item_lines(items: Sequence[Item], glyphs: Glyphs, indent: str = "  ") -> list[str]:
    width = max((len(i.name) for i in items), default=0)
    lines = []
    for item in items:
        parts = [
            f"{indent}{glyphs(item.mark)} {item.name:<{width}}",
            f"{item.time:>8}",
            f"{item.duration:>7}",
        ]
        line = "  ".join(parts)
        if item.note:
            line += f"  {item.note}"
        lines.append(line.rstrip())
    return lines


# ----- `status` ----------------------------------------------------------------------------------


def _slot_named(slots: Iterable[Obj], slot: str | None) -> Obj | None:
    for candidate in slots:
        if (candidate.get("spec") or {}).get("slot") == slot and not _meta(candidate).get(
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


def _active_version(status: Obj) -> str | None:
    # The active record moves to the new slot before the flip, and activeSpec follows it only at the end.
    rollout = status.get("rollout") or {}
    if rollout and status.get("activeRevision") == rollout.get("targetRevision"):
        return _version(rollout.get("targetSpec")) or _version(status.get("activeSpec"))
    return _version(status.get("activeSpec"))


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
    meta, spec, status = _meta(shard), shard.get("spec") or {}, _status(shard)
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
    active_version = _active_version(status)
    revision = str(status.get("activeRevision") or "none")
    lines.append(_kv("Revision", f"{revision} (kcp {active_version})" if active_version else revision))
    if rollout:
        target_version = _version(rollout.get("targetSpec")) or _version(spec)
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
        lines += _item_lines(step_items(rollout, running=True, now=now), glyphs)
        slot_name = rollout.get("toSlot")
    else:
        slot_name = status.get("activeSlot")
    slot = _slot_named(slots, slot_name) if slot_name else None
    if slot_name:
        port = _status(slot).get("port")
        head = f"Slot {slot_name} ({'new' if rollout else 'serving'}" + (f", port {port})" if port else ")")
        if slot is None:
            lines += ["", head + (": no KcpSlot yet" if rollout else ": its KcpSlot is gone")]
        else:
            lines += ["", head + ":", *_item_lines(slot_items(slot, now=now if rollout else None), glyphs)]
    for other in slots:
        if other is slot or _meta(other).get("deletionTimestamp"):
            continue
        other_spec, other_status = other.get("spec") or {}, _status(other)
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
            lines += ["", "Steps of the last roll:", *_item_lines(step_items(last, running=False), glyphs)]
    return lines


def can_abort(shard: Obj) -> tuple[bool, str]:
    """Whether `abort` may ask the operator to stop the roll, and if not, why not."""
    name = _meta(shard).get("name")
    rollout = _status(shard).get("rollout")
    if not rollout:
        return False, f"kcpshard {name} has no roll under way: nothing to abort"
    step = rollout.get("step")
    shape = rollout.get("shape") or "BlueGreen"
    try:
        past_flip = Step(step) in POST_FLIP or (Step(step) is Step.STOPPING_OLD and shape == "BlueGreen")
    except ValueError:
        past_flip = False
    if past_flip:
        return False, (
            f"the roll of kcpshard {name} is past the flip (step {step}): the front serves slot "
            f"{rollout.get('toSlot')} and the store has moved on, so it cannot go back; roll forward "
            "with a spec change instead"
        )
    return True, ""


# ----- tables ------------------------------------------------------------------------------------


def widths(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[int]:
    return [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=False)]


def table(
    header: Sequence[str], rows: Iterable[Sequence[str]], sizes: Sequence[int] | None = None
) -> list[str]:
    """kubectl's column layout: each column as wide as its widest cell (or `sizes`), three spaces apart."""
    rows = [list(r) for r in rows]
    sizes = list(sizes) if sizes is not None else widths(header, rows)
    sizes += [0] * (len(header) - len(sizes))
    return [
        "   ".join(f"{cell:<{w}}" for cell, w in zip(row, sizes, strict=False)).rstrip()
        for row in [list(header), *rows]
    ]


LIST_HEADER = ("NAME", "STATUS", "SERVING", "REVISION", "VERSION", "STEP", "AGE")


def list_row(shard: Obj, now: datetime.datetime, *, all_namespaces: bool = False) -> list[str]:
    meta, status = _meta(shard), _status(shard)
    ph, _ = phase(shard)
    rollout = status.get("rollout") or {}
    row = [
        str(meta.get("name", "")),
        ph.value,
        str(status.get("activeSlot") or "<none>"),
        str(status.get("activeRevision") or "<none>"),
        _active_version(status) or "<none>",
        str(rollout.get("step") or "<none>"),
        age(meta.get("creationTimestamp"), now),
    ]
    return [str(meta.get("namespace", "")), *row] if all_namespaces else row


def list_header(all_namespaces: bool) -> tuple[str, ...]:
    return ("NAMESPACE", *LIST_HEADER) if all_namespaces else LIST_HEADER


def list_rows(
    shards: Sequence[Obj], now: datetime.datetime, *, all_namespaces: bool = False
) -> list[list[str]]:
    ordered = sorted(shards, key=lambda s: (_meta(s).get("namespace", ""), _meta(s).get("name", "")))
    return [list_row(s, now, all_namespaces=all_namespaces) for s in ordered]


def list_lines(shards: Sequence[Obj], now: datetime.datetime, *, all_namespaces: bool = False) -> list[str]:
    return table(list_header(all_namespaces), list_rows(shards, now, all_namespaces=all_namespaces))


HISTORY_HEADER = ("#", "RESULT", "STARTED", "SLOT", "REVISION", "SHAPE", "TOTAL", "START-TO-READY", "REASON")


def history_reports(shard: Obj) -> list[Obj]:
    """`status.history` (newest first), or the last roll alone where the operator keeps no history yet."""
    status = _status(shard)
    history = status.get("history")
    if history:
        return list(history)
    return [status["lastRoll"]] if status.get("lastRoll") else []


def history_lines(shard: Obj, glyphs: Glyphs = UNICODE) -> list[str]:
    rows = []
    for n, report in enumerate(history_reports(shard), start=1):
        durations = report.get("durations") or {}
        from_slot, to_slot = report.get("fromSlot"), report.get("toSlot")
        slots = (
            f"{from_slot}{glyphs.arrow}{to_slot}"
            if from_slot and from_slot != to_slot
            else str(to_slot or "")
        )
        from_rev, to_rev = report.get("fromRevision"), report.get("toRevision")
        revisions = (
            f"{from_rev}{glyphs.arrow}{to_rev}" if from_rev and from_rev != to_rev else str(to_rev or "")
        )
        started = str((report.get("timestamps") or {}).get("started") or "")
        rows.append(
            [
                str(n),
                str(report.get("result") or "?") + (" (recovery)" if report.get("recovery") else ""),
                started[:19].replace("T", " "),
                slots,
                revisions,
                str(report.get("shape") or ""),
                seconds(float(durations["total"])) if "total" in durations else "",
                seconds(float(durations["startToReady"])) if "startToReady" in durations else "",
                str(report.get("reason") or ""),
            ]
        )
    return table(HISTORY_HEADER, rows)
