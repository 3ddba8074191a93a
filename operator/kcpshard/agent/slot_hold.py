"""A serving slot whose pod is deleted by anyone but the operator serves on until its replacement does.

The kubelet's SIGTERM is the same whether the operator stopped the slot or a person, an eviction or the
garbage collector did. The operator stops a slot only once nothing is served by it (after the flip, or a
new slot aborted before it), in a Single roll, or when it tears the shard down. So the host agent tells
the two apart by reading its KcpShard: while the shard still serves this slot (its `activeSlot`, or the
backend the front reports), the stop was not the operator's, and kcp keeps serving until the recovery
roll has flipped the front to the other slot, or until the hold's time (inside the pod's grace period)
has run out. At every stop the agent reads the shard's `roll.stopTimeoutSeconds` too: it kills kcp
itself at that timeout, since the operator never force-deletes a slot's pod.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from kcpshard.agent.slot_status import API_ERRORS
from kcpshard.k8s.api import KCPSHARDS, ApiClient, NotFound
from kcpshard.timeouts import within

log = logging.getLogger("kcpshard.agent.slot")

POLL_SECONDS = 0.5
READ_SECONDS = 2.0  # a stop does not wait longer on the API server for the shard's stop timeout
SINGLE = "Single"  # api.spec.Shape.SINGLE: the slot agent does not import pydantic (its start time)


def still_serves(shard: Mapping[str, Any] | None, slot: str) -> bool:
    """Whether the shard still serves `slot` through its front, so that its kcp must not stop yet.

    Not when the shard is gone or being deleted, nor for a Single shard (no other slot to take over).
    """
    if shard is None or (shard.get("metadata") or {}).get("deletionTimestamp"):
        return False
    if (shard.get("spec") or {}).get("shape") == SINGLE:
        return False
    status = shard.get("status") or {}
    rollout = status.get("rollout") or {}
    if rollout.get("shape") == SINGLE:
        return False
    front = status.get("front") or {}
    return slot in (status.get("activeSlot"), front.get("observedBackend"))


async def hold_while_serving(api: ApiClient, namespace: str, shard: str, slot: str, timeout: float) -> bool:
    """Wait while the shard serves `slot`: True once it does not, False when `timeout` ran out first.

    While the API server cannot be read nothing is known, and kcp serves on (until the timeout)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            obj: Mapping[str, Any] | None = await api.get(KCPSHARDS, namespace, shard)
        except NotFound:
            obj = None
        except API_ERRORS as exc:
            log.warning("cannot read KcpShard %s/%s while holding: %s", namespace, shard, exc)
        else:
            if not still_serves(obj, slot):
                return True
        await asyncio.sleep(POLL_SECONDS)
    return False


def stop_timeout_of(shard: Mapping[str, Any] | None, default: float) -> float:
    """The shard's `roll.stopTimeoutSeconds` as it is now (a person may have shortened it for the roll
    under way), at most the agent's own `--stop-timeout`. The operator waits for the pod to be gone at
    this timeout and never force-deletes it, so the kill is the agent's (or at last the kubelet's)."""
    value = (((shard or {}).get("spec") or {}).get("roll") or {}).get("stopTimeoutSeconds")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return min(float(value), default)
    return default


async def read_stop_timeout(api: ApiClient, namespace: str, shard: str, default: float) -> float:
    """`stop_timeout_of` the shard as read now; `default` when it cannot be read within READ_SECONDS."""
    try:
        obj = await within(api.get(KCPSHARDS, namespace, shard), READ_SECONDS)
    except NotFound:
        return default
    except API_ERRORS as exc:
        log.warning("cannot read KcpShard %s/%s for its stop timeout: %s", namespace, shard, exc)
        return default
    return stop_timeout_of(obj, default)
