"""The front's HAProxys as containers of their own in the front pod (haproxy_member.py): the agent writes
their configs and drives them through their runtime sockets, but neither starts nor stops them; the
kubelet does. So they serve on while the agent is dead or starting again, and a new agent takes them
over as they are.

A member runs while its runtime socket answers. One that stops answering is counted as a restart (the
kubelet starts it again, and it reads the config the agent keeps pointed at the desired backend). The
port, the backend switch, the connection counts and the drain are the pair's (front_pair.py).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from kcpshard.agent.front_address import FrontAddress
from kcpshard.agent.front_pair import HAProxyPair
from kcpshard.agent.haproxy import HAProxy, check_bindable
from kcpshard.agent.haproxy_config import HAProxyBindError, HAProxyError
from kcpshard.agent.haproxy_member import member_dir, pid_path, release_path
from kcpshard.api.conditions import now

log = logging.getLogger("kcpshard.agent.front")

# While a member is missing, how often its socket is tried: a started container serves within this.
POLL_SECONDS = 0.2
# Silence of every member this long at the start is worth a reason in status.front.error.
SILENT_SECONDS = 10.0
_NOT_WRITTEN = ("", 0)  # no backend is this: the configs are written on the first pass


class HAProxyContainers(HAProxyPair):
    """The pair's interface over members that the kubelet runs (`members_dir`: the pod's shared folder)."""

    def start_with(self, front: FrontAddress) -> None:
        self.members = [
            HAProxy(member_dir(self.state_dir, index), front.address, front.port)
            for index in range(self.size)
        ]
        self._written: tuple[str, int] | None = _NOT_WRITTEN
        self._started: dict[int, int | None] = {}  # each member's start, as its pid file's mtime
        self._silent_since: float | None = asyncio.get_running_loop().time()
        # An agent (re)starting serves a pod that is not stopping: a release left by an earlier agent
        # of this pod (one that crashed) must not let the members stop at the pod's deletion unheld.
        release_path(self.state_dir).unlink(missing_ok=True)

    def died(self) -> bool:
        return False  # seen by polling their sockets, not by waiting on a process

    def until_next_start(self) -> float | None:
        return None if len(self.serving) >= self.size else POLL_SECONDS

    async def ensure(self, front: FrontAddress | None) -> list[int]:
        first = self.members[0]
        if front is not None and (front.address, front.port) != (first.bind_address, first.bind_port):
            # The Deployment's template names the address (builders), so a new pod comes for it.
            self.notes.warn_once(
                f"spec.front moved to {front.address}:{front.port}: this pod serves "
                f"{first.bind_address}:{first.bind_port} until its Deployment replaces it"
            )
        if self._written != self.target:
            # First, so a member the kubelet starts again from here on serves the desired backend.
            for member in self.members:
                member.write_config(self.target)
            self._written = self.target
        for index, member in enumerate(self.members):
            try:
                backend = await member.current_backend()
            except HAProxyError:
                await self._lost(index)
                continue
            started = _started(self.state_dir, index)
            if index in self.serving and started != self._started.get(index):
                # Killed and started again by the kubelet between two passes: count it all the same.
                self._count_restart(index, "was started again")
                self.serving.discard(index)
            if index not in self.serving:
                self._started[index] = started
                if not self.serving:
                    self.reported_connections = None
                    self.announce = True
                log.info("front of %s: haproxy-%d answers, serving %s", self.where, index, backend)
                self.serving.add(index)
                self.applied[index] = backend
        if self.serving:
            self._silent_since = None
            self.set_error(None)
        else:
            self._explain_silence()
        return self.running()

    async def _lost(self, index: int) -> None:
        if index not in self.serving:
            return
        self.serving.discard(index)
        self.applied.pop(index, None)
        self._count_restart(index, "stopped answering on its runtime socket")
        if not self.serving:
            self._silent_since = asyncio.get_running_loop().time()
            self.set_error(f"no HAProxy of the pod answers (haproxy-{index} stopped last); starting again")
            await self.on_down()

    def _count_restart(self, index: int, how: str) -> None:
        self.restarts += 1
        self.last_restart = f"haproxy-{index} {how} at {now()}"
        log.warning("front of %s: %s; the kubelet starts its container again", self.where, self.last_restart)

    def _explain_silence(self) -> None:
        since = self._silent_since
        if since is None or asyncio.get_running_loop().time() - since < SILENT_SECONDS:
            return
        first = self.members[0]
        try:
            check_bindable(first.bind_address, first.bind_port)
        except HAProxyBindError as exc:
            self.set_error(exc.message(self.node()))
            return
        self.set_error(
            f"the HAProxy containers have not answered for {SILENT_SECONDS:.0f}s "
            "(kubectl logs <front pod> -c haproxy-0 says why)"
        )

    async def soft_stop(self, grace: float) -> None:
        """The members stop themselves (their preStop hook) once the agent lets them: now."""
        try:
            release_path(self.state_dir).touch()
        except OSError as exc:
            log.warning("front of %s: cannot release the HAProxy containers: %s", self.where, exc)


def _started(members_dir: Path, index: int) -> int | None:
    """When a member last started: its container writes its pid file at each start (the pid alone
    would not tell, HAProxy is pid 1 of every start of its container)."""
    try:
        return pid_path(members_dir, index).stat().st_mtime_ns
    except OSError:
        return None
