"""Small TCP helpers for process tests: echo backends, a line client, a free port, polling."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

from kcpshard_testkit import waiting

_HANDED_OUT: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port free now, below the kernel's ephemeral range.

    A port from bind(0) lies in the ephemeral range, so any outgoing connection made before the test
    listens on it (the control plane's own, at start-up) may take it as its source port, and the
    listener then fails to bind. Below that range only listeners compete, and those ask for 0.
    """
    low = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(10000, max(low, 10001))
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    with socket.socket() as s:  # a crowded range: fall back to the kernel's choice
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Echo:
    """A TCP server answering each line with ``<name>:<line>``, so a test sees which backend served it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> Echo:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while line := await reader.readline():
                writer.write(self.name.encode() + b":" + line)
                await writer.drain()
        writer.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, port: int) -> Client:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def ask(self, text: str) -> str:
        self.writer.write(text.encode() + b"\n")
        await self.writer.drain()
        return (await asyncio.wait_for(self.reader.readline(), 5)).decode().strip()

    async def closed_by_peer(self) -> bool:
        return await asyncio.wait_for(self.reader.read(), 5) == b""

    def close(self) -> None:
        self.writer.close()


async def eventually(check: Callable[[], Awaitable[bool]], within: float = 15.0) -> None:
    """Poll ``check`` until it is true; fail at the deadline. ``check`` may raise while not yet true."""
    await waiting.wait_for("the condition", check, timeout=within, interval=0.05)
