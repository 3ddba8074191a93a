"""HTTP routes of the stand-in and its authentication filter.

Imitates the kcp handler chain (`pkg/server/handler.go`, `k8s.io/apiserver/pkg/server/config.go`
`DefaultBuildHandlerChain`): health endpoints and `/version` are open to anyone (kube's
system:public-info-viewer); other paths need a bearer token (`pkg/server/options/authentication.go`: the
shard-admin token matched by its SHA-256, the volatile kcp-admin token); a wrong token gets 401 with a
Status body, no token at all is `system:anonymous` and gets 403 like kube.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from aiohttp import web
from aiohttp.typedefs import Middleware

from kcpshard_testkit.fakekcp import apistatus
from kcpshard_testkit.fakekcp.bootstrap import CONFIGMAPS, NAMESPACES, SHARDS
from kcpshard_testkit.fakekcp.etcdstore import EtcdStore
from kcpshard_testkit.fakekcp.health import Health
from kcpshard_testkit.fakekcp.leader import LEASES
from kcpshard_testkit.fakekcp.resources import RestHandlers, WatchTracker
from kcpshard_testkit.fakekcp.shutdown import Handler, Lifecycle
from kcpshard_testkit.fakekcp.workspaces import WORKSPACES

PUBLIC_PREFIXES = ("/healthz", "/livez", "/readyz", "/version")


def version_info(kcp_version: str) -> dict[str, str]:
    """`/version` (k8s.io/apimachinery/pkg/version.Info) as kcp reports it: kube version `+kcp-<version>`."""
    return {
        "major": "1",
        "minor": "32",
        "gitVersion": f"v1.32.3+kcp-{kcp_version}",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.23.6",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def auth_middleware(authenticate: Callable[[str], str | None]) -> Middleware:
    @web.middleware
    async def middleware(req: web.Request, handler: Handler) -> web.StreamResponse:
        if req.path.startswith(PUBLIC_PREFIXES):
            return await handler(req)
        header = req.headers.get("Authorization", "")
        if not header:
            return apistatus.forbidden_path("system:anonymous", req.method.lower(), req.path)
        scheme, _, token = header.partition(" ")
        user = authenticate(token.strip()) if scheme.lower() == "bearer" and token.strip() else None
        if user is None:
            return apistatus.unauthorized()
        return await handler(req)

    return cast(Middleware, middleware)


def api_groups() -> dict[str, object]:
    def group(name: str, version: str) -> dict[str, object]:
        gv = {"groupVersion": f"{name}/{version}", "version": version}
        return {"name": name, "versions": [gv], "preferredVersion": gv}

    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            group("coordination.k8s.io", "v1"),
            group("core.kcp.io", "v1alpha1"),
            group("tenancy.kcp.io", "v1alpha1"),
        ],
    }


def build_app(
    store: EtcdStore,
    health: Health,
    lifecycle: Lifecycle,
    watches: WatchTracker,
    authenticate: Callable[[str], str | None],
    kcp_version: str,
) -> web.Application:
    app = web.Application(middlewares=[cast(Middleware, lifecycle.middleware), auth_middleware(authenticate)])

    async def version(_: web.Request) -> web.Response:
        return web.json_response(version_info(kcp_version))

    async def apis(_: web.Request) -> web.Response:
        return web.json_response(api_groups())

    async def core_api(_: web.Request) -> web.Response:
        return web.json_response(
            {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        )

    async def not_found(_: web.Request) -> web.Response:
        return apistatus.page_not_found()

    routes = [
        web.get("/readyz", health.handler("readyz"), allow_head=False),
        web.get("/livez", health.handler("livez"), allow_head=False),
        web.get("/healthz", health.handler("healthz"), allow_head=False),
        web.get("/version", version, allow_head=False),
        web.get("/clusters/{cluster}/apis", apis, allow_head=False),
        web.get("/clusters/{cluster}/api", core_api, allow_head=False),
    ]
    for res in (NAMESPACES, CONFIGMAPS, LEASES, WORKSPACES, SHARDS):
        routes += RestHandlers(store, res, watches).routes()
    app.add_routes(routes)
    app.router.add_route("*", "/{tail:.*}", not_found)
    return app
