"""A small async Kubernetes REST client on httpx, for the agents, the operator's calls outside kopf and the
test kit. It speaks the plain REST protocol of ``k8s.io/apiserver`` (paths of
``staging/src/k8s.io/client-go/rest/request.go``, watch frames of ``apimachinery/pkg/watch/json``) and turns
``metav1.Status`` error bodies into exceptions. ``watch_forever`` is a minimal ``client-go/tools/cache``
reflector: list, watch from the list's resourceVersion, resume after each watch ends, re-list after 410 Gone
and report what changed meanwhile."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx

from kcpshard import retry
from kcpshard.k8s.connection import Connection
from kcpshard.k8s.credentials import Credentials, load_credentials

log = logging.getLogger(__name__)

PATCH_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}


class ApiError(Exception):
    """A failed API call, from the server's ``metav1.Status`` body. ``str()`` carries status, reason and
    the server's message only: never request bodies, headers or tokens."""

    def __init__(self, status: int, reason: str, message: str, details: Mapping[str, Any] | None = None):
        super().__init__(status, reason, message)
        self.status = status
        self.reason = reason
        self.message = message
        self.details: Mapping[str, Any] = details or {}

    def __str__(self) -> str:
        return f"{self.status} {self.reason}: {self.message}"


class NotFound(ApiError):
    """404."""


class Conflict(ApiError):
    """409: stale resourceVersion or already exists."""


class Gone(ApiError):
    """410: the watch resourceVersion is older than the server's history."""


class Invalid(ApiError):
    """422: validation failed (``details.causes`` lists the fields)."""


_ERRORS: dict[int, type[ApiError]] = {404: NotFound, 409: Conflict, 410: Gone, 422: Invalid}


def error_from_status(code: int, body: Any) -> ApiError:
    """Build the exception for an HTTP code and a (maybe) ``Status`` body."""
    if isinstance(body, dict) and body.get("kind") == "Status":
        code = int(body.get("code") or code)
        reason, message = str(body.get("reason") or ""), str(body.get("message") or "")
        details = body.get("details") if isinstance(body.get("details"), dict) else None
    else:
        reason, message, details = "", "", None
    reason = reason or httpx.codes.get_reason_phrase(code).replace(" ", "") or "Unknown"
    return _ERRORS.get(code, ApiError)(code, reason, message or f"the server answered {code}", details)


@dataclass(frozen=True)
class ResourceRef:
    """Where a resource lives: ``group`` ("" for core), ``version``, ``plural``."""

    group: str
    version: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The URL path; ``namespace`` None on a namespaced resource means all namespaces (lists, watches)."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


PODS = ResourceRef("", "v1", "pods")
SECRETS = ResourceRef("", "v1", "secrets")
SERVICEACCOUNTS = ResourceRef("", "v1", "serviceaccounts")
ROLES = ResourceRef("rbac.authorization.k8s.io", "v1", "roles")
ROLEBINDINGS = ResourceRef("rbac.authorization.k8s.io", "v1", "rolebindings")
EVENTS = ResourceRef("", "v1", "events")
NAMESPACES = ResourceRef("", "v1", "namespaces", namespaced=False)
NODES = ResourceRef("", "v1", "nodes", namespaced=False)
JOBS = ResourceRef("batch", "v1", "jobs")
DEPLOYMENTS = ResourceRef("apps", "v1", "deployments")
LEASES = ResourceRef("coordination.k8s.io", "v1", "leases")
BUDGETS = ResourceRef("policy", "v1", "poddisruptionbudgets")
KCPSHARDS = ResourceRef("kcpshard.dev", "v1alpha1", "kcpshards")
KCPSLOTS = ResourceRef("kcpshard.dev", "v1alpha1", "kcpslots")


