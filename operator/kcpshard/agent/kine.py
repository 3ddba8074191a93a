"""The slot's kine, when the shard's store is kine: started before kcp, its address read from its own log,
stopped after kcp.

kine (k3s-io/kine) speaks etcd's v3 API in front of a SQL database. Each slot runs its own kine on the
shard's database (kine's own way to scale out, polling the database for changes), so a new slot and the
old one share the data just as two kcps share one etcd. The DSN reaches kine through its environment
(`KINE_ENDPOINT`, from the Job's `secretKeyRef`), never a command line, and kcp's environment drops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
from collections.abc import Mapping, Sequence

from kcpshard.agent.child import Child, describe_exit
from kcpshard.kcp.flags import KINE_ENDPOINT_ENV, KINE_URL, kine_args

log = logging.getLogger("kcpshard.agent.kine")

# pkg/endpoint/endpoint.go: logrus.Infof("Kine available at %s", ...); the line may carry colour codes.
AVAILABLE = re.compile(r"Kine available at (http://[0-9A-Za-z.:\[\]-]+)")
STOP_SECONDS = 10.0


class KineError(Exception):
    """kine did not start; the message says why (never the DSN)."""


def kcp_command(command: Sequence[str], url: str) -> list[str]:
    """kcp's command line with the address of this slot's kine in place of the builder's placeholder."""
    return [arg.replace(KINE_URL, url) if arg.startswith("--etcd-servers=") else arg for arg in command]


def without_dsn(env: Mapping[str, str]) -> dict[str, str]:
    """An environment for kcp: everything but kine's DSN."""
    return {k: v for k, v in env.items() if k != KINE_ENDPOINT_ENV}


class Kine:
    def __init__(self, child: Child, url: str) -> None:
        self.child = child
        self.url = url

    @classmethod
    async def start(cls, binary: str, wait: float) -> Kine:
        """Start kine and wait up to `wait` seconds for its address. Raises KineError."""
        if not os.environ.get(KINE_ENDPOINT_ENV):
            raise KineError(
                f"{KINE_ENDPOINT_ENV} is not set: the Job passes it from store.kine.endpointSecretRef"
            )
        loop = asyncio.get_running_loop()
        address: asyncio.Future[str] = loop.create_future()

        def seen(line: str) -> None:
            found = AVAILABLE.search(line)
            if found and not address.done():
                address.set_result(found.group(1))

        try:
            child = await Child.start([binary, *kine_args()], on_line=seen, tail_lines=3)
        except OSError as exc:
            raise KineError(f"cannot start kine ({binary}): {exc.strerror or exc}") from None
        exited: asyncio.Future[object] = asyncio.ensure_future(child.wait())
        waits: set[asyncio.Future[object]] = {address, exited}  # type: ignore[arg-type]
        done, _ = await asyncio.wait(waits, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
        if address.done():
            exited.cancel()
            log.info("kine (pid %d) listens at %s", child.pid, address.result())
            return cls(child, address.result())
        if not done:
            child.kill_group()
            await child.wait()
        exited.cancel()
        await child.drained()
        tail = " | ".join(child.tail())
        if done:
            why = f"kine ended ({describe_exit(child.proc.returncode or 0)}) before it said where it listens"
        else:
            why = f"kine did not say where it listens within {wait:g}s"
        raise KineError(why + (f"; last lines: {tail}" if tail else ""))

    async def exited(self) -> str:
        """Wait until kine exits by itself; what ended it, with its last lines."""
        returncode = await self.child.wait()
        await self.child.drained()
        tail = " | ".join(self.child.tail())
        return f"kine ended ({describe_exit(returncode)})" + (f"; last lines: {tail}" if tail else "")

    async def stop(self) -> None:
        """After kcp: SIGTERM, then SIGKILL after STOP_SECONDS."""
        self.child.signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.child.wait(), STOP_SECONDS)
        except TimeoutError:
            self.child.kill_group()
            await self.child.wait()
        with contextlib.suppress(Exception):
            await self.child.drained()
