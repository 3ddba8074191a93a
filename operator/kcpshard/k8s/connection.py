"""The HTTP side of ``Credentials`` for ``ApiClient``: an httpx client per TLS identity, fresh headers.

Before each request a cheap check of the credentials' expiry (a timestamp); once stale they are refreshed
in a thread (an exec plugin runs again, a token file is read again), and once more after a 401, as
client-go's exec authenticator does. A new client certificate needs new connections (the API server checks
a certificate's validity on every request of a kept-alive connection): requests move to a new httpx client
and the old one is closed when its last request or watch ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx

from kcpshard.k8s.credentials import Credentials

log = logging.getLogger(__name__)


class Connection:
    """The current credentials and the httpx client that carries them."""

    def __init__(self, credentials: Credentials, *, timeout: float = 30.0):
        self.credentials = credentials
        self.timeout = httpx.Timeout(timeout)
        self._client = self._connect(credentials)
        self._busy: dict[httpx.AsyncClient, int] = {}
        self._retired: set[httpx.AsyncClient] = set()
        self._refreshing = asyncio.Lock()

    def _connect(self, credentials: Credentials) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=credentials.server,
            verify=credentials.ssl_context(),
            proxy=credentials.proxy_url,
            timeout=self.timeout,
            headers={"Accept": "application/json", "User-Agent": "kcpshard"},
        )

    async def fresh_credentials(self, *, force: bool = False) -> Credentials:
        """The credentials to send now: refreshed first when stale, or when ``force`` (a 401, a re-login)."""
        seen = self.credentials
        if force or seen.stale():
            await self._refresh(seen)
        return self.credentials

    async def _refresh(self, seen: Credentials) -> None:
        async with self._refreshing:
            if self.credentials is not seen:
                return  # another request refreshed them meanwhile
            new = await asyncio.to_thread(seen.refreshed)
            if new.tls_identity() != seen.tls_identity():
                old, self._client = self._client, self._connect(new)
                if self._busy.get(old):
                    self._retired.add(old)
                else:
                    await old.aclose()
            self.credentials = new
            log.debug("credentials refreshed (%s)", new.source)

    @contextlib.asynccontextmanager
    async def session(
        self, *, retry: bool = False
    ) -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, Any]]]:
        """The client and the per-request arguments (Authorization, SNI) for one request or watch;
        ``retry``: the credentials were just refreshed after a 401."""
        creds = self.credentials if retry else await self.fresh_credentials()
        client = self._client
        kwargs: dict[str, Any] = {"headers": {}}
        if creds.authorization:
            kwargs["headers"]["Authorization"] = creds.authorization
        if creds.tls_server_name:
            kwargs["extensions"] = {"sni_hostname": creds.tls_server_name}
        self._busy[client] = self._busy.get(client, 0) + 1
        try:
            yield client, kwargs
        finally:
            self._busy[client] -= 1
            if not self._busy[client]:
                del self._busy[client]
                if client in self._retired:
                    self._retired.discard(client)
                    await client.aclose()

    async def rejected(self, status: int, attempt: int) -> bool:
        """After a 401 on the first attempt: refresh (if the credentials can be) and say to try again."""
        if status != 401 or attempt or self.credentials.reload is None:
            return False
        await self.fresh_credentials(force=True)
        return True

    @property
    def closed(self) -> bool:
        return self._client.is_closed

    async def aclose(self) -> None:
        for client in (*self._retired, self._client):
            await client.aclose()
        self._retired.clear()
