"""Watch streams: initial state, resume from a resourceVersion, selectors, bookmarks, timeouts.

Imitates k8s.io/apiserver/pkg/storage/cacher/cache_watcher.go: an object that starts or stops matching
the selectors turns a MODIFIED into ADDED or DELETED for that watcher; BOOKMARK events carry only a
resourceVersion; `sendInitialEvents=true` ends its initial ADDED events with a bookmark annotated
`k8s.io/initial-events-end: "true"`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from .registry import ResourceType
from .selectors import FieldSelector, LabelSelector
from .store import Store, WatchEvent

DEFAULT_TIMEOUT = 1800.0


@dataclass
class WatchRequest:
    rt: ResourceType
    namespace: str | None
    labels: LabelSelector
    fields: FieldSelector
    since: int | None  # None: start with the current state
    send_initial: bool = False
    bookmarks: bool = False
    timeout: float | None = None


def _matches(req: WatchRequest, obj: dict[str, Any] | None) -> bool:
    if obj is None:
        return False
    meta = obj.get("metadata") or {}
    if req.namespace is not None and meta.get("namespace", "") != req.namespace:
        return False
    return req.labels.matches(meta.get("labels")) and req.fields.matches(obj)


def _translate(req: WatchRequest, store: Store, event: WatchEvent) -> dict[str, Any] | None:
    """The event this watcher sees (or None), given its selectors."""
    now_ok = _matches(req, event.obj)
    if event.type == "MODIFIED":
        was_ok = _matches(req, event.old)
        if now_ok and not was_ok:
            return {"type": "ADDED", "object": store.view(req.rt, event.obj)}
        if was_ok and not now_ok:
            return {"type": "DELETED", "object": store.view(req.rt, event.obj)}
    if not now_ok and not (event.type == "DELETED" and _matches(req, event.old)):
        return None
    return {"type": event.type, "object": store.view(req.rt, event.obj)}


def bookmark(rt: ResourceType, rv: int, initial_end: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if initial_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    return {"type": "BOOKMARK", "object": {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}}


async def stream(
    store: Store, req: WatchRequest, bookmark_interval: float
) -> AsyncGenerator[dict[str, Any], None]:
    """Yield watch events until the timeout, the server closing, or the consumer going away.

    Raises ApiError (410) before yielding anything when `since` is older than the kept history.
    """
    initial: list[dict[str, Any]] = []
    since = req.since
    if since is None or req.send_initial:
        items, rv = store.list_items(req.rt, req.namespace)
        initial = [{"type": "ADDED", "object": o} for o in items if _matches(req, o)]
        since = max(rv, since or 0) if since is not None else rv
    past, sub = store.subscribe(req.rt.storage_key, since)
    deadline = time.monotonic() + (req.timeout if req.timeout is not None else DEFAULT_TIMEOUT)
    try:
        for event in initial:
            yield event
        if req.send_initial:
            yield bookmark(req.rt, since, initial_end=True)
        for past_event in past:
            if (out := _translate(req, store, past_event)) is not None:
                yield out
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            wait = min(remaining, bookmark_interval) if req.bookmarks else remaining
            try:
                item = await asyncio.wait_for(sub.queue.get(), timeout=wait)
            except TimeoutError:
                if req.bookmarks and sub.queue.empty() and time.monotonic() < deadline:
                    yield bookmark(req.rt, store.rv)
                continue
            if item is None:
                return  # the server is shutting down
            if (out := _translate(req, store, item)) is not None:
                yield out
    finally:
        store.unsubscribe(sub)
