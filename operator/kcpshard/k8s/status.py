"""Status writes shared by two parties, guarded by resourceVersion.

Two parties write each status (host agent and operator on KcpSlot; operator and
front agent on KcpShard). A merge patch replaces a whole list, so any change that
touches `conditions` is a read-modify-write: GET, change a copy, PUT `/status`
with the resourceVersion read, retry on 409 Conflict.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from kcpshard import retry
from kcpshard.k8s.api import ApiClient, Conflict, NotFound, ResourceRef

StatusFn = Callable[[dict[str, Any]], dict[str, Any] | None]


async def mutate_status(
    api: ApiClient,
    ref: ResourceRef,
    namespace: str,
    name: str,
    fn: StatusFn,
    *,
    attempts: int = 10,
    uid: str | None = None,
    known: Mapping[str, Any] | None = None,
    written: Callable[[Mapping[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Apply `fn` to the current status and write it back; returns the object written (or read).

    `fn` gets a copy of the status and returns the new status, or None to write nothing. With `uid`,
    an object of the same name but another uid (deleted and created again) is NotFound: a writer never
    reports onto an object that is not the one it works for. `known`, the object as the caller last read
    or wrote it, saves the first GET: if it is stale, the PUT meets 409 and the next try reads.
    """
    tries = 0

    async def once() -> dict[str, Any]:
        nonlocal tries
        fresh = tries > 0 or known is None
        tries += 1
        obj = known if known is not None and not fresh else await api.get(ref, namespace, name)
        if uid is not None and obj["metadata"].get("uid") != uid:
            raise NotFound(
                404, "NotFound", f"{ref.plural} {name} with uid {uid} is gone (another object has its name)"
            )
        status = copy.deepcopy(obj.get("status") or {})
        new_status = fn(status)
        if new_status is None or new_status == (obj.get("status") or {}):
            if not fresh:
                raise _Unread  # only the server can say there is nothing to write
            return dict(obj)
        put = await api.replace(ref, namespace, name, {**obj, "status": new_status}, subresource="status")
        if written is not None:
            written(put)
        return put

    try:
        # Another writer won the race (409): read again and redo the change, at once.
        return await retry.retrying(once, passing=_RACED, backoff=retry.Backoff.every(0.0), attempts=attempts)
    except (Conflict, _Unread):
        raise Conflict(
            409, "Conflict", f"status of {ref.plural}/{name} kept changing; gave up after {attempts} tries"
        ) from None


class _Unread(Exception):
    """The caller's copy says there is nothing to write: read the object itself before believing it."""


_RACED = retry.kinds(Conflict, _Unread)
