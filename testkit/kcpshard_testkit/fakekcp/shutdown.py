"""Graceful termination, as the generic API server under kcp does it.

Imitates `k8s.io/apiserver/pkg/server/genericapiserver.go` (`RunWithContext`: ShutdownInitiated ->
`/readyz` fails at once; AfterShutdownDelayDuration after `--shutdown-delay-duration`; NotAcceptingNewRequest;
with `--shutdown-send-retry-after` the listener stays open and new requests get 429 until the in-flight
non-long-running requests have drained, then it closes; without it the HTTP server shuts down at once
(Go's `http.Server.Shutdown`: the listener and idle kept-alive connections closed, a busy one after its
answer, which carries `Connection: close`: `server.go`, `closeIdleConns`, `doKeepAlives`); open
watches get up to `--shutdown-watch-termination-grace-period`, and without it are held, silent, until the
HTTP server's shutdown timeout), `filters/with_retry_after.go` (429,
`Retry-After: 5`, `Connection: close`, "The apiserver is shutting down, please try again later.", health
paths exempt) and `k8s.io/apiserver/pkg/server/signal.go` (a second SIGTERM/SIGINT exits at once with
code 1, printing nothing).
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from kcpshard_testkit.fakekcp import klog
from kcpshard_testkit.fakekcp.health import HealthState
from kcpshard_testkit.fakekcp.resources import WatchTracker
from kcpshard_testkit.fakekcp.waitgroup import WaitGroup

RETRY_AFTER_MESSAGE = "The apiserver is shutting down, please try again later."
EXEMPT_PREFIXES = ("/healthz", "/livez", "/readyz")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def is_exempt(path: str) -> bool:
    return path.startswith(EXEMPT_PREFIXES)


def is_long_running(req: web.Request) -> bool:
    return req.query.get("watch", "").lower() in ("1", "true")


def event(name: str) -> None:
    klog.info(f'"[graceful-termination] shutdown event" name="{name}"', "genericapiserver.go:711")


class Lifecycle:
    """Signals, the in-flight counter, and the shutdown sequence."""

    def __init__(
        self,
        health: HealthState,
        watches: WatchTracker,
        delay: float,
        send_retry_after: bool,
        watch_grace: float,
        retry_after_hold: float = 0.0,
        ignore_sigterm: bool = False,
        watch_hold: float = 60.0,
    ) -> None:
        self.health = health
        self.watches = watches
        self.delay = delay
        self.send_retry_after = send_retry_after
        self.watch_grace = watch_grace
        self.retry_after_hold = retry_after_hold
        self.ignore_sigterm = ignore_sigterm
        self.watch_hold = watch_hold
        self.in_flight = WaitGroup()
        self.not_accepting = False
        self.initiated = asyncio.Event()
        self._signals = 0
        self._busy: Counter[object] = Counter()  # connections (aiohttp protocols) with a request running

    def on_signal(self, name: str) -> None:
        if self.ignore_sigterm:
            klog.info(f"received {name}: ignored (KCP_FAKE_IGNORE_SIGTERM)", "signal.go:1")
            return
        self._signals += 1
        if self._signals > 1:
            os._exit(1)  # second signal: exit directly, as kube does
        self.health.shutting_down = True
        event("ShutdownInitiated")
        self.initiated.set()

    @web.middleware
    async def middleware(self, req: web.Request, handler: Handler) -> web.StreamResponse:
        exempt = is_exempt(req.path)
        if self.not_accepting and self.send_retry_after and not exempt:
            return web.Response(
                status=429,
                text=RETRY_AFTER_MESSAGE + "\n",
                content_type="text/plain",
                charset="utf-8",
                headers={"Retry-After": "5", "Connection": "close", "X-Content-Type-Options": "nosniff"},
            )
        self._busy[req.protocol] += 1
        try:
            if exempt or is_long_running(req):
                return await handler(req)
            self.in_flight.add()
            try:
                response = await handler(req)
            finally:
                self.in_flight.done()
        finally:
            self._busy[req.protocol] -= 1
            if not self._busy[req.protocol]:
                del self._busy[req.protocol]
        if self.not_accepting:  # Go's server keeps no connection alive once it shuts down
            response.force_close()
        return response

    def close_connections(self, connections: Sequence[RequestHandler]) -> None:
        """As Go's `Server.Shutdown`: an idle kept-alive connection closes now, a busy one once its
        request is answered."""
        for connection in connections:
            if connection in self._busy:
                connection.close()
            else:
                connection.force_close()

    async def _wait_in_flight(self, limit_seconds: float) -> None:
        await self.in_flight.wait(limit_seconds)

    async def run(self, stop_listening: Callable[[], Awaitable[None]]) -> None:
        """From the first signal to the moment the process may exit."""
        await self.initiated.wait()
        await asyncio.sleep(self.delay)
        event("AfterShutdownDelayDuration")
        self.not_accepting = True
        event("NotAcceptingNewRequest")
        if self.send_retry_after:
            loop = asyncio.get_running_loop()
            hold_until = loop.time() + self.retry_after_hold
            await self._wait_in_flight(60.0)
            if loop.time() < hold_until:
                await asyncio.sleep(hold_until - loop.time())
            event("InFlightRequestsDrained")
            await stop_listening()
        else:
            await stop_listening()
            await self._wait_in_flight(60.0)
            event("InFlightRequestsDrained")
        if self.watch_grace > 0 and self.watches.open:
            await self.watches.wait_drained(self.watch_grace)
        elif self.watch_hold > 0 and self.watches.open:
            # Without a watch termination grace period (kcp does not pass the flag through) the generic
            # server's HTTP server holds open watches, silent, until its shutdown timeout (60 s) or until
            # their clients close them: measured on kcp v0.31.2, about 64 s to exit with a watch open.
            event("HoldingOpenWatches")
            self.watches.held = True
            await self.watches.wait_drained(self.watch_hold)
        self.watches.stop_all()
        event("HTTPServerStoppedListening")
