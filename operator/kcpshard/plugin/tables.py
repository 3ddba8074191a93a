"""`kubectl kcpshard list` and `history`: tables laid out as `kubectl get` lays them out. Pure."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence

from kcpshard.plugin import objects
from kcpshard.plugin.checklist import UNICODE, Glyphs
from kcpshard.plugin.clock import age, seconds
from kcpshard.plugin.objects import Obj
from kcpshard.plugin.render import active_version, phase


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
    meta, status = objects.meta(shard), objects.status_of(shard)
    ph, _ = phase(shard)
    rollout = status.get("rollout") or {}
    row = [
        str(meta.get("name", "")),
        ph.value,
        str(status.get("activeSlot") or "<none>"),
        str(status.get("activeRevision") or "<none>"),
        active_version(status) or "<none>",
        str(rollout.get("step") or _held(shard) or "<none>"),
        age(meta.get("creationTimestamp"), now),
    ]
    return [str(meta.get("namespace", "")), *row] if all_namespaces else row


def _held(shard: Obj) -> str | None:
    """Why a shard with no roll under way is still reconciling (WaitingForRootShard): the STEP column shows
    it, so a fleet's non-root shards read as waiting, not as idle."""
    reconciling = objects.condition(shard, "Reconciling")
    return (
        str(reconciling["reason"])
        if reconciling.get("status") == "True" and reconciling.get("reason")
        else None
    )


def list_header(all_namespaces: bool) -> tuple[str, ...]:
    return ("NAMESPACE", *LIST_HEADER) if all_namespaces else LIST_HEADER


def list_rows(
    shards: Sequence[Obj], now: datetime.datetime, *, all_namespaces: bool = False
) -> list[list[str]]:
    ordered = sorted(
        shards, key=lambda s: (objects.meta(s).get("namespace", ""), objects.meta(s).get("name", ""))
    )
    return [list_row(s, now, all_namespaces=all_namespaces) for s in ordered]


def list_lines(shards: Sequence[Obj], now: datetime.datetime, *, all_namespaces: bool = False) -> list[str]:
    return table(list_header(all_namespaces), list_rows(shards, now, all_namespaces=all_namespaces))


HISTORY_HEADER = ("#", "RESULT", "STARTED", "SLOT", "REVISION", "SHAPE", "TOTAL", "START-TO-READY", "REASON")


def history_reports(shard: Obj) -> list[Obj]:
    """`status.history` (newest first), or the last roll alone where the operator keeps no history yet."""
    status = objects.status_of(shard)
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
