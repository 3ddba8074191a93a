"""ServiceAccount identities on the real API server: TokenRequest, and kubeconfig files that carry them.

A token comes from `POST .../serviceaccounts/<name>/token` (`authentication.k8s.io/v1` TokenRequest), as
`kubectl create token` and the kubelet get theirs; a pod's token is bound to the pod (`boundObjectRef`
kind Pod), so the API server refuses it once the pod is gone. The kubeconfig names the token by
`tokenFile`, which kubectl and `kcpshard.k8s.credentials` read again (at most once a minute, and after a
401), so rewriting the token file rotates the credential under a running process. Both files are 0600;
the token is never logged.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kcpshard.k8s.api import ApiClient, ResourceRef
from kcpshard.k8s.credentials import Credentials
from kcpshard_testkit.pki import write_private
from kcpshard_testkit.tls import write_kubeconfig

log = logging.getLogger(__name__)

# Only the test stack mints tokens (as a kubelet does); the product never touches ServiceAccounts.
SERVICEACCOUNTS = ResourceRef("", "v1", "serviceaccounts")

TOKEN_SECONDS = 3600  # a kubelet asks for an hour and renews at 80 %
RENEW_AT = 0.8
RENEW_RETRY_SECONDS = 10.0


@dataclass(frozen=True)
class Token:
    value: str
    seconds: int  # lifetime the server granted


async def request_token(
    api: ApiClient,
    namespace: str,
    service_account: str,
    *,
    seconds: int = TOKEN_SECONDS,
    bound_pod: Mapping[str, Any] | None = None,
) -> Token:
    """A token for `namespace/service_account`, bound to `bound_pod` when given."""
    spec: dict[str, Any] = {"expirationSeconds": seconds}
    if bound_pod is not None:
        meta = bound_pod.get("metadata") or {}
        spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    path = SERVICEACCOUNTS.path(namespace, service_account, "token")
    answer = await api.request("POST", path, body=body)
    status, granted = answer.get("status") or {}, answer.get("spec") or {}
    return Token(str(status["token"]), int(granted.get("expirationSeconds") or seconds))


def ca_pem(credentials: Credentials) -> bytes:
    if credentials.ca_data is not None:
        return credentials.ca_data
    raise ValueError(f"the connection to {credentials.server} names no CA")


def write_token(directory: Path, token: Token) -> Path:
    """Write (or rotate) `directory/token`, 0600, atomically: a reader sees the old or the new token."""
    path = directory / "token"
    tmp = directory / ".token.tmp"
    write_private(tmp, token.value.encode())
    os.replace(tmp, path)
    return path


def write_token_kubeconfig(directory: Path, server: str, ca: bytes, token: Token, namespace: str) -> Path:
    """`directory/kubeconfig` naming `directory/token` (both 0600); returns the kubeconfig's path."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    token_path = write_token(directory, token)
    ca_path = directory / "ca.crt"
    ca_path.write_bytes(ca)
    kubeconfig = directory / "kubeconfig"
    write_kubeconfig(kubeconfig, server, ca_path, namespace=namespace, user={"tokenFile": str(token_path)})
    return kubeconfig


async def keep_fresh(directory: Path, token: Token, renew: Callable[[], Awaitable[Token]], what: str) -> None:
    """Rewrite `directory/token` with a new token at 80 % of each one's life (until cancelled)."""
    delay = token.seconds * RENEW_AT
    while True:
        await asyncio.sleep(delay)
        try:
            token = await renew()
        except Exception as exc:  # keep the old token and try again soon; the error names no secret
            log.warning("%s: token renewal failed (retrying): %s", what, exc)
            delay = RENEW_RETRY_SECONDS
            continue
        write_token(directory, token)
        delay = token.seconds * RENEW_AT
