"""The HTTP layer: authentication, routing, content negotiation, and the verbs.

Imitates the handler chain of k8s.io/apiserver/pkg/endpoints/handlers (get.go, create.go, update.go,
patch.go, delete.go, watch.go) and k8s.io/apiserver/pkg/server/filters for authentication.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
from typing import Any

from aiohttp import web

from . import discovery, patching, tables, watch
from .builtins import EVENT_FIELD_ALIASES
from .errors import (
    ApiError,
    bad_request,
    method_not_allowed,
    page_not_found,
    unauthorized,
    unsupported_media_type,
)
from .registry import COMMON_FIELDS, ResourceType
from .requests import (
    ResourcePath,
    delete_options,
    flag,
    int_param,
    parse_body,
    parse_resource_path,
    resource_version,
    wanted_conversion,
)
from .selectors import FieldSelector, LabelSelector
from .store import Store

log = logging.getLogger(__name__)

ANONYMOUS = ("/healthz", "/livez", "/readyz", "/version")
PATCH_TYPES = ["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"]
SMP = "application/strategic-merge-patch+json"


def _json(
    body: Any, status: int = 200, content_type: str = "application/json", warnings: list[str] | None = None
) -> web.Response:
    resp = web.Response(
        body=json.dumps(body).encode(), status=status, content_type=content_type.split(";")[0]
    )
    if ";" in content_type:
        resp.headers["Content-Type"] = content_type
    for warning in warnings or []:
        resp.headers.add("Warning", "299 - " + json.dumps(warning))
    return resp


def _error(exc: ApiError) -> web.Response:
    return _json(exc.status(), status=exc.code)


class ApiApp:
    """An aiohttp application serving the emulated API from a Store."""

    def __init__(self, store: Store, token: str, address: str, bookmark_interval: float = 5.0) -> None:
        self.store = store
        self.token = token
        self.address = address
        self.bookmark_interval = bookmark_interval
        self.watches: set[asyncio.Task[Any]] = set()

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            if (
                request.path not in ANONYMOUS
                and not request.path.startswith("/readyz/")
                and not self._authorized(request)
            ):
                raise unauthorized()
            return await self._route(request)
        except ApiError as exc:
            return _error(exc)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:  # a bug here must reach the client as a 500, not a dropped connection
            log.exception("internal error serving %s %s", request.method, request.path)
            return _error(
                ApiError(500, "InternalError", f"Internal error occurred: {type(exc).__name__}: {exc}")
            )

    def _authorized(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        scheme, _, value = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), self.token.encode())

    async def _route(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        registry = self.store.registry
        if request.method not in ("GET", "HEAD") and not path.startswith(("/api/", "/apis/")):
            raise method_not_allowed()
        if path in ("/healthz", "/livez", "/readyz") or path.startswith("/readyz/"):
            return web.Response(text="ok", content_type="text/plain")
        if path == "/version":
            return _json(discovery.VERSION)
        if path == "/":
            return _json(
                {
                    "paths": sorted(
                        [
                            "/api",
                            "/api/v1",
                            "/apis",
                            "/healthz",
                            "/livez",
                            "/readyz",
                            "/version",
                            "/openapi/v3",
                        ]
                    )
                }
            )
        accept = request.headers.get("Accept", "")
        if path in ("/api", "/apis"):
            if discovery.wants_aggregated(accept):
                return _json(
                    discovery.aggregated(registry, core=path == "/api"), content_type=discovery.AGGREGATED_V2
                )
            return _json(
                discovery.api_versions(self.address) if path == "/api" else discovery.api_group_list(registry)
            )
        if path == "/openapi/v3":
            return _json(discovery.openapi_root(registry))
        if path.startswith("/openapi/v3/"):
            gv = path.removeprefix("/openapi/v3/").split("/")
            doc = None
            if len(gv) == 2 and gv[0] == "api":
                doc = discovery.openapi_document(registry, "", gv[1])
            elif len(gv) == 3 and gv[0] == "apis":
                doc = discovery.openapi_document(registry, gv[1], gv[2])
            if doc is None:
                raise page_not_found()
            return _json(doc)
        parts = path.strip("/").split("/")
        if parts[0] == "apis" and len(parts) == 2:
            group_doc = discovery.api_group(registry, parts[1])
            if group_doc is None:
                raise page_not_found()
            return _json(group_doc)
        if (parts[0] == "api" and len(parts) == 2) or (parts[0] == "apis" and len(parts) == 3):
            group, version = ("", parts[1]) if parts[0] == "api" else (parts[1], parts[2])
            res = discovery.resource_list(registry, group, version)
            if res is None:
                raise page_not_found()
            return _json(res)
        rp = parse_resource_path(path)
        if rp is None:
            raise page_not_found()
        rt = registry.get(rp.group, rp.version, rp.plural)
        if rt is None or (rp.namespace is not None and not rt.namespaced):
            raise page_not_found()
        if rp.subresource is not None and not (rp.subresource == "status" and rt.status_subresource):
            raise page_not_found()
        return await self._resource(request, rt, rp)

    async def _resource(self, request: web.Request, rt: ResourceType, rp: ResourcePath) -> web.StreamResponse:
        query = dict(request.query)
        method = request.method
        namespace = rp.namespace or ""
        raw = await request.read()
        content_type = request.headers.get("Content-Type", "application/json").split(";")[0].strip().lower()
        conversion = wanted_conversion(request.headers.get("Accept", ""))
        warnings: list[str] = []
        dry_run = query.get("dryRun") == "All"
        strict = query.get("fieldValidation") == "Strict"
        validation_warnings = None if query.get("fieldValidation") == "Ignore" else warnings
        if method == "GET" and (rp.watch_prefix or flag(query.get("watch"))):
            return await self._watch(request, rt, rp, query, conversion)
        if method == "GET" and rp.name is None:
            items, rv = self._list(rt, rp, query)
            return _json(self._render_list(rt, items, rv, conversion, query))
        if rp.name is None and method == "POST":
            if rt.namespaced and rp.namespace is None:
                raise method_not_allowed()
            body = parse_body(raw, content_type)
            obj = self.store.create(rt, namespace, body, dry_run, validation_warnings, strict)
            return _json(self._render_one(rt, obj, conversion, query), 201, warnings=warnings)
        if rp.name is None and method == "DELETE":
            options = delete_options(query, parse_body(raw, content_type))
            items, _ = self._list(rt, rp, query)
            deleted = [
                self.store.delete(rt, o["metadata"].get("namespace", ""), o["metadata"]["name"], options)
                for o in items
            ]
            return _json(
                {
                    "kind": rt.list_kind,
                    "apiVersion": rt.api_version,
                    "metadata": {"resourceVersion": str(self.store.rv)},
                    "items": deleted,
                }
            )
        if rp.name is None:
            raise method_not_allowed()
        if rt.namespaced and rp.namespace is None:
            raise page_not_found()
        name = rp.name
        if method == "GET":
            return _json(self._render_one(rt, self.store.get(rt, namespace, name), conversion, query))
        if method == "PUT":
            obj = self.store.update(
                rt,
                namespace,
                name,
                parse_body(raw, content_type),
                rp.subresource,
                dry_run,
                validation_warnings,
                strict,
            )
            return _json(self._render_one(rt, obj, conversion, query), warnings=warnings)
        if method == "PATCH":
            obj = self._patch(rt, rp, namespace, name, raw, content_type, query, validation_warnings, strict)
            return _json(self._render_one(rt, obj, conversion, query), warnings=warnings)
        if method == "DELETE" and rp.subresource is None:
            obj = self.store.delete(rt, namespace, name, delete_options(query, parse_body(raw, content_type)))
            return _json(obj)
        raise method_not_allowed()

    def _patch(
        self,
        rt: ResourceType,
        rp: ResourcePath,
        namespace: str,
        name: str,
        raw: bytes,
        content_type: str,
        query: dict[str, str],
        warnings: list[str] | None,
        strict: bool,
    ) -> dict[str, Any]:
        dry_run = query.get("dryRun") == "All"
        accepted = PATCH_TYPES if rt.custom else [*PATCH_TYPES, SMP]
        if content_type not in accepted:
            raise unsupported_media_type(content_type, accepted)
        body = parse_body(raw, "yaml" if content_type.endswith("yaml") else "json")
        if content_type == "application/apply-patch+yaml":
            return self._apply(rt, rp, namespace, name, body, query, warnings, strict)
        if content_type == "application/json-patch+json":
            return self.store.patch(
                rt,
                namespace,
                name,
                lambda cur: patching.json_patch(cur, body),
                rp.subresource,
                dry_run,
                warnings,
                strict,
            )
        if not isinstance(body, dict):
            raise bad_request("json: cannot unmarshal array into Go value of type map[string]interface {}")
        fn = patching.strategic_merge_patch if content_type == SMP else patching.merge_patch
        return self.store.patch(
            rt, namespace, name, lambda cur: fn(cur, body), rp.subresource, dry_run, warnings, strict
        )

    def _apply(
        self,
        rt: ResourceType,
        rp: ResourcePath,
        namespace: str,
        name: str,
        body: Any,
        query: dict[str, str],
        warnings: list[str] | None,
        strict: bool,
    ) -> dict[str, Any]:
        """A simple server-side apply: create, or merge the applied fields (no field ownership)."""
        if not query.get("fieldManager"):
            raise ApiError(
                400,
                "BadRequest",
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required '
                "value: is required for apply patch",
            )
        if not isinstance(body, dict):
            raise bad_request("error decoding YAML: the applied configuration must be an object")
        dry_run = query.get("dryRun") == "All"
        try:
            self.store.get(rt, namespace, name)
        except ApiError as exc:
            if exc.code != 404 or rp.subresource:
                raise
            body.setdefault("metadata", {})["name"] = name
            return self.store.create(rt, namespace, body, dry_run, warnings, strict)
        return self.store.patch(
            rt,
            namespace,
            name,
            lambda cur: patching.strategic_merge_patch(cur, body),
            rp.subresource,
            dry_run,
            warnings,
            strict,
        )

    # ----- reading -----------------------------------------------------------------------------------------

    def _selectors(self, rt: ResourceType, query: dict[str, str]) -> tuple[LabelSelector, FieldSelector]:
        def unknown(key: str) -> ApiError:
            # Kinds without their own field-label conversion (ConfigMaps, Leases, custom resources)
            # answer as apimachinery's DefaultMetaV1FieldSelectorConversion does.
            if rt.custom or rt.field_selectors == COMMON_FIELDS:
                allowed = ", ".join(f'"{f}"' for f in rt.field_selectors)
                return bad_request(f'"{key}" is not a known field selector: only {allowed}')
            return bad_request(f"field label not supported: {key}")

        aliases = EVENT_FIELD_ALIASES if rt.plural == "events" else None
        return (
            LabelSelector.parse(query.get("labelSelector")),
            FieldSelector.parse(query.get("fieldSelector"), rt.field_selectors, aliases, unknown),
        )

    def _list(
        self, rt: ResourceType, rp: ResourcePath, query: dict[str, str]
    ) -> tuple[list[dict[str, Any]], int]:
        labels, fields = self._selectors(rt, query)
        items, rv = self.store.list_items(rt, rp.namespace if rt.namespaced else None)
        return [o for o in items if labels.matches(o["metadata"].get("labels")) and fields.matches(o)], rv

    def _render_one(
        self, rt: ResourceType, obj: dict[str, Any], conversion: str | None, query: dict[str, str]
    ) -> dict[str, Any]:
        if conversion == "Table":
            return tables.table(
                rt, [obj], obj["metadata"].get("resourceVersion", ""), query.get("includeObject", "Metadata")
            )
        if conversion == "PartialObjectMetadata":
            return {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj["metadata"],
            }
        return obj

    def _render_list(
        self,
        rt: ResourceType,
        items: list[dict[str, Any]],
        rv: int,
        conversion: str | None,
        query: dict[str, str],
    ) -> dict[str, Any]:
        if conversion == "Table":
            return tables.table(rt, items, str(rv), query.get("includeObject", "Metadata"))
        if conversion == "PartialObjectMetadata":
            return {
                "kind": "PartialObjectMetadataList",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": {"resourceVersion": str(rv)},
                "items": [self._render_one(rt, o, conversion, query) for o in items],
            }
        return {
            "kind": rt.list_kind,
            "apiVersion": rt.api_version,
            "metadata": {"resourceVersion": str(rv)},
            "items": items,
        }

    async def _watch(
        self,
        request: web.Request,
        rt: ResourceType,
        rp: ResourcePath,
        query: dict[str, str],
        conversion: str | None,
    ) -> web.StreamResponse:
        labels, fields = self._selectors(rt, query)
        if rp.name is not None:
            fields = FieldSelector((*fields.terms, ("metadata.name", True, rp.name)))
        timeout = int_param(query, "timeoutSeconds")
        req = watch.WatchRequest(
            rt=rt,
            namespace=rp.namespace if rt.namespaced else None,
            labels=labels,
            fields=fields,
            since=resource_version(query),
            send_initial=flag(query.get("sendInitialEvents")),
            bookmarks=flag(query.get("allowWatchBookmarks")),
            timeout=float(timeout) if timeout is not None else None,
        )
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        events = watch.stream(self.store, req, self.bookmark_interval)
        task = asyncio.current_task()
        if task is not None:
            self.watches.add(task)
        try:
            await resp.prepare(request)
            try:
                async for event in events:
                    if conversion is not None and event["type"] != "BOOKMARK":
                        rv = event["object"]["metadata"].get("resourceVersion", "")
                        event = {
                            "type": event["type"],
                            "object": self._render_one(rt, event["object"], conversion, query),
                        }
                        if conversion == "Table":
                            event["object"]["metadata"]["resourceVersion"] = rv
                    await resp.write(json.dumps(event).encode() + b"\n")
            except ApiError as exc:  # too old resourceVersion: an ERROR event, as the watch cache sends
                await resp.write(json.dumps({"type": "ERROR", "object": exc.status()}).encode() + b"\n")
            with contextlib.suppress(ConnectionResetError):
                await resp.write_eof()
        except ConnectionResetError:
            pass  # the watcher went away; the stream's finally unsubscribed it
        finally:
            await events.aclose()
            if task is not None:
                self.watches.discard(task)
        return resp
