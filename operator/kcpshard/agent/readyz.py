"""A slot's own `/readyz`, polled by its host agent on 127.0.0.1.

kcp serves `/readyz` anonymously (k8s.io/apiserver `pkg/server/healthz`): 200 `ok` when ready, 500 with
one `[+]name ok` / `[-]name failed: reason withheld` line per check otherwise.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

import httpx


@dataclass(frozen=True)
class Readyz:
    ok: bool
    detail: str  # the first `[-]` line, or what went wrong; never a body with secrets (readyz has none)


def client_for(ca_pem: str, timeout: float = 2.0) -> httpx.AsyncClient:
    """An httpx client that trusts only the shard's CA.

    The hostname is not checked: the serving cert names the shard's URLs (the front), not 127.0.0.1, and the
    CA is generated per shard, so a chain that verifies against it already proves which server answers.
    """
    ctx = ssl.create_default_context(cadata=ca_pem)
    ctx.check_hostname = False
    return httpx.AsyncClient(verify=ctx, timeout=httpx.Timeout(timeout))


def first_failed_check(body: str) -> str | None:
    for line in body.splitlines():
        if line.startswith("[-]"):
            return line.strip()[:300]
    return None


async def probe(client: httpx.AsyncClient, port: int) -> Readyz:
    try:
        resp = await client.get(f"https://127.0.0.1:{port}/readyz")
    except httpx.HTTPError as exc:
        return Readyz(False, f"readyz on 127.0.0.1:{port} did not answer: {type(exc).__name__}")
    if resp.status_code == 200:
        return Readyz(True, "ok")
    failed = first_failed_check(resp.text)
    return Readyz(False, failed or f"readyz on 127.0.0.1:{port} answered HTTP {resp.status_code}")
