"""The sub-commands of `kubectl kcpshard`. Each returns its exit code (see `cli.EXIT_CODES`)."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any, TextIO

from kcpshard import retry
from kcpshard.api import conditions as cond
from kcpshard.api.annotations import ABORT, PROMOTE, REASSERT, RETRY
from kcpshard.api.models import API_VERSION
from kcpshard.k8s.api import KCPSHARDS, KCPSLOTS, ApiClient, Conflict
from kcpshard.k8s.names import LABEL_SHARD
from kcpshard.plugin import live, objects, render, tables
from kcpshard.plugin.checklist import Glyphs
from kcpshard.roll.phase import Phase

OK = 0
FAILED = 1
USAGE = 2
STALLED = 3
TIMED_OUT = 4
INTERRUPTED = 130


class Refused(Exception):
    """The command would do no good (or harm): say why, change nothing."""


@dataclass
class Terminal:
    """Where a command writes, and how."""

    out: TextIO
    err: TextIO
    live: bool  # a terminal: redraw in place, with colour and a running clock

    @property
    def glyphs(self) -> Glyphs:
        return live.glyphs_for(self.out)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


async def _slots(api: ApiClient, namespace: str, name: str) -> list[dict[str, Any]]:
    listed = await api.list(KCPSLOTS, namespace, label_selector=f"{LABEL_SHARD}={name}")
    return list(listed.get("items") or [])


# ----- status ------------------------------------------------------------------------------------


def wait_outcome(shard: dict[str, Any]) -> tuple[int, str] | None:
    """For `status --wait`: the exit code and last word once the roll has ended, None while it goes on.

    `render.phase` judges only the current generation: right after a spec change the old Stalled (or
    Ready) is still there until the operator sees the new spec, and that is Progressing.
    """
    name = (shard.get("metadata") or {}).get("name")
    phase, message = render.phase(shard)
    if phase is Phase.DEGRADED:
        return STALLED, f"kcpshard {name} stalled: {message}"
    if phase is Phase.HEALTHY:
        return OK, f"kcpshard {name} is healthy: {message}"
    return None


async def status(
    api: ApiClient,
    term: Terminal,
    namespace: str,
    name: str,
    *,
    watch: bool = False,
    wait: bool = False,
    timeout: float = 0.0,
) -> int:
    shard = await api.get(KCPSHARDS, namespace, name)  # NotFound: the caller says so in one line
    glyphs = term.glyphs
    if not watch and not wait:
        slots = await _slots(api, namespace, name)
        _write(term, render.status_lines(shard, slots, now=_now(), glyphs=glyphs))
        return OK
    if wait and not watch:
        outcome = wait_outcome(shard)
        if outcome is not None:
            term.out.write(outcome[1] + "\n")
            return outcome[0]
    screen = live.Screen(term.out, live=term.live)
    deadline = time.monotonic() + timeout if timeout > 0 else None
    # the clock ticks for the running time on a terminal, and for the deadline
    tick = 1.0 if term.live or deadline is not None else None
    last_phase: tuple[Phase, str] | None = None
    async for snap in live.watch_shard(api, namespace, name, tick=tick):
        if snap.shard is None:
            if snap.changed:
                screen.line(f"kcpshard {name} was deleted")
                return FAILED
            continue
        if watch:
            now = _now() if term.live else None
            screen.show(
                render.status_lines(snap.shard, snap.slots, now=now, glyphs=glyphs, note=snap.problem)
            )
        elif snap.changed:
            # `--wait` alone: one line per change of phase, as `kubectl argo rollouts status` does
            phase = render.phase(snap.shard)
            if phase != last_phase:
                screen.line(f"{phase[0].value} - {phase[1]}" if phase[1] else phase[0].value)
                last_phase = phase
        if wait:
            outcome = wait_outcome(snap.shard)
            if outcome is not None:
                screen.line(outcome[1])
                return outcome[0]
            if deadline is not None and time.monotonic() >= deadline:
                phase_now, message = render.phase(snap.shard)
                screen.line(
                    f"timed out after {timeout:g}s waiting for kcpshard {name}: {phase_now.value}"
                    + (f" - {message}" if message else "")
                )
                return TIMED_OUT
    return OK  # the watch never ends on its own


# ----- promote, abort, retry ---------------------------------------------------------------------


def _must_be_rolling(shard: dict[str, Any], what: str) -> None:
    if not (shard.get("status") or {}).get("rollout"):
        raise Refused(f"kcpshard {shard['metadata']['name']} has no roll under way: nothing to {what}")


def check_promote(shard: dict[str, Any]) -> None:
    _must_be_rolling(shard, "promote")


def check_abort(shard: dict[str, Any]) -> None:
    allowed, why = render.can_abort(shard)
    if not allowed:
        raise Refused(why)


def check_retry(shard: dict[str, Any]) -> None:
    name = shard["metadata"]["name"]
    rollout = (shard.get("status") or {}).get("rollout")
    if rollout:
        raise Refused(
            f"kcpshard {name} is rolling (step {rollout.get('step')}): retry is for a roll that stalled"
        )
    if objects.condition(shard, "Stalled").get("status") != "True":
        raise Refused(f"kcpshard {name} is not stalled: nothing to retry")


def check_reassert(shard: dict[str, Any]) -> None:
    name = shard["metadata"]["name"]
    status = shard.get("status") or {}
    if status.get("rollout"):
        raise Refused(f"kcpshard {name} is rolling (step {status['rollout'].get('step')}): let it end first")
    if not status.get("activeSlot"):
        raise Refused(f"kcpshard {name} serves nothing yet: nothing to re-assert")


STEERING: dict[str, tuple[str, Callable[[dict[str, Any]], None]]] = {
    "promote": (PROMOTE, check_promote),
    "abort": (ABORT, check_abort),
    "retry": (RETRY, check_retry),
    "reassert": (REASSERT, check_reassert),
}


async def steer(
    api: ApiClient, term: Terminal, namespace: str, name: str, verb: str, *, attempts: int = 5
) -> int:
    """Set the verb's annotation to a fresh timestamp, if the shard's state allows it.

    The write carries the resourceVersion that was checked, so the check holds when the write lands
    (a roll that moved past the flip meanwhile is checked again).
    """
    key, check = STEERING[verb]

    async def once() -> str:
        shard = await api.get(KCPSHARDS, namespace, name)
        check(shard)
        value = cond.now_precise()
        patch = {
            "metadata": {"resourceVersion": shard["metadata"]["resourceVersion"], "annotations": {key: value}}
        }
        await api.patch(KCPSHARDS, namespace, name, patch)
        return value

    try:
        # The operator wrote meanwhile (409): look again, at once.
        value = await retry.retrying(
            once, passing=retry.kinds(Conflict), backoff=retry.Backoff.every(0.0), attempts=attempts
        )
    except Conflict:
        raise Refused(f"kcpshard {name} kept changing; try again") from None
    term.out.write(f'kcpshard "{name}" {verb} requested ({key}={value})\n')
    return OK


# ----- history, list, version --------------------------------------------------------------------


async def history(api: ApiClient, term: Terminal, namespace: str, name: str) -> int:
    shard = await api.get(KCPSHARDS, namespace, name)
    if not tables.history_reports(shard):
        term.out.write(f"kcpshard {name} has no rolls yet\n")
        return OK
    _write(term, tables.history_lines(shard, term.glyphs))
    return OK


async def list_shards(api: ApiClient, term: Terminal, namespace: str | None, *, watch: bool = False) -> int:
    all_namespaces = namespace is None
    listed = await api.list(KCPSHARDS, namespace)
    shards = list(listed.get("items") or [])
    if not shards and not watch:
        where = "any namespace" if all_namespaces else f"{namespace} namespace"
        term.err.write(f"No resources found in {where}.\n")
        return OK
    header = tables.list_header(all_namespaces)
    rows = tables.list_rows(shards, _now(), all_namespaces=all_namespaces)
    sizes = tables.widths(header, rows)
    _write(term, tables.table(header, rows, sizes))
    if not watch:
        return OK
    # like `kubectl get -w`: then a row per change, in the columns of the first table
    shown = {_where(s): _meta_rv(s) for s in shards}
    async for kind, obj in live.watch_list(api, namespace):
        if kind != "DELETED" and shown.get(_where(obj)) == _meta_rv(obj):
            continue  # the watch begins with a list: those rows are in the table already
        shown[_where(obj)] = _meta_rv(obj)
        row = tables.list_row(obj, _now(), all_namespaces=all_namespaces)
        if kind == "DELETED":
            row[header.index("STATUS")] = "Deleted"
        _write(term, tables.table(header, [row], sizes)[1:])
    return OK


def _where(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _meta_rv(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _write(term: Terminal, lines: list[str]) -> None:
    for line in lines:
        term.out.write(line + "\n")
    term.out.flush()


def version(term: Terminal) -> int:
    try:
        mine = metadata.version("kcpshard")
    except metadata.PackageNotFoundError:
        mine = "unknown"
    term.out.write(f"kubectl-kcpshard: v{mine}\n  API: {API_VERSION}\n")
    return OK
