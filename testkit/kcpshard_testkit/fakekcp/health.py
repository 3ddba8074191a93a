"""`/readyz`, `/livez`, `/healthz`: anonymous, kube's body format.

Imitates `k8s.io/apiserver/pkg/server/healthz/healthz.go` (`handleRootHealth`): on failure HTTP 500 with one
`[+]<check> ok` / `[-]<check> failed: reason withheld` line per check and `<name> check failed`; on success
`ok`, or with `?verbose` the lines and `<name> check passed`; `?exclude=<check>` skips a check. `/readyz`
also has the `shutdown` check that fails as soon as shutdown starts
(`k8s.io/apiserver/pkg/server/config.go`, `lifecycleSignals.ShutdownInitiated`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from kcpshard_testkit.fakekcp.etcdstore import EtcdStore, StoreError

Check = tuple[str, Callable[[], Awaitable[bool]]]


@dataclass
class HealthState:
    bootstrapped: bool = False
    started: bool = False  # KCP_FAKE_STARTUP_SECONDS elapsed (and not KCP_FAKE_NEVER_READY)
    shutting_down: bool = False


def _const(value: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return value()

    return check


class Health:
    def __init__(self, store: EtcdStore, state: HealthState) -> None:
        self.store = store
        self.state = state

    async def _etcd(self) -> bool:
        try:
            await asyncio.wait_for(self.store.ping(), timeout=2.0)
        except (StoreError, TimeoutError):
            return False
        return True

    def checks(self, endpoint: str) -> list[Check]:
        s = self.state
        checks: list[Check] = [
            ("ping", _const(lambda: True)),
            ("log", _const(lambda: True)),
            ("etcd", self._etcd),
        ]
        if endpoint == "readyz":
            checks.append(("etcd-readiness", self._etcd))
            checks.append(("informer-sync", _const(lambda: s.started)))
        checks += [
            ("poststarthook/generic-apiserver-start-informers", _const(lambda: True)),
            ("poststarthook/kcp-start-informers", _const(lambda: s.started)),
            ("poststarthook/kcp-bootstrap-system-crds", _const(lambda: s.bootstrapped)),
        ]
        if endpoint == "readyz":
            checks.append(("shutdown", _const(lambda: not s.shutting_down)))
        return checks

    def handler(self, endpoint: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(req: web.Request) -> web.Response:
            excluded = set(req.query.getall("exclude", []))
            lines: list[str] = []
            failed = False
            for name, check in self.checks(endpoint):
                if name in excluded:
                    lines.append(f"[+]{name} excluded: ok\n")
                    continue
                if await check():
                    lines.append(f"[+]{name} ok\n")
                else:
                    failed = True
                    lines.append(f"[-]{name} failed: reason withheld\n")
            headers = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache, private"}
            if failed:
                return web.Response(
                    status=500,
                    text="".join(lines) + f"{endpoint} check failed\n",
                    content_type="text/plain",
                    charset="utf-8",
                    headers=headers,
                )
            if "verbose" in req.query:
                return web.Response(
                    text="".join(lines) + f"{endpoint} check passed\n",
                    content_type="text/plain",
                    charset="utf-8",
                    headers=headers,
                )
            return web.Response(text="ok", content_type="text/plain", charset="utf-8", headers=headers)

        return handle
