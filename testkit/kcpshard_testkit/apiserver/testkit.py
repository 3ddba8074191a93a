"""Small helpers for tests that talk to an EmulatedApiServer: an authenticated client and polling."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import httpx

from kcpshard_testkit import waiting

from .server import EmulatedApiServer


def client(srv: EmulatedApiServer, **kwargs: Any) -> httpx.AsyncClient:
    """An httpx client that trusts the server's CA and sends its bearer token."""
    ctx = ssl.create_default_context(cafile=str(srv.ca_path))
    headers = {"Authorization": f"Bearer {srv.token}", **kwargs.pop("headers", {})}
    return httpx.AsyncClient(base_url=srv.url, verify=ctx, headers=headers, timeout=10.0, **kwargs)


async def wait_for(
    condition: Callable[[], Awaitable[Any]], timeout: float = 10.0, interval: float = 0.05
) -> Any:
    """Poll `condition` until it returns something truthy; fail after `timeout` seconds."""
    return await waiting.wait_for("the condition", condition, timeout=timeout, interval=interval)


async def watch_events(
    api: httpx.AsyncClient, path: str, **params: Any
) -> AsyncGenerator[dict[str, Any], None]:
    """Stream a watch as decoded events (the caller breaks out or the server ends the stream)."""
    async with api.stream("GET", path, params={"watch": "true", **params}, timeout=None) as resp:
        resp.raise_for_status()
        async for line in resp.aiter_lines():
            if line.strip():
                yield json.loads(line)
