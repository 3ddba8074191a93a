"""``kcpshard agent front``: runs a shard's HAProxy and follows ``KcpShard.status.front``.

The operator writes ``status.front.desiredBackend``/``desiredPort`` (and ``drain``); this agent applies them
to HAProxy through its runtime API and reports ``observedBackend``/``observedPort``/``observedAt`` and the
open ``connections`` per slot, with merge patches on ``/status`` that touch only those keys (a merge patch
merges nested maps, so the operator's keys beside them stay; no list is ever written). What the patch
holds is decided in front_status.py.

Level-based like a client-go controller (``k8s.io/client-go/tools/cache`` informer + work loop): every
watch event or report tick compares the latest KcpShard with what HAProxy does and closes the gap, so a
restarted agent or HAProxy converges without remembering anything. All coordination goes through the API
server: the agent listens on no control port.

Two HAProxy processes share the front port (front_pair.py; in a front pod they are containers of their
own, front_members.py, which outlive the agent); ``observedBackend`` is reported only once every running
process serves it, and each restart is counted in ``status.front.restarts`` (the operator
turns each into a Warning Event). The agent never exits because HAProxy cannot serve: it reports why in
``status.front.error`` and clears it once HAProxy listens.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from kcpshard import retry
from kcpshard.agent import cli
from kcpshard.agent import front_status as report
from kcpshard.agent.errors import Failure
from kcpshard.agent.front_address import FrontAddress, InvalidFront, front_address
from kcpshard.agent.front_hold import hold_until_replaced, stop_when_replaced
from kcpshard.agent.front_members import HAProxyContainers
from kcpshard.agent.front_options import Options, parse_args
from kcpshard.agent.front_pair import HAProxyPair
from kcpshard.agent.front_pod import FrontPod
from kcpshard.agent.haproxy import HAProxy
from kcpshard.agent.haproxy_config import HAProxyError
from kcpshard.agent.lognotes import Notes, short
from kcpshard.api.conditions import now
from kcpshard.k8s.api import KCPSHARDS, ApiClient, ApiError, NotFound
from kcpshard.k8s.versions import older, version_of
from kcpshard.timeouts import within

log = logging.getLogger("kcpshard.agent.front")

# The waits after failed passes: the report interval doubled, up to this.
MAX_BACKOFF_SECONDS = 30.0
# HAProxy processes on the front port: one of them dying loses no new connection.
PAIR = 2
# Between failed starts of HAProxy: the first retry soon (a port freed a moment later), then capped.
START_BACKOFF_SECONDS = (1.0, 10.0)
# On SIGTERM, connections through the front get this long to finish (the pod's grace is 10 s).
STOP_GRACE_SECONDS = 7.0
# On the way out, the pod's readiness gate is set False within this long, or not at all.
MARK_TIMEOUT_SECONDS = 2.0
# Errors a pass survives: the API server or HAProxy being away for a while is expected.
PASSES = retry.kinds(ApiError, httpx.HTTPError, HAProxyError, OSError)


def backoff(report_interval: float) -> retry.Backoff:
    return retry.Backoff(2 * max(report_interval, 0.5), MAX_BACKOFF_SECONDS)


class FrontAgent:
    """One shard's front: an HAProxy pair and the loop that keeps it in line with the KcpShard status."""

    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        shard: str,
        state_dir: Path,
        *,
        binary: str | None = None,
        report_interval: float = 1.0,
        start_backoff: tuple[float, float] = START_BACKOFF_SECONDS,
        pair: int = PAIR,
        pod: str | None = None,
        stop_grace: float = STOP_GRACE_SECONDS,
        members_dir: Path | None = None,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.shard = shard
        self.state_dir = state_dir
        self.report_interval = report_interval
        self.notes = Notes(log)
        # In a front pod the HAProxys are containers of their own (front_members.py); else our children.
        self.pair = (HAProxyPair if members_dir is None else HAProxyContainers)(
            state_dir if members_dir is None else members_dir,
            binary,
            size=pair,
            start_backoff=retry.Backoff(*start_backoff),
            where=f"{namespace}/{shard}",
            notes=self.notes,
            others=self._replaced,
            node=self._node,
            on_down=self._report_error,
        )
        self._obj: dict[str, Any] | None = None
        self._kick = asyncio.Event()
        # This agent's pod: another running front pod of the shard may share the port.
        self.pod = FrontPod(api, namespace, shard, state_dir, pod, self.notes, PASSES)
        self.stop_grace = stop_grace

    @property
    def members(self) -> list[HAProxy]:
        return self.pair.members

    # -- the loop ---------------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> int:
        """Run until ``stop`` is set; returns the exit code (Failure for a spec.front it cannot use)."""
        try:
            front = await self._read_front(stop)
        except InvalidFront as exc:
            raise Failure(
                f"KcpShard {self.namespace}/{self.shard} has an invalid spec.front: {exc}"
            ) from None
        if front is None:
            return 0
        restarted = self.pod.restarted()
        if restarted is not None:
            self.pair.restarts += 1
            self.pair.last_restart = restarted
            log.warning("front of %s/%s: %s", self.namespace, self.shard, restarted)
        await self.pod.forget_gone()
        self.pair.start_with(front)
        watcher = asyncio.create_task(self._watch())
        failures = 0
        passes = backoff(self.report_interval)
        try:
            while not stop.is_set():
                if watcher.done():
                    # watch_forever retries API errors itself; anything else ended it: start it again.
                    self.notes.problem(
                        f"watch of KcpShard ended: {short(_task_error(watcher))}; restarting it"
                    )
                    watcher = asyncio.create_task(self._watch())
                try:
                    await self._reconcile()
                    failures = 0
                    self.notes.recovered()
                except Exception as exc:
                    if not PASSES(exc):
                        raise
                    # A runtime command that failed because HAProxy just died is no API trouble: the next
                    # pass reports the exit and restarts it at once, without backoff or a warning.
                    if not (isinstance(exc, HAProxyError) and self.pair.died()):
                        failures += 1
                        self.notes.problem(f"front of {self.namespace}/{self.shard}: {short(exc)}")
                delay = passes.delay(failures) if failures else self.report_interval
                starting = self.pair.until_next_start()
                if self.pair.died():
                    delay = 0.0
                elif starting is not None:
                    delay = min(delay, starting)  # wake for the next start even when reports are rarer
                await self._sleep(stop, delay)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            with contextlib.suppress(Exception):  # best effort: the pod goes anyway
                await within(self.pod.mark_ready(False), MARK_TIMEOUT_SECONDS)
            # Soft stop: the listeners close at once (a replacement front's take every new connection),
            # the connections in flight finish within the grace period.
            await self.pair.soft_stop(self.stop_grace)
        log.info("front of %s/%s stopped", self.namespace, self.shard)
        return 0

    async def _read_front(self, stop: asyncio.Event) -> FrontAddress | None:
        """The shard's spec.front, waiting (with backoff) while the API or the object is not there."""
        failures = 0
        while not stop.is_set():
            try:
                obj = await self.api.get(KCPSHARDS, self.namespace, self.shard)
                self._obj = obj
                self.pair.restarts = report.restarts_reported((obj.get("status") or {}).get("front") or {})
                return front_address((obj.get("spec") or {}).get("front") or {})
            except NotFound:
                self.notes.problem(f"KcpShard {self.namespace}/{self.shard} not found; waiting for it")
            except (ApiError, httpx.HTTPError) as exc:
                self.notes.problem(f"cannot read KcpShard {self.namespace}/{self.shard}: {short(exc)}")
            failures += 1
            await _wait_or_stop(stop, backoff(self.report_interval).delay(failures))
        return None

    async def _watch(self) -> None:
        events = self.api.watch_forever(
            KCPSHARDS, self.namespace, field_selector=f"metadata.name={self.shard}", retry_delay=2.0
        )
        async for event in events:
            obj = event.get("object") or {}
            if (obj.get("metadata") or {}).get("name") != self.shard:
                continue
            if event.get("type") == "DELETED":
                log.info(
                    "KcpShard %s/%s was deleted; the front keeps its last backend", self.namespace, self.shard
                )
                self._obj = None
            elif _known_already(obj, self._obj):
                # What we hold already, or written before it (our own patch's answer came first): taking
                # it would have the next pass write again what it already wrote.
                continue
            else:
                self._obj = obj
            self._kick.set()

    async def _sleep(self, stop: asyncio.Event, seconds: float) -> None:
        """Wait for a watch event, HAProxy's exit, the stop signal or the timeout, whichever comes first."""
        waiters: list[asyncio.Future[Any]] = [
            asyncio.ensure_future(stop.wait()),
            asyncio.ensure_future(self._kick.wait()),
        ]
        waiters += [asyncio.ensure_future(m.wait()) for m in self.pair.members if m.alive]
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            self._kick.clear()

    async def _reconcile(self) -> None:
        pair = self.pair
        obj = self._obj
        front_status = ((obj or {}).get("status") or {}).get("front") or {}
        wanted, ignored = report.desired(front_status)
        if wanted is not None and wanted != pair.target:
            # Before any start: a replacement pod's HAProxy shares the port with the pod it replaces and
            # takes new connections from its first instant, so it must start with the server, not none.
            log.info("new connections now go to slot %s (port %s)", *wanted)
            pair.target = wanted
        running = await pair.ensure(self._front_spec())
        if obj is None:
            if pair.target is not None:
                # KcpShard gone: a restarted HAProxy still gets the last backend, as the old one kept it.
                await pair.apply(running, pair.target)
            return
        if ignored is not None:
            self.notes.warn_once(ignored)
        patch = await self._serving_patch(running, front_status, wanted) if running else {}
        patch |= report.health(
            front_status, error=pair.error, restarts=pair.restarts, last_restart=pair.last_restart
        )
        await self.pod.mark_ready(report.serves_desired(running, pair.size, pair.applied, wanted))
        if patch:
            self._obj = await self.api.patch(
                KCPSHARDS, self.namespace, self.shard, {"status": {"front": patch}}, subresource="status"
            )
            if "connections" in patch:
                pair.reported_connections = patch["connections"]
                pair.connections_reported_at = asyncio.get_running_loop().time()
            if "observedAt" in patch:
                pair.announce = False

    async def _serving_patch(
        self, running: list[int], front_status: dict[str, Any], wanted: report.Backend | None
    ) -> dict[str, Any]:
        """Apply the desired backend and drain; the status keys that differ from what HAProxy does."""
        pair = self.pair
        if wanted is not None:
            await pair.apply(running, wanted)
        serving = report.agreed(pair.applied.get(index) for index in running)
        patch = report.observed(front_status, serving, announce=pair.announce, now=now())
        connections = await pair.connections(running)
        slot, refused = report.to_drain(front_status, connections, wanted)
        if refused is not None:
            self.notes.warn_once(refused)
        if slot is not None:
            closed = await pair.drain(running, slot)
            log.info("drained slot %s: closed %d connection(s)", slot, closed)
            connections = await pair.connections(running)
        since = asyncio.get_running_loop().time() - pair.connections_reported_at
        if report.connections_due(pair.reported_connections, connections, since):
            patch["connections"] = connections
        return patch

    async def _replaced(self) -> list[str]:
        return await self.pod.replaced()

    async def _report_error(self) -> None:
        """Best effort, now: a restart of HAProxy must not wait for an API server that is away."""
        if self._obj is None:
            return
        try:
            self._obj = await self.api.patch(
                KCPSHARDS,
                self.namespace,
                self.shard,
                {"status": {"front": {"error": self.pair.error}}},
                subresource="status",
            )
        except Exception as exc:
            if not PASSES(exc):
                raise
            self.notes.problem(f"cannot report the front's error: {short(exc)}")

    def _node(self) -> str:
        """The node named in messages: the shard's spec.node, which is where this agent runs."""
        node = ((self._obj or {}).get("spec") or {}).get("node")
        return str(node) if node else os.environ.get("NODE_NAME") or socket.gethostname()

    def _front_spec(self) -> FrontAddress | None:
        if self._obj is None:
            return None
        try:
            return front_address((self._obj.get("spec") or {}).get("front") or {})
        except InvalidFront as exc:
            self.notes.warn_once(f"ignoring an invalid spec.front: {exc}")
            return None


