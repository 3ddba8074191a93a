"""Watching a shard and its slots, and showing lines on a terminal or in a log.

On a terminal each view replaces the last one in place; anywhere else (a pipe, a CI log) each
changed view is appended as a plain block after a blank line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from kcpshard.k8s.api import KCPSHARDS, KCPSLOTS, ApiClient, ResourceRef
from kcpshard.k8s.names import LABEL_SHARD
from kcpshard.plugin.checklist import ASCII, UNICODE, Glyphs
from kcpshard.timeouts import within

# ----- output ------------------------------------------------------------------------------------

_COLORS = {"✔": "32", "◌": "33", "॥": "36", "✖": "31"}
_GLYPH = re.compile("[" + "".join(_COLORS) + "]")


def glyphs_for(out: TextIO) -> Glyphs:
    encoding = (getattr(out, "encoding", None) or "").lower().replace("-", "")
    return UNICODE if encoding.startswith("utf") else ASCII


def is_terminal(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


class Screen:
    """Shows successive views: redrawn in place on a terminal, appended as blocks elsewhere."""

    def __init__(self, out: TextIO, *, live: bool, color: bool | None = None):
        self.out = out
        self.live = live
        self.color = live and not os.environ.get("NO_COLOR") if color is None else color
        self._shown = 0
        self._last: str | None = None

    def _paint(self, line: str) -> str:
        if not self.color:
            return line
        return _GLYPH.sub(lambda m: f"\x1b[{_COLORS[m.group()]}m{m.group()}\x1b[0m", line)

    def show(self, lines: Sequence[str]) -> None:
        text = "\n".join(lines)
        if text == self._last:
            return
        if self.live:
            size = shutil.get_terminal_size()
            # a wrapped line would throw off the count of lines to go back over
            fitted = [line[: max(1, size.columns - 1)] for line in lines]
            if self._shown and self._shown < size.lines:
                self.out.write(f"\x1b[{self._shown}F\x1b[J")  # to the first line shown, clear below
            elif self._shown:
                self.out.write("\x1b[H\x1b[2J")  # taller than the screen: start from the top
            self.out.write("\n".join(self._paint(line) for line in fitted) + "\n")
            self._shown = len(fitted)
        else:
            if self._last is not None:
                self.out.write("\n")
            self.out.write(text + "\n")
        self.out.flush()
        self._last = text

    def line(self, text: str) -> None:
        """A line below the view that stays (the final word of a watch)."""
        self.out.write(self._paint(text) + "\n")
        self.out.flush()
        self._shown = 0


# ----- watching ----------------------------------------------------------------------------------


class _Problems(logging.Handler):
    """Keeps the last warning of the API client's watch (it retries on its own) to show it."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        self.last = record.getMessage()


@contextlib.contextmanager
def _captured_warnings() -> Any:
    logger = logging.getLogger("kcpshard.k8s.api")
    handler = _Problems()
    saved = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False  # not onto stderr, in the middle of the view
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.propagate = saved


@dataclass
class Snapshot:
    shard: dict[str, Any] | None
    slots: list[dict[str, Any]] = field(default_factory=list)
    problem: str | None = None
    changed: bool = True  # False: only the clock moved


async def _pump(
    api: ApiClient,
    ref: ResourceRef,
    namespace: str,
    queue: asyncio.Queue[tuple[str, dict[str, Any]]],
    **kw: Any,
) -> None:
    async for event in api.watch_forever(ref, namespace, **kw):
        await queue.put((ref.plural, event))


def _key(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


async def watch_shard(
    api: ApiClient, namespace: str, name: str, *, tick: float | None = None
) -> AsyncIterator[Snapshot]:
    """The shard and its slots after every change (and every `tick` seconds, when given), from the
    first time the shard is seen (the slots' watch may answer first).

    A DELETED shard yields a snapshot with `shard` None, and the watch goes on.
    """
    queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
    shard: dict[str, Any] | None = None
    seen = False
    slots: dict[str, dict[str, Any]] = {}
    with _captured_warnings() as problems:
        tasks = [
            asyncio.create_task(
                _pump(api, KCPSHARDS, namespace, queue, field_selector=f"metadata.name={name}")
            ),
            asyncio.create_task(
                _pump(api, KCPSLOTS, namespace, queue, label_selector=f"{LABEL_SHARD}={name}")
            ),
        ]
        try:
            while True:
                try:
                    plural, event = await within(queue.get(), tick)
                except TimeoutError:
                    if seen:
                        yield Snapshot(shard, sorted(slots.values(), key=_key), problems.last, changed=False)
                    continue
                problems.last = None
                obj = event.get("object") or {}
                deleted = event.get("type") == "DELETED"
                if plural == KCPSHARDS.plural:
                    shard = None if deleted else obj
                    seen = True
                elif deleted:
                    slots.pop(_key(obj), None)
                else:
                    slots[_key(obj)] = obj
                if seen:
                    yield Snapshot(shard, sorted(slots.values(), key=_key))
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def watch_list(api: ApiClient, namespace: str | None) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """Every KcpShard event in `namespace` (all when None): (type, object)."""
    with _captured_warnings():
        async for event in api.watch_forever(KCPSHARDS, namespace):
            yield str(event.get("type")), event.get("object") or {}
