"""``kcpshard agent front``: runs a shard's HAProxy and follows ``KcpShard.status.front``.

The operator writes ``status.front.desiredBackend``/``desiredPort`` (and ``drain``); this agent applies them
to HAProxy through its runtime API and reports ``observedBackend``/``observedPort``/``observedAt`` and the
open ``connections`` per slot, with merge patches on ``/status`` that touch only those keys (a merge patch
merges nested maps, so the operator's keys beside them stay; no list is ever written).

Level-based like a client-go controller (``k8s.io/client-go/tools/cache`` informer + work loop): every
watch event or report tick compares the latest KcpShard with what HAProxy does and closes the gap, so a
restarted agent or HAProxy converges without remembering anything. All coordination goes through the API
server: the agent listens on no control port.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path
from typing import Any, TypeGuard

import httpx
from pydantic import ValidationError

from kcpshard.agent.haproxy import SLOTS, HAProxy, HAProxyError
from kcpshard.api.conditions import now
from kcpshard.api.models import FrontSpec
from kcpshard.k8s.api import KCPSHARDS, ApiClient, ApiError, NotFound
from kcpshard.k8s.kubeconfig import KubeconfigError

log = logging.getLogger("kcpshard.agent.front")

MAX_BACKOFF_SECONDS = 30.0
# Errors the loop survives: the API server or HAProxy being away for a while is expected.
_TRANSIENT = (ApiError, httpx.HTTPError, HAProxyError, OSError)


class FrontAgent:
    """One shard's front: an HAProxy and the loop that keeps it in line with the KcpShard status."""

    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        shard: str,
        state_dir: Path,
        *,
        binary: str | None = None,
        report_interval: float = 1.0,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.shard = shard
        self.state_dir = state_dir
        self.binary = binary
        self.report_interval = report_interval
        self.haproxy: HAProxy | None = None
        self._obj: dict[str, Any] | None = None
        self._kick = asyncio.Event()
        self._applied: tuple[str, int] | None = None
        self._reported_connections: dict[str, int] | None = None
        self._last_problem = ""
        self._warned: set[str] = set()

    # -- start-up ---------------------------------------------------------------------------------------

    async def _read_front(self, stop: asyncio.Event) -> FrontSpec | None:
        """The shard's spec.front, waiting (with backoff) while the API or the object is not there."""
        failures = 0
        while not stop.is_set():
            try:
                obj = await self.api.get(KCPSHARDS, self.namespace, self.shard)
                self._obj = obj
                return FrontSpec.model_validate((obj.get("spec") or {}).get("front") or {})
            except NotFound:
                self._problem(f"KcpShard {self.namespace}/{self.shard} not found; waiting for it")
            except (ApiError, httpx.HTTPError) as exc:
                self._problem(f"cannot read KcpShard {self.namespace}/{self.shard}: {_short(exc)}")
            failures += 1
            await _wait_or_stop(stop, _backoff(self.report_interval, failures))
        return None

    def _problem(self, message: str) -> None:
        """Log a problem once per distinct message: an API that is down for minutes gives one line."""
        if message != self._last_problem:
            log.warning("%s", message)
            self._last_problem = message

    def _recovered(self) -> None:
        if self._last_problem:
            log.info("recovered after: %s", self._last_problem)
            self._last_problem = ""

    # -- the loop ---------------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> int:
        """Run until ``stop`` is set; returns the exit code."""
        try:
            front = await self._read_front(stop)
        except ValidationError as exc:
            log.error("KcpShard %s/%s has an invalid spec.front: %s", self.namespace, self.shard, _short(exc))
            return 2
        if front is None:
            return 0
        self.haproxy = HAProxy(self.state_dir, front.address, front.port, self.binary)
        try:
            await self.haproxy.start()
        except HAProxyError as exc:
            log.error("%s", exc)
            return 1
        watcher = asyncio.create_task(self._watch())
        failures = 0
        try:
            while not stop.is_set():
                if watcher.done():
                    # watch_forever retries API errors itself; anything else ended it: start it again.
                    self._problem(f"watch of KcpShard ended: {_short(_task_error(watcher))}; restarting it")
                    watcher = asyncio.create_task(self._watch())
                try:
                    await self._reconcile()
                    failures = 0
                    self._recovered()
                except _TRANSIENT as exc:
                    failures += 1
                    self._problem(f"front of {self.namespace}/{self.shard}: {_short(exc)}")
                delay = _backoff(self.report_interval, failures) if failures else self.report_interval
                await self._sleep(stop, delay)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            await self.haproxy.stop()
        log.info("front of %s/%s stopped", self.namespace, self.shard)
        return 0

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
            else:
                self._obj = obj
            self._kick.set()

    async def _sleep(self, stop: asyncio.Event, seconds: float) -> None:
        """Wait for a watch event, HAProxy's exit, the stop signal or the timeout, whichever comes first."""
        waiters: list[asyncio.Future[Any]] = [
            asyncio.ensure_future(stop.wait()),
            asyncio.ensure_future(self._kick.wait()),
        ]
        if self.haproxy is not None and self.haproxy.alive:
            waiters.append(asyncio.ensure_future(self.haproxy.wait()))
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            self._kick.clear()

    async def _reconcile(self) -> None:
        haproxy = await self._ensure_haproxy()
        obj = self._obj
        if obj is None:
            return
        front_status = (obj.get("status") or {}).get("front") or {}
        patch: dict[str, Any] = {}

        desired = self._desired(front_status)
        if desired is not None and desired != self._applied:
            await haproxy.set_backend(*desired)
            self._applied = desired
            log.info("new connections now go to slot %s (port %s)", *desired)
        if self._applied is not None:
            observed = (front_status.get("observedBackend"), front_status.get("observedPort"))
            if observed != self._applied:
                patch.update(
                    observedBackend=self._applied[0], observedPort=self._applied[1], observedAt=now()
                )

        connections = await haproxy.connections()
        drain = front_status.get("drain")
        if drain in SLOTS and connections.get(drain, 0) > 0:
            if desired is not None and drain == desired[0]:
                self._warn_once(f"not draining slot {drain}: it is the desired backend")
            else:
                closed = await haproxy.drain(drain)
                log.info("drained slot %s: closed %d connection(s)", drain, closed)
                connections = await haproxy.connections()
        if connections != self._reported_connections:
            patch["connections"] = connections

        if patch:
            self._obj = await self.api.patch(
                KCPSHARDS, self.namespace, self.shard, {"status": {"front": patch}}, subresource="status"
            )
            if "connections" in patch:
                self._reported_connections = connections

    async def _ensure_haproxy(self) -> HAProxy:
        """HAProxy, restarted when it died or when spec.front moved it to another address or port."""
        assert self.haproxy is not None
        haproxy = self.haproxy
        front = self._front_spec()
        if front is not None and (front.address, front.port) != (haproxy.bind_address, haproxy.bind_port):
            log.info("spec.front moved to %s:%s; restarting haproxy", front.address, front.port)
            await haproxy.stop()
            haproxy = self.haproxy = HAProxy(self.state_dir, front.address, front.port, self.binary)
            self._applied = None
        if not haproxy.alive:
            if haproxy.returncode is not None:
                log.warning("haproxy exited with code %s; restarting it", haproxy.returncode)
            self._applied = None  # a new HAProxy starts with both servers disabled
            self._reported_connections = None
            await haproxy.start()
        return haproxy

    def _front_spec(self) -> FrontSpec | None:
        if self._obj is None:
            return None
        try:
            return FrontSpec.model_validate((self._obj.get("spec") or {}).get("front") or {})
        except ValidationError as exc:
            self._warn_once(f"ignoring an invalid spec.front: {_short(exc)}")
            return None

    def _desired(self, front_status: dict[str, Any]) -> tuple[str, int] | None:
        backend, port = front_status.get("desiredBackend"), front_status.get("desiredPort")
        if backend is None and port is None:
            return None
        if backend in SLOTS and _is_port(port):
            return str(backend), port
        self._warn_once(f"ignoring desiredBackend={backend!r} desiredPort={port!r}: not a slot and port")
        return None

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            log.warning("%s", message)