def _known_already(event_obj: dict[str, Any], held: dict[str, Any] | None) -> bool:
    version, held_version = version_of(event_obj), version_of(held)
    return version is not None and (version == held_version or older(version, held_version))


def _task_error(task: asyncio.Task[None]) -> BaseException:
    if task.cancelled():
        return asyncio.CancelledError()
    return task.exception() or RuntimeError("ended")


async def _wait_or_stop(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await within(stop.wait(), seconds)


# -- the command ----------------------------------------------------------------------------------------


async def _work(opts: Options, api: ApiClient) -> int:
    namespace = opts.namespace or api.default_namespace
    state_dir = opts.state_dir or Path("/var/lib/kcpshard/front") / namespace / opts.shard
    pod = os.environ.get("POD_NAME") or None
    if pod is not None:
        # A folder per pod: a replacement front runs beside the one it replaces.
        state_dir = state_dir / pod
    # The first SIGTERM asks the front to stop once another pod of it serves (front_hold.py); a second
    # one, or SIGINT, stops it at once.
    asked, stop = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, lambda: (stop if asked.is_set() else asked).set())
    loop.add_signal_handler(signal.SIGINT, stop.set)
    agent = FrontAgent(
        api,
        namespace,
        opts.shard,
        state_dir,
        binary=opts.haproxy,
        report_interval=opts.report_interval,
        pod=pod,
        members_dir=opts.members_dir,
    )

    async def hold() -> str:
        if pod is None or not opts.hold_seconds:  # not in a pod: no replacement comes
            return "no hold"
        return await hold_until_replaced(api, namespace, opts.shard, pod, opts.hold_seconds, errors=PASSES)

    holding = asyncio.create_task(stop_when_replaced(asked, stop, hold))
    try:
        return await agent.run(stop)
    finally:
        holding.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await holding


def run(argv: Sequence[str]) -> int:
    """Entry of ``kcpshard agent front``."""
    return cli.main("front", argv, parse_args, _work)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
