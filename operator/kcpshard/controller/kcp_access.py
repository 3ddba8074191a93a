"""Reaching kcp through the shard's front, as shard-admin (credentials from the shared-material Secret)."""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kcpshard.k8s import names
from kcpshard.k8s.api import SECRETS, ApiClient
from kcpshard.kcp.client import KcpClient
from kcpshard.kcp.kubeconfig import shard_admin
from kcpshard.roll.observed import LeaseReading

# A kcp client for the front at a URL (tests pass a fake).
KcpConnect = Callable[[str], Awaitable[KcpClient]]


class NoRootMaterial(Exception):
    """The shard's Secret holds no admin.kubeconfig yet: its first slot has not uploaded it."""


def connector(api: ApiClient, namespace: str, shard: str) -> KcpConnect:
    async def connect(url: str) -> KcpClient:
        name = names.shared_secret_name(shard)
        secret = await api.get(SECRETS, namespace, name)
        raw = (secret.get("data") or {}).get("admin.kubeconfig")
        if not raw:
            raise NoRootMaterial(f"Secret {name} has no admin.kubeconfig")
        admin = shard_admin(base64.b64decode(raw))
        return KcpClient(url, admin.ca_pem, admin.token)

    return connect


def lease_reading(lease: Mapping[str, Any] | None) -> LeaseReading:
    """kcp's controller lease (None: there is none) as the plan reads it."""
    if lease is None:
        return LeaseReading(found=False)
    spec = lease.get("spec") or {}
    return LeaseReading(
        found=True,
        holder=spec.get("holderIdentity") or None,
        renew_time=spec.get("renewTime"),
        acquire_time=spec.get("acquireTime"),
    )
