"""A front pod deleted or evicted by anyone serves on until another pod of the same front serves.

The Deployment starts a replacement the moment a pod is deleted, but the kubelet sends SIGTERM at the same
moment: a front that closed its listeners then would leave the port empty until the replacement's HAProxy
listens (a container start, seconds on a real node). So on the first SIGTERM the front agent keeps
serving, and following the operator's asks, until another pod of this front is Ready (its readiness says
it serves the desired backend), then stops softly as before. The Deployment's own make-before-break
replacement ends the hold at once: the new pod is Ready before the old one is deleted. No hold when the
pod is not being deleted or the shard is (no replacement will come), on a second SIGTERM, or after
`--hold-seconds` (front_workload.front_deployment sets it, and the pod's grace period around it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kcpshard.api.conditions import is_true
from kcpshard.k8s.api import KCPSHARDS, PODS, ApiClient, NotFound
from kcpshard.k8s.names import component_selector

log = logging.getLogger("kcpshard.agent.front")

POLL_SECONDS = 0.5


def serving_replacement(pods: Iterable[Mapping[str, Any]], me: str) -> str | None:
    """Another pod of the front that is Ready and not being deleted: it serves the desired backend."""
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("name") == me or meta.get("deletionTimestamp"):
            continue
        if is_true((pod.get("status") or {}).get("conditions"), "Ready"):
            return str(meta.get("name"))
    return None


def being_deleted(pods: Iterable[Mapping[str, Any]], me: str) -> bool:
    """This pod is being deleted (or evicted): a replacement comes. A SIGTERM without it (a restart in
    place, a runner or node stopping) brings none, so the front stops at once."""
    return any(
        (pod.get("metadata") or {}).get("name") == me and (pod.get("metadata") or {}).get("deletionTimestamp")
        for pod in pods
    )


def shard_stays(shard: Mapping[str, Any] | None) -> bool:
    """A shard that is there and not being deleted gets its front back: worth holding for."""
    return shard is not None and not (shard.get("metadata") or {}).get("deletionTimestamp")


async def hold_until_replaced(
    api: ApiClient,
    namespace: str,
    shard: str,
    pod: str,
    timeout: float,
    *,
    errors: Callable[[BaseException], bool],
) -> str:
    """Wait until another pod of the front serves; returns why the hold ended (for the log).

    While the API server cannot be read nothing is known, and the front serves on (until the timeout)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            try:
                obj: Mapping[str, Any] | None = await api.get(KCPSHARDS, namespace, shard)
            except NotFound:
                obj = None
            if not shard_stays(obj):
                return f"KcpShard {namespace}/{shard} is being deleted"
            selector = component_selector(shard, "front")
            pods = (await api.list(PODS, namespace, label_selector=selector)).get("items") or []
        except Exception as exc:
            if not errors(exc):
                raise
            log.warning("front of %s/%s: cannot read shard or pods, holding on: %s", namespace, shard, exc)
        else:
            if not being_deleted(pods, pod):
                return f"pod {pod} is not being deleted: no replacement comes"
            other = serving_replacement(pods, pod)
            if other is not None:
                return f"pod {other} serves"
        await asyncio.sleep(POLL_SECONDS)
    return f"no other pod of the front served within {timeout:.0f}s"


async def stop_when_replaced(
    asked: asyncio.Event,
    stop: asyncio.Event,
    hold: Callable[[], Any],
) -> None:
    """After the first SIGTERM (`asked`), hold, then `stop`; a second SIGTERM sets `stop` itself."""
    await asked.wait()
    if not stop.is_set():
        why = await hold()
        log.info("front: stopping after SIGTERM: %s", why)
    stop.set()