def _obj_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class ApiClient:
    """Async REST calls against one API server, with ``Credentials`` (``kcpshard.k8s.credentials``) kept
    fresh by a ``Connection`` (refreshed when stale and after a 401)."""

    def __init__(self, credentials: Credentials, *, timeout: float = 30.0):
        self._conn = Connection(credentials, timeout=timeout)

    @classmethod
    def from_kubeconfig(cls, path: str | Path | None = None, context: str | None = None) -> ApiClient:
        """``path``, else ``$KUBECONFIG``, else in-cluster (or ``~/.kube/config``). Blocking: an exec plugin
        runs here; async code with an exec user should use ``open``."""
        return cls(load_credentials(path, context))

    @classmethod
    async def open(cls, path: str | Path | None = None, context: str | None = None) -> ApiClient:
        """``from_kubeconfig`` with the loading in a thread."""
        return cls(await asyncio.to_thread(load_credentials, path, context))

    @property
    def credentials(self) -> Credentials:
        """The credentials in use now (they change when refreshed)."""
        return self._conn.credentials

    @property
    def default_namespace(self) -> str:
        return self.credentials.namespace

    async def fresh_credentials(self, *, force: bool = False) -> Credentials:
        """The credentials, refreshed first when stale or when ``force`` (a 401 elsewhere, a re-login)."""
        return await self._conn.fresh_credentials(force=force)

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @property
    def closed(self) -> bool:  # by the operator's cleanup: the process is exiting
        return self._conn.closed

    async def aclose(self) -> None:
        await self._conn.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        """One call; returns the decoded JSON body (None when empty), raises ``ApiError`` on >= 400."""
        content = None if body is None else json.dumps(body).encode()
        clean = {k: v for k, v in (params or {}).items() if v is not None}
        for attempt in range(2):
            async with self._conn.session(retry=bool(attempt)) as (client, kwargs):
                if content is not None:
                    kwargs["headers"]["Content-Type"] = content_type
                resp = await client.request(method, path, params=clean, content=content, **kwargs)
            if not await self._conn.rejected(resp.status_code, attempt):
                break
        decoded = _decode(resp.content)
        if resp.status_code >= 400:
            raise error_from_status(resp.status_code, decoded)
        return decoded

    async def get(self, ref: ResourceRef, namespace: str | None, name: str) -> dict[str, Any]:
        return dict(await self.request("GET", ref.path(namespace, name)))

    async def list(
        self,
        ref: ResourceRef,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> dict[str, Any]:
        params = {"labelSelector": label_selector, "fieldSelector": field_selector}
        return dict(await self.request("GET", ref.path(namespace), params=params))

    async def create(
        self, ref: ResourceRef, namespace: str | None, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        return dict(await self.request("POST", ref.path(namespace), body=dict(body)))

    async def replace(
        self,
        ref: ResourceRef,
        namespace: str | None,
        name: str,
        body: Mapping[str, Any],
        subresource: str | None = None,
    ) -> dict[str, Any]:
        return dict(await self.request("PUT", ref.path(namespace, name, subresource), body=dict(body)))

    async def patch(
        self,
        ref: ResourceRef,
        namespace: str | None,
        name: str,
        patch: Any,
        *,
        kind: Literal["merge", "json", "strategic"] = "merge",
        subresource: str | None = None,
    ) -> dict[str, Any]:
        path = ref.path(namespace, name, subresource)
        return dict(await self.request("PATCH", path, body=patch, content_type=PATCH_TYPES[kind]))

    async def delete(
        self,
        ref: ResourceRef,
        namespace: str | None,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        propagation_policy: Literal["Background", "Foreground", "Orphan"] | None = None,
        preconditions: Mapping[str, str] | None = None,
    ) -> dict[str, Any] | None:
        """Delete; returns the object the server answered with (kept for a grace period or finalizers,
        but also a pod's last state when it is gone at once), None on a Status. ``NotFound`` is raised:
        callers decide whether a missing object is fine."""
        options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if propagation_policy is not None:
            options["propagationPolicy"] = propagation_policy
        if preconditions:
            options["preconditions"] = dict(preconditions)
        # The options go in the query too: servers honour either, the handshake needs gracePeriodSeconds=0.
        params = {"gracePeriodSeconds": grace_period_seconds, "propagationPolicy": propagation_policy}
        result = await self.request("DELETE", ref.path(namespace, name), params=params, body=options)
        if not isinstance(result, dict) or result.get("kind") == "Status":
            return None
        return result

    async def watch(
        self,
        ref: ResourceRef,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int | None = None,
        allow_bookmarks: bool = False,
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield ``{"type", "object"}`` events until the server ends the stream.

        An ``ERROR`` event raises (``Gone`` for 410). ``BOOKMARK`` events are yielded only when asked for.
        """
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "timeoutSeconds": timeout_seconds,
            "allowWatchBookmarks": "true" if allow_bookmarks else None,
        }
        clean = {k: v for k, v in params.items() if v is not None}
        # No read timeout: a quiet watch is normal; the server's timeoutSeconds ends it.
        timeout = httpx.Timeout(self._conn.timeout.connect, read=None)
        for attempt in range(2):
            async with (
                self._conn.session(retry=bool(attempt)) as (client, kwargs),
                client.stream("GET", ref.path(namespace), params=clean, timeout=timeout, **kwargs) as resp,
            ):
                if resp.status_code >= 400:
                    body = _decode(await resp.aread())
                    if await self._conn.rejected(resp.status_code, attempt):
                        continue
                    raise error_from_status(resp.status_code, body)
                async for line in resp.aiter_lines():
                    if not line.strip():
                        continue
                    try:
                        event = json.loads(line)
                    except ValueError:
                        raise ApiError(
                            500, "InternalError", "malformed watch event from the server"
                        ) from None
                    if event.get("type") == "ERROR":
                        obj = event.get("object") or {}
                        raise error_from_status(int(obj.get("code") or 500), obj)
                    yield event
                return

    async def watch_forever(
        self,
        ref: ResourceRef,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        synced: asyncio.Event | None = None,
        retry_delay: float = 1.0,
    ) -> AsyncIterator[dict[str, Any]]:
        """List, then watch with resume; yields ADDED/MODIFIED/DELETED forever (until cancelled).

        The first list yields ADDED for every object, then ``synced`` is set. After 410 Gone it re-lists and
        yields what changed meanwhile (DELETED for vanished objects, ADDED/MODIFIED for the rest), like an
        informer. Connection errors are retried after ``retry_delay`` seconds.
        """
        again = retry.Backoff.every(retry_delay)
        known: dict[tuple[str, str], dict[str, Any]] = {}
        rv: str | None = None
        while True:
            try:
                if rv is None:
                    listing = await self.list(ref, namespace, label_selector, field_selector)
                    rv = str((listing.get("metadata") or {}).get("resourceVersion") or "")
                    for event in _relist_events(known, listing.get("items") or []):
                        yield event
                    if synced is not None:
                        synced.set()
                async for event in self.watch(
                    ref,
                    namespace,
                    resource_version=rv,
                    label_selector=label_selector,
                    field_selector=field_selector,
                    timeout_seconds=300,
                    allow_bookmarks=True,
                ):
                    obj = event.get("object") or {}
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    if event.get("type") == "BOOKMARK":
                        continue
                    if event.get("type") == "DELETED":
                        known.pop(_obj_key(obj), None)
                    else:
                        known[_obj_key(obj)] = obj
                    yield event
            except Gone:
                rv = None
            except Exception as exc:
                if not _WATCH_PASSES(exc):
                    raise
                log.warning("watch of %s failed, retrying: %s", ref.plural, exc)
                await asyncio.sleep(again.delay(1))


# A watch that broke is started again (an API server away, a refused request): it is the informer.
_WATCH_PASSES = retry.kinds(httpx.TransportError, ApiError)


def _relist_events(
    known: dict[tuple[str, str], dict[str, Any]], items: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    fresh = {_obj_key(o): o for o in items}
    for key in [k for k in known if k not in fresh]:
        events.append({"type": "DELETED", "object": known.pop(key)})
    for key, obj in fresh.items():
        old = known.get(key)
        if old is None:
            events.append({"type": "ADDED", "object": obj})
        elif (old.get("metadata") or {}).get("resourceVersion") != (obj.get("metadata") or {}).get(
            "resourceVersion"
        ):
            events.append({"type": "MODIFIED", "object": obj})
        known[key] = obj
    return events


def _decode(content: bytes) -> Any:
    if not content:
        return None
    try:
        return json.loads(content)
    except ValueError:
        return None
