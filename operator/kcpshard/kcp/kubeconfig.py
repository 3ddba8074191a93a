"""Credentials from kcp's `admin.kubeconfig`.

kcp writes the file in `pkg/server/options/authentication.go` (`createKubeConfig`): users `kcp-admin`
(a new token on every start) and `shard-admin` (persistent; its SHA-256 is `.admin-token-store`);
clusters `root` (`<base>/clusters/root`), `base` (`<base>`) and, in newer releases, `system:admin`
(`<base>/clusters/system:admin`); contexts `root` and `base` use kcp-admin, `system:admin` and
`shard-base` use shard-admin (older releases: only `system:admin`, on cluster `base`). `<base>` is
`https://` + the external address, which is the host of `--shard-base-url` when given.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml

from kcpshard.kcp.errors import KcpError

SHARD_ADMIN_USER = "shard-admin"
KCP_ADMIN_USER = "kcp-admin"
# Preferred first: shard-base names the base URL in every release that has it.
SHARD_ADMIN_CONTEXTS = ("shard-base", "system:admin")
KCP_ADMIN_CONTEXTS = ("root", "base")
FILE = "admin.kubeconfig"


class KubeconfigError(KcpError):
    """admin.kubeconfig is missing a part or malformed (the message never holds a token)."""


@dataclass(frozen=True)
class ShardAdmin:
    """The shard-admin credentials: base server URL (no /clusters path), CA bundle, bearer token."""

    server: str
    ca_pem: bytes
    token: str

    def __repr__(self) -> str:
        return f"ShardAdmin(server={self.server!r}, ca_pem=<{len(self.ca_pem)} bytes>, token=<hidden>)"

    __str__ = __repr__


def _load(text: str | bytes) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        # The YAML error quotes the offending text, which may be a token: keep only the position.
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise KubeconfigError(f"admin.kubeconfig is not valid YAML{where}") from None
    if not isinstance(doc, dict):
        raise KubeconfigError("admin.kubeconfig is not a kubeconfig mapping")
    return doc


def _named(doc: dict[str, Any], section: str, name: str) -> dict[str, Any] | None:
    for item in doc.get(section) or []:
        if isinstance(item, dict) and item.get("name") == name:
            body = item.get(section[:-1] if section != "users" else "user")
            return body if isinstance(body, dict) else None
    return None


def _cluster_of(doc: dict[str, Any], ctx_name: str, ctx: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    name = str(ctx.get("cluster", ""))
    cluster = _named(doc, "clusters", name)
    if cluster is None or not cluster.get("server"):
        raise KubeconfigError(f"{FILE} context {ctx_name!r} names a missing cluster {name!r}")
    return name, cluster


def base_url(server: str) -> str:
    """`https://h:p/clusters/root` -> `https://h:p` (kcp's cluster paths are not part of the base)."""
    parts = urlsplit(server)
    path = parts.path
    idx = path.find("/clusters/")
    if idx >= 0:
        path = path[:idx]
    return urlunsplit((parts.scheme, parts.netloc, path.rstrip("/"), "", ""))


def _ca(cluster: dict[str, Any], name: str) -> bytes:
    data = cluster.get("certificate-authority-data")
    if not data:
        raise KubeconfigError(f"admin.kubeconfig cluster {name!r} has no certificate-authority-data")
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise KubeconfigError(f"{FILE} cluster {name!r} has invalid certificate-authority-data") from None


def shard_admin(text: str | bytes) -> ShardAdmin:
    """The shard-admin credentials from the first shard-admin context (`shard-base`, else `system:admin`)."""
    doc = _load(text)
    for ctx_name in SHARD_ADMIN_CONTEXTS:
        ctx = _named(doc, "contexts", ctx_name)
        if ctx is None:
            continue
        if ctx.get("user") != SHARD_ADMIN_USER:
            raise KubeconfigError(f"{FILE} context {ctx_name!r} does not use user {SHARD_ADMIN_USER}")
        cluster_name, cluster = _cluster_of(doc, ctx_name, ctx)
        user = _named(doc, "users", SHARD_ADMIN_USER)
        token = user.get("token") if user else None
        if not token:
            raise KubeconfigError(f"admin.kubeconfig user {SHARD_ADMIN_USER} has no token")
        return ShardAdmin(base_url(str(cluster["server"])), _ca(cluster, cluster_name), str(token))
    raise KubeconfigError(
        f"admin.kubeconfig has no shard-admin context (looked for {', '.join(SHARD_ADMIN_CONTEXTS)})"
    )


def kcp_admin_kubeconfig(text: str | bytes, server: str | None = None) -> str:
    """A kubeconfig with only the kcp-admin user and its contexts (`root`, `base`), for publishing.

    The shard-admin user (system:masters-like) is left out. `server` replaces the base URL (keeping the
    `/clusters/...` path), e.g. to name the front; by default the file's own URLs are kept, which already
    name `--shard-base-url`. The kcp-admin token is new on every kcp start: publish again after a flip.
    """
    doc = _load(text)
    user = _named(doc, "users", KCP_ADMIN_USER)
    if not user or not user.get("token"):
        raise KubeconfigError(f"admin.kubeconfig user {KCP_ADMIN_USER} has no token")
    contexts: list[dict[str, Any]] = []
    clusters: list[dict[str, Any]] = []
    for ctx_name in KCP_ADMIN_CONTEXTS:
        ctx = _named(doc, "contexts", ctx_name)
        if ctx is None or ctx.get("user") != KCP_ADMIN_USER:
            continue
        cluster_name, cluster = _cluster_of(doc, ctx_name, ctx)
        url = str(cluster["server"])
        if server is not None:
            suffix = url[len(base_url(url)) :]
            url = server.rstrip("/") + suffix
        if all(c["name"] != cluster_name for c in clusters):
            clusters.append({"name": cluster_name, "cluster": {**cluster, "server": url}})
        contexts.append({"name": ctx_name, "context": {"cluster": cluster_name, "user": KCP_ADMIN_USER}})
    if not contexts:
        raise KubeconfigError(f"admin.kubeconfig has no {KCP_ADMIN_USER} context (root or base)")
    out = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": clusters,
        "users": [{"name": KCP_ADMIN_USER, "user": {"token": str(user["token"])}}],
        "contexts": contexts,
        "current-context": contexts[0]["name"],
        "preferences": {},
    }
    return yaml.safe_dump(out, sort_keys=False)
