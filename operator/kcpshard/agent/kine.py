"""The slot's kine, when the shard's store is kine: started before kcp, its address read from its own log,
stopped after kcp.

kine (k3s-io/kine) speaks etcd's v3 API in front of a SQL database. Each slot runs its own kine on the
shard's database (kine's own way to scale out, polling the database for changes), so a new slot and the
old one share the data just as two kcps share one etcd. The DSN reaches kine through its environment
(`KINE_ENDPOINT`, from the Job's `secretKeyRef`), never a command line, and kcp's environment drops it.
kine may print the DSN itself (v0.17.5 quotes it whole when it cannot parse it as a URL), so its log is
scrubbed of the DSN and its password before the agent passes a line on or keeps it for a status message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

from kcpshard.agent.child import Child, describe_exit
from kcpshard.kcp.flags import KINE_ENDPOINT_ENV, KINE_URL, kine_args
from kcpshard.timeouts import within

log = logging.getLogger("kcpshard.agent.kine")

# pkg/endpoint/endpoint.go: logrus.Infof("Kine available at %s", ...), the host always 127.0.0.1 for TCP;
# the line may carry colour codes or sit in quotes. The address must end there: a scrubbed line must not
# yield half of one.
AVAILABLE = re.compile(r"Kine available at (http://(?:[0-9.]+|\[[0-9a-fA-F:]+\]):[0-9]+)(?=[\s\x22\x1b]|$)")
STOP_SECONDS = 10.0
HIDDEN = b"[hidden]"
# A password shorter than this is hidden only where it stands as one (URL userinfo, `password=`): hiding
# every "ab" in kine's log would make the log unreadable and protect little.
MIN_HIDDEN = 4
# `scheme://user:PASSWORD@` and `password=PASSWORD` (key-value DSNs, query parameters).
_USERINFO = re.compile(rb"(://[^/\s:@]*:)[^@\s]+@")
_PASSWORD_PARAM = re.compile(rb"((?:^|[^a-z])(?:ssl)?password=)[^&\s'\"]+", re.IGNORECASE)


class KineError(Exception):
    """kine did not start; the message says why (never the DSN)."""


class KineStopped(Exception):
    """A stop came while kine was starting: kine is stopped, nothing failed."""


def dsn_secrets(dsn: str) -> list[bytes]:
    """What of `dsn` a log line must not show: the DSN, and its password as written and decoded; longest
    first, so a password inside the DSN does not break the DSN's own match."""
    found = {dsn}
    try:
        password = urlsplit(dsn).password
    except ValueError:
        password = None
    if password:
        found.update(p for p in (password, unquote(password)) if len(p) >= MIN_HIDDEN)
    return sorted((s.encode() for s in found if s), key=len, reverse=True)


def scrubber(dsn: str) -> Callable[[bytes], bytes]:
    """A line filter that hides `dsn`, its password, and any URL or `password=` credential."""
    secrets = dsn_secrets(dsn)

    def scrub(line: bytes) -> bytes:
        for secret in secrets:
            line = line.replace(secret, HIDDEN)
        line = _USERINFO.sub(rb"\1" + HIDDEN + b"@", line)
        return _PASSWORD_PARAM.sub(rb"\1" + HIDDEN, line)

    return scrub


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
    async def start(cls, binary: str, wait: float, stop: asyncio.Event | None = None) -> Kine:
        """Start kine and wait up to `wait` seconds for its address, or until `stop` is set.

        Raises KineError, or KineStopped (kine stopped) when `stop` came first."""
        dsn = os.environ.get(KINE_ENDPOINT_ENV)
        if not dsn:
            raise KineError(
                f"{KINE_ENDPOINT_ENV} is not set: the Job passes it from store.kine.endpointSecretRef"
            )
        address: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        def seen(line: str) -> None:
            found = AVAILABLE.search(line)
            if found and not address.done():
                address.set_result(found.group(1))

        try:
            child = await Child.start([binary, *kine_args()], on_line=seen, tail_lines=3, scrub=scrubber(dsn))
        except OSError as exc:
            raise KineError(f"cannot start kine ({binary}): {exc.strerror or exc}") from None
        outcome = await _first(address, child, wait, stop or asyncio.Event())
        if outcome == "listening":
            log.info("kine (pid %d) listens at %s", child.pid, address.result())
            return cls(child, address.result())
        if outcome == "stopped":
            await cls(child, "").stop()
            raise KineStopped()
        if outcome == "waited":
            child.kill_group()
            await child.wait()
            why = f"kine did not say where it listens within {wait:g}s"
        else:
            why = f"kine ended ({describe_exit(child.proc.returncode or 0)}) before it said where it listens"
        await child.drained()
        tail = " | ".join(child.tail())
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
            await within(self.child.wait(), STOP_SECONDS)
        except TimeoutError:
            self.child.kill_group()
            await self.child.wait()
        with contextlib.suppress(Exception):
            await self.child.drained()


async def _first(address: asyncio.Future[str], child: Child, wait: float, stop: asyncio.Event) -> str:
    """What came first while kine starts: "listening", "exited", "stopped", or "waited" (the time is up)."""
    exited = asyncio.ensure_future(child.wait())
    stopped = asyncio.ensure_future(stop.wait())
    waits: set[asyncio.Future[Any]] = {address, exited, stopped}
    await asyncio.wait(waits, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
    exited.cancel()
    stopped.cancel()
    if address.done():
        return "listening"
    if child.proc.returncode is not None:
        return "exited"
    return "stopped" if stop.is_set() else "waited"
