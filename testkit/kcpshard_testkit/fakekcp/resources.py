"""Generic REST verbs (list, get, create, update, delete, watch) on etcd-backed objects, per logical cluster.

Imitates `k8s.io/apiserver/pkg/registry/generic/registry/store.go` and `pkg/endpoints/handlers/*` for the
few resources the stand-in serves, with kcp's `/clusters/<logical cluster>/...` URL prefix and kcp's
etcd key layout `<group>/<resource>/<cluster>/[<namespace>/]<name>`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import string
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from kcpshard.api.conditions import now
from kcpshard_testkit.fakekcp import apistatus
from kcpshard_testkit.fakekcp.etcdstore import AlreadyExists, Conflict, EtcdStore, NotFound, Obj
from kcpshard_testkit.fakekcp.waitgroup import WaitGroup

Hook = Callable[[Obj], None]


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    resource: str
    kind: str
    namespaced: bool
    on_create: Hook | None = None
    # Fields a PUT on the main resource may not change (kube's status subresource strategy).
    keep_on_update: tuple[str, ...] = field(default=())

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def url_base(self) -> str:
        gv = f"apis/{self.group}/{self.version}" if self.group else f"api/{self.version}"
        ns = "namespaces/{ns}/" if self.namespaced else ""
        return f"/clusters/{{cluster}}/{gv}/{ns}{self.resource}"

    def folder(self, cluster: str, namespace: str = "") -> str:
        parts = [self.group or "core", self.resource, cluster]
        if self.namespaced and namespace:
            parts.append(namespace)
        return "/".join(parts)

    def key(self, cluster: str, namespace: str, name: str) -> str:
        return f"{self.folder(cluster, namespace)}/{name}"


def new_object_meta(obj: Obj, res: Resource, namespace: str) -> None:
    meta = obj.setdefault("metadata", {})
    if not meta.get("name") and meta.get("generateName"):
        alphabet = string.ascii_lowercase + string.digits
        meta["name"] = meta["generateName"] + "".join(secrets.choice(alphabet) for _ in range(5))
    if res.namespaced:
        meta["namespace"] = namespace
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = now()
    meta.setdefault("generation", 1)
    meta.pop("resourceVersion", None)
    obj["apiVersion"] = res.api_version
    obj["kind"] = res.kind


class RestHandlers:
    """aiohttp handlers for one resource; long-running watches are counted in `watches`."""

    def __init__(self, store: EtcdStore, res: Resource, watch_tracker: WatchTracker) -> None:
        self.store = store
        self.res = res
        self.watches = watch_tracker

    def routes(self) -> list[web.RouteDef]:
        base = self.res.url_base
        return [
            web.get(base, self.list_or_watch, allow_head=False),
            web.post(base, self.create),
            web.get(base + "/{name}", self.get, allow_head=False),
            web.put(base + "/{name}", self.update),
            web.delete(base + "/{name}", self.delete),
        ]

    def _where(self, req: web.Request) -> tuple[str, str]:
        return req.match_info["cluster"], req.match_info.get("ns", "")

    async def get(self, req: web.Request) -> web.Response:
        cluster, ns = self._where(req)
        name = req.match_info["name"]
        try:
            stored = await self.store.get(self.res.key(cluster, ns, name))
        except NotFound:
            return apistatus.not_found(self.res.resource, self.res.group, name)
        return web.json_response(stored.obj)

    async def list_or_watch(self, req: web.Request) -> web.StreamResponse:
        if req.query.get("watch", "").lower() in ("1", "true"):
            return await self.watch(req)
        cluster, ns = self._where(req)
        items, rev = await self.store.list(self.res.folder(cluster, ns))
        objs = [s.obj for s in items]
        if not ns and self.res.namespaced:  # all namespaces: filter to this cluster only
            objs = [o for o in objs if o.get("metadata", {}).get("namespace")]
        body = {
            "kind": f"{self.res.kind}List",
            "apiVersion": self.res.api_version,
            "metadata": {"resourceVersion": str(rev)},
            "items": objs,
        }
        return web.json_response(body)

    async def create(self, req: web.Request) -> web.Response:
        cluster, ns = self._where(req)
        obj = await _json_body(req)
        if isinstance(obj, web.Response):
            return obj
        new_object_meta(obj, self.res, ns)
        name = obj["metadata"].get("name", "")
        if not name:
            return apistatus.invalid(
                self.res.kind,
                self.res.group,
                "",
                "metadata.name: Required value: name or generateName is required",
            )
        if self.res.on_create is not None:
            self.res.on_create(obj)
        try:
            stored = await self.store.create(self.res.key(cluster, ns, name), obj)
        except AlreadyExists:
            return apistatus.already_exists(self.res.resource, self.res.group, name)
        return web.json_response(stored.obj, status=201)

    async def update(self, req: web.Request) -> web.Response:
        cluster, ns = self._where(req)
        name = req.match_info["name"]
        obj = await _json_body(req)
        if isinstance(obj, web.Response):
            return obj
        meta = obj.setdefault("metadata", {})
        if meta.get("name", name) != name:
            return apistatus.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
            )
        key = self.res.key(cluster, ns, name)
        wanted_rv = str(meta.get("resourceVersion") or "")
        try:
            current = await self.store.get(key)
        except NotFound:
            return apistatus.not_found(self.res.resource, self.res.group, name)
        if wanted_rv and wanted_rv != str(current.revision):
            return apistatus.conflict(self.res.resource, self.res.group, name)
        cur_meta = current.obj.get("metadata", {})
        meta.update(
            {"name": name, "uid": cur_meta.get("uid"), "creationTimestamp": cur_meta.get("creationTimestamp")}
        )
        if self.res.namespaced:
            meta["namespace"] = ns
        meta.setdefault("generation", cur_meta.get("generation", 1))
        obj["apiVersion"], obj["kind"] = self.res.api_version, self.res.kind
        for f in self.res.keep_on_update:
            if f in current.obj:
                obj[f] = current.obj[f]
            else:
                obj.pop(f, None)
        try:
            stored = await self.store.update(key, obj, current.revision)
        except Conflict:
            return apistatus.conflict(self.res.resource, self.res.group, name)
        except NotFound:
            return apistatus.not_found(self.res.resource, self.res.group, name)
        return web.json_response(stored.obj)

    async def delete(self, req: web.Request) -> web.Response:
        cluster, ns = self._where(req)
        name = req.match_info["name"]
        key = self.res.key(cluster, ns, name)
        try:
            current = await self.store.get(key)
            await self.store.delete(key, current.revision)
        except NotFound:
            return apistatus.not_found(self.res.resource, self.res.group, name)
        except Conflict:
            return apistatus.conflict(self.res.resource, self.res.group, name)
        return apistatus.success(
            name, self.res.group, self.res.resource, current.obj["metadata"].get("uid", "")
        )

    async def watch(self, req: web.Request) -> web.StreamResponse:
        """A polling watch: ADDED/MODIFIED/DELETED events as JSON lines until the client or server ends it.

        Without `resourceVersion` (or with "0") it starts with ADDED for every existing object, as kube
        does. With `resourceVersion=X` objects whose revision (etcd mod_revision, their resourceVersion) is
        <= X count as known, and only later changes are sent: ADDED for an object created after X (etcd
        create_revision > X), MODIFIED for one created before and changed since. Unlike kube, which replays
        its history from X, a polling watch cannot know about objects deleted between X and its start (no
        DELETED for them), sends one event per object per poll (0.5 s) however often it changed, and never
        answers 410 Gone (no compaction check). Events of one poll are sent in revision order; a DELETED
        object carries the revision of the poll that noticed the deletion (kube: the deletion's revision),
        so the last event's resourceVersion is a safe point to resume from. `allowWatchBookmarks` is
        accepted and ignored (kube may send BOOKMARK events; clients take both); `timeoutSeconds` ends it.
        """
        cluster, ns = self._where(req)
        folder = self.res.folder(cluster, ns)
        since = req.query.get("resourceVersion", "")
        if since not in ("", "0") and not since.isdigit():
            return _invalid_resource_version(since)
        from_rev = int(since) if since not in ("", "0") else None
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(req)
        known: dict[str, tuple[int, Obj]] = {}
        first = True
        timeout = float(req.query.get("timeoutSeconds", "1800") or 1800)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        with self.watches.track() as stop:
            while loop.time() < deadline and not stop.is_set():
                if self.watches.held:  # kcp shutting down: open, silent, until the client closes it
                    if req.transport is None or req.transport.is_closing():
                        break
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), timeout=0.1)
                    continue
                items, list_rev = await self.store.list(folder)
                seen: dict[str, tuple[int, Obj]] = {}
                changed: list[tuple[int, str, Obj]] = []
                for s in items:
                    meta = s.obj["metadata"]
                    k = f"{meta.get('namespace', '')}/{meta['name']}"
                    seen[k] = (s.revision, s.obj)
                    if first and from_rev is not None:
                        if s.revision <= from_rev:
                            continue  # the client knows it already
                        typ = "ADDED" if s.create_revision > from_rev else "MODIFIED"
                        changed.append((s.revision, typ, s.obj))
                    elif k not in known:
                        changed.append((s.revision, "ADDED", s.obj))
                    elif known[k][0] != s.revision:
                        changed.append((s.revision, "MODIFIED", s.obj))
                changed.sort(key=lambda e: e[0])
                events = [(typ, o) for _, typ, o in changed]
                for k, (_, o) in known.items():
                    if k not in seen:
                        gone = json.loads(json.dumps(o))
                        gone["metadata"]["resourceVersion"] = str(list_rev)
                        events.append(("DELETED", gone))
                known, first = seen, False
                for typ, o in events:
                    await resp.write((json.dumps({"type": typ, "object": o}) + "\n").encode())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=0.5)
        return resp


class WatchTracker:
    """Counts open watches, and tells them to end (kube's WatchRequestWaitGroup)."""

    def __init__(self) -> None:
        self.group = WaitGroup()
        self._stops: set[asyncio.Event] = set()
        self.held = False  # shutting down: open watches stay open and send nothing (see shutdown.py)

    @property
    def open(self) -> int:
        return self.group.count

    def track(self) -> _Tracked:
        return _Tracked(self)

    def stop_all(self) -> None:
        for ev in list(self._stops):
            ev.set()

    async def wait_drained(self, grace_seconds: float) -> bool:
        return await self.group.wait(grace_seconds)


class _Tracked:
    def __init__(self, tracker: WatchTracker) -> None:
        self.tracker = tracker
        self.event = asyncio.Event()

    def __enter__(self) -> asyncio.Event:
        self.tracker.group.add()
        self.tracker._stops.add(self.event)
        return self.event

    def __exit__(self, *exc: object) -> None:
        self.tracker.group.done()
        self.tracker._stops.discard(self.event)


def _invalid_resource_version(rv: str) -> web.Response:
    """What kube answers a watch with a resourceVersion that is not a number: a 500 Status with no reason."""
    parse = f'strconv.ParseUint: parsing "{rv}": invalid syntax'
    body: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
    body |= {"message": f'resourceVersion: Invalid value: "{rv}": {parse}', "code": 500}
    return web.json_response(body, status=500)


async def _json_body(req: web.Request) -> Obj | web.Response:
    try:
        data = await req.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return apistatus.bad_request("the body of the request was in an unknown format")
    if not isinstance(data, dict):
        return apistatus.bad_request("the body of the request was in an unknown format")
    return data


AsyncHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]
