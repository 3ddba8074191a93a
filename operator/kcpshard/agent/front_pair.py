"""The front's HAProxy processes: two on one port (SO_REUSEPORT), so one dying loses only the connections
it held, never a new one. A member that died is counted as a restart and started again at once, already
pointed at the current backend; one that cannot start is tried again with backoff, and while none
listens the front says why (`status.front.error`). Like the kubelet's CrashLoopBackOff
(`pkg/kubelet/kuberuntime`), but inside the pod, so the desired backend is back within a second.
"""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from kcpshard import retry
from kcpshard.agent.front_address import FrontAddress
from kcpshard.agent.front_status import Backend
from kcpshard.agent.haproxy import HAProxy, check_bindable
from kcpshard.agent.haproxy_config import SLOTS, HAProxyBindError, HAProxyError
from kcpshard.agent.lognotes import Notes, short
from kcpshard.api.conditions import now

log = logging.getLogger("kcpshard.agent.front")


class HAProxyPair:
    def __init__(
        self,
        state_dir: Path,
        binary: str | None,
        *,
        size: int,
        start_backoff: retry.Backoff,
        where: str,
        notes: Notes,
        others: Callable[[], Awaitable[list[str]]],
        node: Callable[[], str],
        on_down: Callable[[], Awaitable[None]],
    ) -> None:
        self.state_dir = state_dir
        self.binary = binary
        self.size = size
        self.start_backoff = start_backoff
        self.where = where  # namespace/shard, for the logs
        self.notes = notes
        self.others = others  # other running pods of this front: the one being replaced shares the port
        self.node = node
        self.on_down = on_down  # told at once when nothing listens any more
        self.members: list[HAProxy] = []
        # The backend each running member serves, by its index in `members`.
        self.applied: dict[int, Backend | None] = {}
        self.serving: set[int] = set()  # members started by us and not seen dead since
        self.target: Backend | None = None  # the desired backend: members start with it and keep it
        self.error: str | None = None  # what status.front.error should say: None while HAProxy serves
        # Members seen dead and started again (status.front.restarts), counted on from the status.
        self.restarts = 0
        self.last_restart: str | None = None
        self.announce = False  # a freshly started HAProxy: report observedAt even without a backend
        self.reported_connections: dict[str, int] | None = None
        self.connections_reported_at = 0.0  # loop time of that report
        self._start_failures = 0
        self._next_start = 0.0  # loop time of the next start attempt

    def start_with(self, front: FrontAddress) -> None:
        self.members = [
            HAProxy(self.state_dir / f"haproxy-{index}", front.address, front.port, self.binary)
            for index in range(self.size)
        ]

    def running(self) -> list[int]:
        return sorted(self.serving)

    def died(self) -> bool:
        """A member was serving and has exited since (not yet noticed by `ensure`)."""
        return any(not self.members[index].alive for index in self.serving)

    def until_next_start(self) -> float | None:
        """Seconds until the next start attempt while a member is missing; None when all run."""
        if len(self.serving) >= self.size:
            return None
        return max(self._next_start - asyncio.get_running_loop().time(), 0.0)

    async def ensure(self, front: FrontAddress | None) -> list[int]:
        """The running members, each (re)started when it died or spec.front moved them; [] while none can."""
        first = self.members[0]
        if front is not None and (front.address, front.port) != (first.bind_address, first.bind_port):
            log.info("spec.front moved to %s:%s; restarting haproxy", front.address, front.port)
            for member in self.members:
                await member.stop()
            self.start_with(front)
            self.serving, self.applied, self._start_failures, self._next_start = set(), {}, 0, 0.0
        for index in sorted(self.serving):
            member = self.members[index]
            if member.alive:
                continue
            # Died under us (killed, crashed): count it, and start it again at once with the backend.
            self.serving.discard(index)
            self.applied.pop(index, None)
            self.restarts += 1
            self.last_restart = (
                f"haproxy-{index} {member.describe_exit().removeprefix('haproxy ')} at {now()}"
            )
            log.warning("front of %s: %s; restarting it", self.where, self.last_restart)
            self._start_failures, self._next_start = 0, 0.0
            if not self.serving:  # nothing listens until it is back: say so first
                self.set_error(f"{member.describe_exit()}; restarting it")
                await self.on_down()
        if asyncio.get_running_loop().time() >= self._next_start:
            await self._start_members()
        return self.running()

    async def _start_members(self) -> None:
        for index, member in enumerate(self.members):
            if index in self.serving:
                continue
            try:
                if not self.serving:
                    # None of ours holds the port, so nobody else may, but the front pod this one replaces.
                    await self._check_port(member)
                await member.start(backend=self.target)
            except HAProxyBindError as exc:
                self._start_failed(exc.message(self.node()))
                return
            except HAProxyError as exc:
                self._start_failed(str(exc))
                return
            except OSError as exc:  # state dir or config not writable, binary not executable
                self._start_failed(f"cannot start haproxy: {short(exc)}")
                return
            if not self.serving:
                self.reported_connections = None
                self.announce = True
            self.serving.add(index)
            self.applied[index] = self.target  # started pointing at it
            self._start_failures = 0
            self.set_error(None)

    async def _check_port(self, member: HAProxy) -> None:
        try:
            check_bindable(member.bind_address, member.bind_port)
        except HAProxyBindError as exc:
            if exc.code != errno.EADDRINUSE:
                raise
            holders = await self.others()
            if not holders:
                raise
            self.notes.warn_once(
                f"sharing the front port with pod {', '.join(holders)} of this front, being replaced"
            )

    def _start_failed(self, message: str) -> None:
        if self.serving:
            # The other member serves: the front works, only its spare is missing.
            self.notes.problem(f"front of {self.where}: a second haproxy cannot start: {message}")
        else:
            self.set_error(message)
        self._start_failures += 1
        self._next_start = asyncio.get_running_loop().time() + self.start_backoff.delay(self._start_failures)

    def set_error(self, message: str | None) -> None:
        """What status.front.error will say; logged when it changes, so a retried failure logs once."""
        if message == self.error:
            return
        if message is not None:
            log.warning("front of %s cannot serve: %s", self.where, message)
        else:
            log.info("front of %s serves again (was: %s)", self.where, self.error)
        self.error = message

    async def apply(self, running: list[int], backend: Backend) -> None:
        """Point every running member at `backend` (each that does not serve it yet)."""
        for index in running:
            if self.applied.get(index) != backend:
                await self.members[index].set_backend(*backend)
                self.applied[index] = backend

    async def connections(self, running: list[int]) -> dict[str, int]:
        counts = {slot: 0 for slot in SLOTS}
        for index in running:
            for slot, count in (await self.members[index].connections()).items():
                counts[slot] += count
        return counts

    async def drain(self, running: list[int], slot: str) -> int:
        """Close `slot`'s connections on every running member; how many were open."""
        return sum([await self.members[index].drain(slot) for index in running])

    async def soft_stop(self, grace: float) -> None:
        await asyncio.gather(*(member.soft_stop(grace) for member in self.members))