def _task_error(task: asyncio.Task[None]) -> BaseException:
    if task.cancelled():
        return asyncio.CancelledError()
    return task.exception() or RuntimeError("ended")


def _is_port(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536


def _backoff(base: float, failures: int) -> float:
    return float(min(MAX_BACKOFF_SECONDS, max(base, 0.5) * 2 ** min(failures, 6)))


async def _wait_or_stop(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


def _short(exc: BaseException) -> str:
    """One line, for logs: no traceback, no request bodies (ApiError's str carries none)."""
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if isinstance(exc, httpx.HTTPError | OSError) else text


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kcpshard agent front", description="Run a shard's HAProxy front and follow its KcpShard status."
    )
    parser.add_argument("--namespace", help="namespace of the KcpShard (default: the kubeconfig's)")
    parser.add_argument("--shard", required=True, help="name of the KcpShard")
    parser.add_argument("--state-dir", type=Path, help="folder for haproxy.cfg and the runtime socket")
    parser.add_argument("--haproxy", default=None, help="haproxy executable (default: haproxy on PATH)")
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig (default: $KUBECONFIG or in-cluster)")
    parser.add_argument(
        "--report-interval", type=float, default=1.0, help="seconds between connection reports (default 1)"
    )
    return parser


async def _main(args: argparse.Namespace) -> int:
    try:
        api = ApiClient.from_kubeconfig(args.kubeconfig)
    except KubeconfigError as exc:
        log.error("%s", exc)
        return 2
    namespace = args.namespace or api.default_namespace
    state_dir = args.state_dir or Path("/var/lib/kcpshard/front") / namespace / args.shard
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    agent = FrontAgent(
        api, namespace, args.shard, state_dir, binary=args.haproxy, report_interval=args.report_interval
    )
    try:
        return await agent.run(stop)
    finally:
        await api.aclose()


def run(argv: list[str]) -> int:
    """Entry of ``kcpshard agent front``."""
    args = _parser().parse_args(argv)
    if args.report_interval <= 0:
        print("kcpshard agent front: --report-interval must be positive", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request would drown the agent's own
    return asyncio.run(_main(args))


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
