"""A roll as a checklist: one line per step (or per condition of the new slot), with a glyph, the time it
ended and how long it took, as `kubectl argo rollouts get rollout` draws its steps. Pure."""

from __future__ import annotations

import datetime
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kcpshard.api import conditions as cond
from kcpshard.plugin import objects
from kcpshard.plugin.clock import between, clock, elapsed
from kcpshard.plugin.objects import Obj
from kcpshard.roll.actions import Step
from kcpshard.roll.report import LEAVE_STAMP
from kcpshard.roll.route import route


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
    order = route(objects.rollout(roll) if running else objects.report(roll))
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
            items.append(Item(Mark.RUNNING, step.value, clock(began), elapsed(began, now), "now"))
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
    conditions = objects.status_of(slot).get("conditions") or []
    previous = objects.status_of(slot).get("startedAt") or objects.meta(slot).get("creationTimestamp")
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
                Item(Mark.RUNNING, type_, "", elapsed(previous, now), str(found.get("message") or ""))
            )
            waiting_marked = True
        else:
            items.append(Item(Mark.PENDING, type_))
    return items


def item_lines(items: Sequence[Item], glyphs: Glyphs, indent: str = "  ") -> list[str]:
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
