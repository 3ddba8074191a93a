"""What every handler works with: the API client, the shard it acts for, and the way to kcp."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kcpshard.controller.config import OperatorConfig
from kcpshard.controller.kcp_access import KcpConnect
from kcpshard.k8s.api import ApiClient, ApiError, ResourceRef

Logger = logging.Logger | logging.LoggerAdapter[logging.Logger]


@dataclass(frozen=True)
class ActContext:
    api: ApiClient
    namespace: str
    shard: str
    config: OperatorConfig
    kcp: KcpConnect
    logger: Logger
    # The way to another KcpShard's kcp (a non-root shard's probe goes through its root shard).
    kcp_of: Callable[[str], KcpConnect] | None = None


async def create_once(ctx: ActContext, ref: ResourceRef, body: Mapping[str, Any]) -> None:
    """Create an object; one that exists already (an earlier round made it) is fine."""
    try:
        await ctx.api.create(ref, ctx.namespace, body)
    except ApiError as exc:
        if exc.status != 409:
            raise
