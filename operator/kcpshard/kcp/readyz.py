"""A slot's own `/readyz` on its bound port: the one readiness check of a single kcp process.

kcp serves `/readyz` anonymously (k8s.io/apiserver `pkg/server/healthz/healthz.go`): 200 `ok` when ready,
500 with one `[+]name ok` / `[-]name failed: reason withheld` line per check otherwise.

TLS trusts only the shard's CA and does not check the hostname: a real kcp's serving cert names the
shard's URLs (the front's hostname), not the loopback address the host agent dials, and the CA is
generated per shard, so a chain that verifies against it already proves which server answers.
Calls through the front (KcpClient) check the hostname too.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

import httpx

_MAX_DETAIL = 300


@dataclass(frozen=True)
class Readyz:
    ok: bool
    detail: str  # "ok", the first `[-]` line, or what went wrong (readyz is anonymous: no secrets in it)


# Longer than kcp's own store checks take to give up: k8s.io/apiserver's `etcd` and `etcd-readiness`
# checks each wait up to 2 s (--etcd-healthcheck-timeout, --etcd-readycheck-timeout) and run one after
# the other, so a store that does not answer shows as `[-]etcd failed`, not as a readyz that timed out.
TIMEOUT_SECONDS = 5.0


def client_for(ca_pem: str | bytes, timeout: float = TIMEOUT_SECONDS) -> httpx.AsyncClient:
    """An httpx client that trusts only `ca_pem` (one CA or a bundle) and skips the hostname check.

    Raises ValueError when `ca_pem` holds no usable certificate.
    """
    text = ca_pem.decode("ascii", errors="replace") if isinstance(ca_pem, bytes) else ca_pem
    try:
        ctx = ssl.create_default_context(cadata=text)
    except (ssl.SSLError, ValueError):
        raise ValueError("the kcp CA is not valid PEM") from None
    ctx.check_hostname = False
    return httpx.AsyncClient(verify=ctx, timeout=httpx.Timeout(timeout))


def first_failed_check(body: str) -> str | None:
    for line in body.splitlines():
        if line.startswith("[-]"):
            return line.strip()[:_MAX_DETAIL]
    return None


async def probe(client: httpx.AsyncClient, port: int, host: str = "127.0.0.1") -> Readyz:
    """One GET of `https://host:port/readyz`; never raises for an unreachable or unready kcp."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        resp = await client.get(f"https://{where}/readyz")
    except httpx.HTTPError as exc:
        # The reason (refused, TLS verification failed, timed out) is what a person needs to act on.
        reason = str(exc).strip() or type(exc).__name__
        return Readyz(False, f"readyz on {where} did not answer: {reason}"[:_MAX_DETAIL])
    if resp.status_code == 200:
        return Readyz(True, "ok")
    failed = first_failed_check(resp.text)
    return Readyz(False, failed or f"readyz on {where} answered HTTP {resp.status_code}")
