"""A watching client for `make bench`: a writer creating ConfigMaps, and a reflector that lists and watches.

It measures what kcp's users see during a roll: their controllers list then watch (client-go's
`tools/cache` reflector), and must not lose an object because the kcp process behind the front changed.

The reflector imitates `client-go/tools/cache/reflector.go` (`ListAndWatch`, `watch`, `handleWatch`):
list, remember the list's `metadata.resourceVersion`, watch from it with `allowWatchBookmarks=true` and
`timeoutSeconds`, keep the `resourceVersion` of every event (BOOKMARK too); a stream that ends, whatever the
reason (the server's timeout, a reset connection, kcp restarted), is followed by a watch from the last
resourceVersion; a 410 Gone (the watch request's answer, or an ERROR event with code 410) forces a relist.
Another ERROR event forces a relist after a backoff, as in client-go. Where it differs: the backoff is
0.1 s doubling to 1 s (client-go: 800 ms up to 30 s, with jitter), the relist after a 410 follows at once
(client-go waits its backoff first), the watch timeout is fixed (client-go: random between 5 and 10
minutes), it keeps names rather than objects (no store, no DELETED/MODIFIED bookkeeping), and a "very
short watch" is not treated as an error.

The writer creates ConfigMaps with unique names at a steady rate, one at a time. Unlike client-go, which
never retries a POST after a transport error, it retries connection errors (0.1 s doubling to 1 s) as well
as a 429 or 5xx with Retry-After (as client-go does, `load.retry_after`), up to `max_retries` tries: the
point is to know which objects exist. An AlreadyExists answer to a retry whose earlier try may have
reached the server counts as created.

At `stop()` the writer stops, the reflector gets up to 5 s to see every created name, then one last list
tells the names the watch never delivered (`missed_by_watch`) from those missing from the store (`missed`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx

from kcpshard_testkit.load import kube_client, retry_after

CATCH_UP_SECONDS = 5.0


@dataclass
class WatchReport:
    """What the run saw; `created`, `lists`, `watches` and the like count up while it runs."""

    created: int = 0  # creates that got a success (or AlreadyExists on a retry)
    seen: int = 0  # created names seen during the run, in a list or an ADDED event
    seen_late: int = 0  # created names seen only by the final list after stop
    missed_by_watch: int = 0  # created names neither the watches nor the lists of the run saw
    missed: int = 0  # created names not even in the final list: the store lost them
    relists: int = 0  # lists forced by 410 Gone (HTTP 410 on a watch, or an ERROR event with code 410)
    lists: int = 0  # all lists of the run, the first one included
    watches: int = 0  # watch streams opened (answered 200)
    bookmarks: int = 0  # BOOKMARK events received
    longest_gap_seconds: float = 0.0  # longest time from a stream's end to the next stream's 200
    # Longest time from a create's success to the reflector first seeing the name (seen ones only): a stream
    # left open by a kcp that is shutting down shows here, not in the gap.
    max_lag_seconds: float = 0.0
    write_failures: int = 0
    seconds: float = 0.0  # from start() to the final list
    errors: dict[str, int] = field(default_factory=dict)  # problems by kind ("watch: HTTP 410"): how many
    first_errors: dict[str, str] = field(default_factory=dict)  # by kind: the first one's message

    def summary(self) -> str:
        return (
            f"{self.created} created, {self.seen} seen by the watcher ({self.seen_late} only late), "
            f"{self.missed_by_watch} missed by the watch, {self.missed} missing; {self.watches} watches, "
            f"{self.relists} relists, longest gap {self.longest_gap_seconds:.2f}s, "
            f"longest lag {self.max_lag_seconds:.2f}s, "
            f"{self.write_failures} failed writes in {self.seconds:.1f}s"
        )


class _Answer(Exception):
    """The server answered a list with something other than 200."""


class WatchedWrites:
    def __init__(
        self,
        base_url: str,
        token: str,
        ca_pem: bytes,
        cluster: str = "root",
        namespace: str = "default",
        rate: float = 5.0,
        *,
        watch_timeout: int = 300,
        max_retries: int = 10,
    ) -> None:
        self.path = f"/clusters/{cluster}/api/v1/namespaces/{namespace}/configmaps"
        self.rate = rate
        self.watch_timeout = watch_timeout
        self.max_retries = max_retries
        self.prefix = f"bench-watch-{secrets.token_hex(3)}-"
        self.report = WatchReport()
        self._client = kube_client(base_url, token, ca_pem)
        self._attempted: list[str] = []
        self._created: dict[str, float] = {}  # name -> monotonic time its create succeeded
        self._seen: dict[str, float] = {}  # name -> monotonic time the reflector first saw it
        self._progress = asyncio.Event()  # set when the reflector sees a new name
        self._stop = asyncio.Event()
        self._rv: str | None = None  # None: list before the next watch
        self._open = False  # a watch stream is open
        self._gap_from: float | None = None  # monotonic time the last stream ended
        self._started = 0.0
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._started = time.monotonic()
        self._tasks = [asyncio.create_task(self._reflect()), asyncio.create_task(self._write())]

    async def stop(self) -> WatchReport:
        reflector, writer = self._tasks
        self._stop.set()
        await asyncio.wait([writer])
        await self._catch_up(CATCH_UP_SECONDS)
        if not self._open and self._gap_from is not None:  # a gap still open counts up to now
            self._gap_ended()
        reflector.cancel()
        await asyncio.wait([reflector])
        for task, what in ((writer, "writer"), (reflector, "reflector")):
            if not task.cancelled() and task.exception() is not None:  # a bug: say so in the report
                self._note(f"{what} crashed", repr(task.exception()))
        created, seen = set(self._created), self._seen.keys() & self._created.keys()
        final = await self._final_list()
        r = self.report
        r.created, r.seen = len(created), len(seen)
        r.missed_by_watch = len(created - seen)
        r.max_lag_seconds = max((max(0.0, self._seen[n] - self._created[n]) for n in seen), default=0.0)
        if final is None:
            r.missed = r.missed_by_watch  # unknown: the most it can be
        else:
            r.seen_late = len((created - seen) & final)
            r.missed = len(created - seen - final)
        r.seconds = time.monotonic() - self._started
        await self._clean_up()
        await self._client.aclose()
        return r

    # --- the writer ---

    async def _write(self) -> None:
        period = 1.0 / self.rate
        next_at = time.monotonic()
        while not self._stop.is_set():
            name = f"{self.prefix}{len(self._attempted)}"
            self._attempted.append(name)
            if await self._create(name):
                self._created[name] = time.monotonic()
                self.report.created = len(self._created)
            else:
                self.report.write_failures += 1
            next_at = max(next_at + period, time.monotonic())  # steady, no burst after a slow create
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), next_at - time.monotonic())

    async def _create(self, name: str) -> bool:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"n": name}}
        maybe_sent = False  # an earlier try may have created it and lost the answer
        backoff = 0.1
        for _ in range(self.max_retries):
            try:
                resp = await self._client.post(self.path, json=body)
            except httpx.TransportError as exc:
                maybe_sent = maybe_sent or not isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
                self._note(f"create: {type(exc).__name__}", f"{name}: {exc}")
                await asyncio.sleep(backoff)
                backoff = min(2 * backoff, 1.0)
                continue
            if resp.status_code in (200, 201):
                return True
            if resp.status_code == 409 and maybe_sent and _reason(resp) == "AlreadyExists":
                return True
            wait = retry_after(resp)
            if wait is not None:
                self._note(f"create: retried after HTTP {resp.status_code}", f"{name}: {resp.text[:200]}")
                await asyncio.sleep(wait)
                continue
            self._note(f"create: HTTP {resp.status_code}", f"{name}: {resp.text[:200]}")
            return False
        self._note("create: gave up", f"{name}: after {self.max_retries} tries")
        return False

    # --- the reflector ---

    async def _reflect(self) -> None:
        backoff = 0.1
        while True:
            delay = 0.0
            try:
                if self._rv is None:
                    self._rv = await self._list()
                ended, retry_after = await self._watch()
            except (httpx.TransportError, _Answer) as exc:
                self._note(f"reflector: {type(exc).__name__}", str(exc))
                delay, backoff = backoff, min(2 * backoff, 1.0)
            else:
                if ended == "opened":
                    backoff = 0.1
                elif ended == "gone":
                    self.report.relists += 1
                    self._rv = None
                elif ended == "error":  # client-go relists after any other ERROR event, after a backoff
                    self._rv = None
                    delay, backoff = backoff, min(2 * backoff, 1.0)
                else:
                    delay = retry_after
            if delay:
                await asyncio.sleep(delay)

    async def _list(self) -> str:
        resp = await self._client.get(self.path)
        if resp.status_code != 200:
            raise _Answer(f"list: HTTP {resp.status_code}: {resp.text[:200]}")
        body = resp.json()
        self.report.lists += 1
        self._saw(item["metadata"]["name"] for item in body.get("items") or [])
        return str(body["metadata"]["resourceVersion"])

    async def _watch(self) -> tuple[str, float]:
        """One watch from `self._rv`: how it ended ("opened" then ended, "gone", "error" or "retry") and,
        for "retry", after how many seconds."""
        params = {
            "watch": "1",
            "resourceVersion": self._rv or "",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self.watch_timeout),
        }
        # A quiet watch is normal (the server's timeoutSeconds ends it): the read timeout catches a dead peer.
        timeout = httpx.Timeout(10.0, read=self.watch_timeout + 30.0)
        try:
            async with self._client.stream("GET", self.path, params=params, timeout=timeout) as resp:
                if resp.status_code != 200:
                    text = (await resp.aread()).decode(errors="replace")[:200]
                    self._note(f"watch: HTTP {resp.status_code}", text)
                    if resp.status_code == 410:
                        return "gone", 0.0
                    wait = retry_after(resp)
                    return "retry", 1.0 if wait is None else wait
                self._opened()
                return await self._events(resp), 0.0
        except httpx.TransportError as exc:
            if not self._open:
                raise
            # The stream broke (kcp went away): client-go's stream watcher just ends the watch.
            self._note(f"watch ended: {type(exc).__name__}", str(exc))
            return "opened", 0.0
        finally:
            if self._open:
                self._open = False
                self._gap_from = time.monotonic()

    async def _events(self, resp: httpx.Response) -> str:
        async for line in resp.aiter_lines():
            if not line.strip():
                continue
            try:
                event: dict[str, Any] = json.loads(line)
            except ValueError:
                self._note("watch: not a JSON event", line[:200])
                return "opened"  # end this stream; the next watch resumes
            obj: dict[str, Any] = event.get("object") or {}
            if event.get("type") == "ERROR":
                self._note(f"watch: ERROR event {obj.get('code')}", str(obj.get("message")))
                return "gone" if obj.get("code") == 410 else "error"
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv:
                self._rv = str(rv)
            if event.get("type") == "BOOKMARK":
                self.report.bookmarks += 1
            elif event.get("type") == "ADDED":
                self._saw([obj["metadata"]["name"]])
        return "opened"

    def _opened(self) -> None:
        self._open = True
        self.report.watches += 1
        if self._gap_from is not None:
            self._gap_ended()

    def _gap_ended(self) -> None:
        assert self._gap_from is not None
        gap = time.monotonic() - self._gap_from
        self.report.longest_gap_seconds = max(self.report.longest_gap_seconds, gap)
        self._gap_from = None

    def _saw(self, names: Iterable[str]) -> None:
        now = time.monotonic()
        fresh = {n for n in names if n.startswith(self.prefix) and n not in self._seen}
        if fresh:
            self._seen.update(dict.fromkeys(fresh, now))
            self._progress.set()

    async def _catch_up(self, within: float) -> None:
        """Wait until the reflector has seen every created name, or `within` seconds passed."""
        deadline = time.monotonic() + within
        while not self._created.keys() <= self._seen.keys():
            self._progress.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._progress.wait(), remaining)

    # --- the end ---

    async def _final_list(self) -> set[str] | None:
        backoff = 0.1
        deadline = time.monotonic() + 10.0
        while True:
            try:
                resp = await self._client.get(self.path)
                if resp.status_code == 200:
                    names = {i["metadata"]["name"] for i in resp.json().get("items") or []}
                    return {n for n in names if n.startswith(self.prefix)}
                self._note(f"final list: HTTP {resp.status_code}", resp.text[:200])
            except httpx.TransportError as exc:
                self._note(f"final list: {type(exc).__name__}", str(exc))
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(backoff)
            backoff = min(2 * backoff, 1.0)

    async def _clean_up(self) -> None:
        """Delete every ConfigMap this run tried to create, a few at a time; errors are ignored."""
        limit = asyncio.Semaphore(4)

        async def delete(name: str) -> None:
            async with limit:
                with contextlib.suppress(httpx.HTTPError):
                    await self._client.delete(f"{self.path}/{name}")

        await asyncio.gather(*(delete(n) for n in self._attempted))

    def _note(self, kind: str, message: str) -> None:
        self.report.errors[kind] = self.report.errors.get(kind, 0) + 1
        self.report.first_errors.setdefault(kind, message)


def _reason(resp: httpx.Response) -> str:
    with contextlib.suppress(ValueError, AttributeError):
        return str(resp.json().get("reason", ""))
    return ""
