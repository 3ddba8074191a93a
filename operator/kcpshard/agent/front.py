"""``kcpshard agent front``: runs a shard's HAProxy and follows ``KcpShard.status.front``.

The operator writes ``status.front.desiredBackend``/``desiredPort`` (and ``drain``); this agent applies them
to HAProxy through its runtime API and reports ``observedBackend``/``observedPort``/``observedAt`` and the
open ``connections`` per slot, with merge patches on ``/status`` that touch only those keys (a merge patch
merges nested maps, so the operator's keys beside them stay; no list is ever written).

Level-based like a client-go controller (``k8s.io/client-go/tools/cache`` informer + work loop): every
watch event or report tick compares the latest KcpShard with what HAProxy does and closes the gap, so a
restarted agent or HAProxy converges without remembering anything. All coordination goes through the API
server: the agent listens on no control port.

Two HAProxy processes share the front port (SO_REUSEPORT): the kernel spreads new connections over
both listeners, so one process dying (a crash, a SIGKILL) loses only the connections it held, never a
new one; the agent starts it again, already pointed at the current backend, and counts the restart in
``status.front.restarts`` (the operator turns each into a Warning Event). Both are repointed at a flip,
and ``observedBackend`` is reported only once every running process serves it.

The agent never exits because HAProxy cannot serve: it reports why in ``status.front.error`` (a taken
port, both processes dead), starts HAProxy again with backoff, and clears ``error`` once it listens.
Like the kubelet's CrashLoopBackOff (``pkg/kubelet/kuberuntime``), but inside the pod, so the desired
backend is back within a second of a crash.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import logging
import os
import shutil
import signal
import socket
import sys
from pathlib import Path
from typing import Any, TypeGuard

import httpx
from pydantic import ValidationError

from kcpshard.agent.haproxy import SLOTS, HAProxy, HAProxyBindError, HAProxyError, check_bindable
from kcpshard.api.conditions import now
from kcpshard.api.models import FrontSpec
from kcpshard.k8s.api import KCPSHARDS, PODS, ApiClient, ApiError, NotFound
from kcpshard.k8s.builders import component_selector
from kcpshard.k8s.kubeconfig import KubeconfigError
from kcpshard.k8s.names import front_name

log = logging.getLogger("kcpshard.agent.front")

MAX_BACKOFF_SECONDS = 30.0
# HAProxy processes on the front port: one of them dying loses no new connection.
PAIR = 2
# Between failed starts of HAProxy: the first retry soon (a port freed a moment later), then capped.
START_BACKOFF_SECONDS = (1.0, 10.0)
# The readiness probe of the front's pod tests this file in the agent's state dir.
READY_FILE = "serving"
# Left in the state dir by the agent's first start in a pod: a later start there is a restart.
STARTED_FILE = "started"
# On SIGTERM, connections through the front get this long to finish (the pod's grace is 10 s).
STOP_GRACE_SECONDS = 7.0
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
        start_backoff: tuple[float, float] = START_BACKOFF_SECONDS,
        pair: int = PAIR,
        pod: str | None = None,
        stop_grace: float = STOP_GRACE_SECONDS,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.shard = shard
        self.state_dir = state_dir
        self.binary = binary
        self.report_interval = report_interval
        self.members: list[HAProxy] = []
        self._obj: dict[str, Any] | None = None
        self._kick = asyncio.Event()
        # The backend each running member serves, by its index in `members`.
        self._applied: dict[int, tuple[str, int] | None] = {}
        self._reported_connections: dict[str, int] | None = None
        self._last_problem = ""
        self._warned: set[str] = set()
        self.start_backoff = start_backoff
        self.pair = pair
        # What status.front.error should say: None while HAProxy serves.
        self._error: str | None = None
        self._serving: set[int] = set()  # members started by us and not seen dead since
        # Members seen dead and started again (status.front.restarts), counted on from the status.
        self._restarts = 0
        self._last_restart: str | None = None
        self._start_failures = 0
        self._next_start = 0.0  # loop time of the next start attempt
        self._announce = False  # a freshly started HAProxy: report observedAt even without a backend
        self._target: tuple[str, int] | None = None  # last backend applied, kept across HAProxy restarts
        self.pod = pod  # this agent's pod: another running front pod of the shard may share the port
        self.stop_grace = stop_grace
        # Exists while every member serves the desired backend: the pod's readiness probe tests it, so
        # a replacement front is Ready (and the old one goes) only once it serves.
        self.ready_file = state_dir / READY_FILE
        self._ready = False
        # A file left by this pod's previous container would pass the probe before HAProxy listens.
        with contextlib.suppress(OSError):
            self.ready_file.unlink(missing_ok=True)

    # -- start-up ---------------------------------------------------------------------------------------

    async def _read_front(self, stop: asyncio.Event) -> FrontSpec | None:
        """The shard's spec.front, waiting (with backoff) while the API or the object is not there."""
        failures = 0
        while not stop.is_set():
            try:
                obj = await self.api.get(KCPSHARDS, self.namespace, self.shard)
                self._obj = obj
                reported = ((obj.get("status") or {}).get("front") or {}).get("restarts")
                self._restarts = reported if _is_count(reported) else 0
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
        self._count_own_restart()
        await self._forget_gone_pods()
        self.members = self._new_members(front)
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
                    # A runtime command that failed because HAProxy just died is no API trouble: the next
                    # pass reports the exit and restarts it at once, without backoff or a warning.
                    if not (isinstance(exc, HAProxyError) and self._died()):
                        failures += 1
                        self._problem(f"front of {self.namespace}/{self.shard}: {_short(exc)}")
                delay = _backoff(self.report_interval, failures) if failures else self.report_interval
                if self._died():
                    delay = 0.0
                elif len(self._serving) < self.pair:
                    # Wake for the next start attempt even when reports are rarer than that.
                    until_start = self._next_start - asyncio.get_running_loop().time()
                    delay = min(delay, max(until_start, 0.0))
                await self._sleep(stop, delay)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            self._mark_ready(False)
            # Soft stop: the listeners close at once (a replacement front's take every new connection),
            # the connections in flight finish within the grace period.
            await asyncio.gather(*(member.soft_stop(self.stop_grace) for member in self.members))
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
        waiters += [asyncio.ensure_future(m.wait()) for m in self.members if m.alive]
        try:
            await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            self._kick.clear()

    async def _reconcile(self) -> None:
        running = await self._ensure_haproxy()
        obj = self._obj
        if obj is None:
            if self._target is not None:
                # KcpShard gone: a restarted HAProxy still gets the last backend, as the old one kept it.
                await self._apply(running, self._target)
            return
        front_status = (obj.get("status") or {}).get("front") or {}
        patch = await self._serving_patch(running, front_status) if running else {}
        if front_status.get("error") != self._error:
            patch["error"] = self._error  # None clears it (merge patch)
        if self._restarts and front_status.get("restarts") != self._restarts:
            patch.update(restarts=self._restarts, lastRestart=self._last_restart)
        self._mark_ready(self._serves_desired(running, front_status))
        if patch:
            self._obj = await self.api.patch(
                KCPSHARDS, self.namespace, self.shard, {"status": {"front": patch}}, subresource="status"
            )
            if "connections" in patch:
                self._reported_connections = patch["connections"]
            if "observedAt" in patch:
                self._announce = False

    def _count_own_restart(self) -> None:
        """An agent started again in the same pod (its container crashed or was killed) finds the marker
        its first start left in the pod's state dir: a restart, counted and reported like HAProxy's."""
        marker = self.state_dir / STARTED_FILE
        try:
            if marker.exists():
                self._restarts += 1
                where = f" in pod {self.pod}" if self.pod else ""
                self._last_restart = f"front agent{where} exited and was started again at {now()}"
                log.warning("front of %s/%s: %s", self.namespace, self.shard, self._last_restart)
            else:
                marker.parent.mkdir(parents=True, exist_ok=True)
                marker.touch()
        except OSError as exc:
            self._problem(f"cannot keep the start marker {marker}: {_short(exc)}")

    async def _forget_gone_pods(self) -> None:
        """Remove the state dirs of this front's pods that no longer exist (each pod has its own)."""
        if self.pod is None:
            return
        pods = await self._front_pods()
        if pods is None:
            return
        live = set(pods)
        prefix = f"{front_name(self.shard)}-"
        for entry in self.state_dir.parent.iterdir():
            if entry.is_dir() and entry.name.startswith(prefix) and entry.name not in live | {self.pod}:
                shutil.rmtree(entry, ignore_errors=True)

    async def _front_pods(self) -> dict[str, str] | None:
        """This shard's front pods: name -> phase; None (logged) when they cannot be listed."""
        selector = component_selector(self.shard, "front")
        try:
            pods = (await self.api.list(PODS, self.namespace, label_selector=selector)).get("items") or []
        except _TRANSIENT as exc:
            self._problem(f"cannot list the front's pods: {_short(exc)}")
            return None
        return {str(p["metadata"]["name"]): str((p.get("status") or {}).get("phase")) for p in pods}

    def _serves_desired(self, running: list[int], front_status: dict[str, Any]) -> bool:
        """Every member runs and serves the desired backend (a new shard, with none yet: listens)."""
        if len(running) < self.pair:
            return False
        desired = self._desired(front_status)
        return desired is None or all(self._applied.get(index) == desired for index in running)

    def _mark_ready(self, ready: bool) -> None:
        if ready == self._ready:
            return
        try:
            if ready:
                self.ready_file.parent.mkdir(parents=True, exist_ok=True)
                self.ready_file.touch()
            else:
                self.ready_file.unlink(missing_ok=True)
        except OSError as exc:
            self._problem(f"cannot mark the front ready in {self.ready_file}: {_short(exc)}")
            return
        self._ready = ready

    async def _replaced_front(self) -> list[str]:
        """Other running pods of this shard's front: while the Deployment replaces this front, the old pod
        holds the port, and the new one shares it (SO_REUSEPORT) rather than waiting for it to go."""
        if self.pod is None:
            return []
        pods = await self._front_pods()
        if pods is None:
            return []
        return [name for name, phase in pods.items() if name != self.pod and phase == "Running"]

    async def _apply(self, running: list[int], backend: tuple[str, int]) -> None:
        """Point every running member at `backend` (each that does not serve it yet)."""
        for index in running:
            if self._applied.get(index) != backend:
                await self.members[index].set_backend(*backend)
                self._applied[index] = backend

    async def _serving_patch(self, running: list[int], front_status: dict[str, Any]) -> dict[str, Any]:
        """Apply the desired backend and drain; the status keys that differ from what HAProxy does."""
        patch: dict[str, Any] = {}
        desired = self._desired(front_status)
        if desired is not None:
            await self._apply(running, desired)
            if desired != self._target:
                log.info("new connections now go to slot %s (port %s)", *desired)
            self._target = desired
        # Confirmed only when every running member serves the same backend.
        applied = {self._applied.get(index) for index in running}
        serving = applied.pop() if len(applied) == 1 else None
        if serving is not None:
            observed = (front_status.get("observedBackend"), front_status.get("observedPort"))
            if observed != serving:
                patch.update(observedBackend=serving[0], observedPort=serving[1], observedAt=now())
        if self._announce:
            # The operator waits for a listening front before it starts a new shard's first slot.
            patch["observedAt"] = now()

        connections = await self._connections(running)
        drain = front_status.get("drain")
        if drain in SLOTS and connections.get(drain, 0) > 0:
            if desired is not None and drain == desired[0]:
                self._warn_once(f"not draining slot {drain}: it is the desired backend")
            else:
                closed = sum([await self.members[index].drain(drain) for index in running])
                log.info("drained slot %s: closed %d connection(s)", drain, closed)
                connections = await self._connections(running)
        if connections != self._reported_connections:
            patch["connections"] = connections
        return patch

    def _new_members(self, front: FrontSpec) -> list[HAProxy]:
        return [
            HAProxy(self.state_dir / f"haproxy-{index}", front.address, front.port, self.binary)
            for index in range(self.pair)
        ]

    async def _connections(self, running: list[int]) -> dict[str, int]:
        counts = {slot: 0 for slot in SLOTS}
        for index in running:
            for slot, count in (await self.members[index].connections()).items():
                counts[slot] += count
        return counts

    async def _ensure_haproxy(self) -> list[int]:
        """The running members, each (re)started when it died or spec.front moved them; [] while none can."""
        front = self._front_spec()
        first = self.members[0]
        if front is not None and (front.address, front.port) != (first.bind_address, first.bind_port):
            log.info("spec.front moved to %s:%s; restarting haproxy", front.address, front.port)
            for member in self.members:
                await member.stop()
            self.members = self._new_members(front)
            self._serving, self._applied, self._start_failures, self._next_start = set(), {}, 0, 0.0
        for index in sorted(self._serving):
            member = self.members[index]
            if member.alive:
                continue
            # Died under us (killed, crashed): count it, and start it again at once with the backend.
            self._serving.discard(index)
            self._applied.pop(index, None)
            self._restarts += 1
            self._last_restart = (
                f"haproxy-{index} {member.describe_exit().removeprefix('haproxy ')} at {now()}"
            )
            log.warning("front of %s/%s: %s; restarting it", self.namespace, self.shard, self._last_restart)
            self._start_failures, self._next_start = 0, 0.0
            if not self._serving:  # nothing listens until it is back: say so first
                self._set_error(f"{member.describe_exit()}; restarting it")
                await self._report_error()
        if asyncio.get_running_loop().time() >= self._next_start:
            await self._start_members()
        return sorted(self._serving)

    async def _start_members(self) -> None:
        for index, member in enumerate(self.members):
            if index in self._serving:
                continue
            try:
                if not self._serving:
                    # None of ours holds the port, so nobody else may, but the front pod this one replaces.
                    await self._check_port(member)
                await member.start(backend=self._target)
            except HAProxyBindError as exc:
                self._start_failed(exc.message(self._node()))
                return
            except HAProxyError as exc:
                self._start_failed(str(exc))
                return
            except OSError as exc:  # state dir or config not writable, binary not executable
                self._start_failed(f"cannot start haproxy: {_short(exc)}")
                return
            if not self._serving:
                self._reported_connections = None
                self._announce = True
            self._serving.add(index)
            self._applied[index] = self._target  # started pointing at it
            self._start_failures = 0
            self._set_error(None)

    async def _check_port(self, member: HAProxy) -> None:
        try:
            check_bindable(member.bind_address, member.bind_port)
        except HAProxyBindError as exc:
            if exc.code != errno.EADDRINUSE:
                raise
            holders = await self._replaced_front()
            if not holders:
                raise
            self._warn_once(
                f"sharing the front port with pod {', '.join(holders)} of this front, being replaced"
            )

    def _died(self) -> bool:
        """A member was serving and has exited since (not yet noticed by ``_ensure_haproxy``)."""
        return any(not self.members[index].alive for index in self._serving)

    def _start_failed(self, message: str) -> None:
        if self._serving:
            # The other member serves: the front works, only its spare is missing.
            self._problem(f"front of {self.namespace}/{self.shard}: a second haproxy cannot start: {message}")
        else:
            self._set_error(message)
        self._start_failures += 1
        first, cap = self.start_backoff
        delay = min(cap, first * 2 ** min(self._start_failures - 1, 10))
        self._next_start = asyncio.get_running_loop().time() + delay

    def _set_error(self, message: str | None) -> None:
        """What status.front.error will say; logged when it changes, so a retried failure logs once."""
        if message == self._error:
            return
        if message is not None:
            log.warning("front of %s/%s cannot serve: %s", self.namespace, self.shard, message)
        else:
            log.info("front of %s/%s serves again (was: %s)", self.namespace, self.shard, self._error)
        self._error = message

    async def _report_error(self) -> None:
        """Best effort, now: a restart of HAProxy must not wait for an API server that is away."""
        if self._obj is None:
            return
        try:
            self._obj = await self.api.patch(
                KCPSHARDS,
                self.namespace,
                self.shard,
                {"status": {"front": {"error": self._error}}},
                subresource="status",
            )
        except _TRANSIENT as exc:
            self._problem(f"cannot report the front's error: {_short(exc)}")

    def _node(self) -> str:
        """The node named in messages: the shard's spec.node, which is where this agent runs."""
        node = ((self._obj or {}).get("spec") or {}).get("node")
        return str(node) if node else os.environ.get("NODE_NAME") or socket.gethostname()

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


def _is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


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
    pod = os.environ.get("POD_NAME") or None
    if pod is not None:
        # A folder per pod: a replacement front runs beside the one it replaces.
        state_dir = state_dir / pod
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    agent = FrontAgent(
        api,
        namespace,
        args.shard,
        state_dir,
        binary=args.haproxy,
        report_interval=args.report_interval,
        pod=pod,
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
