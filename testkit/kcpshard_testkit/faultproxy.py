"""FaultProxy: an HTTPS reverse proxy in front of the API server that runs an action (e.g. SIGKILL of the
operator) right after the API server committed a chosen write and before the client hears of it.

Crash-at-step tests need this because some roll steps last milliseconds: watching for a step and then
killing is racy, while the proxy stands on the only path between the operator and the API server.

The idea follows client-go's ``rest.Config.WrapTransport`` (``staging/src/k8s.io/client-go/transport``):
a round-tripper that sees each request and its answer. Here it is a separate listener so that any client
(httpx, kopf's aiohttp, kubectl) can be pointed at it with a kubeconfig.

Not supported: connection upgrades (exec, attach, port-forward), HTTP/2 (the listener speaks HTTP/1.1
only, which Go clients fall back to through ALPN).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

import aiohttp
import yaml
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from kcpshard.k8s.credentials import load_credentials
from kcpshard_testkit import tls

log = logging.getLogger(__name__)

Predicate = Callable[[str, str, "dict[str, Any] | None"], bool]
Action = Callable[[], object]

WRITE_METHODS = frozenset({"PUT", "PATCH", "POST", "DELETE"})
# RFC 9110 section 7.6.1 hop-by-hop fields, plus what aiohttp computes itself for each hop.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
_SHARDS = "/apis/kcpshard.dev/v1alpha1/"
_SHARD_PATH = re.compile(r"^/apis/kcpshard\.dev/v1alpha1/namespaces/([^/]+)/kcpshards/([^/]+)(/status)?$")
_MAX_BUFFERED = 64 * 1024 * 1024  # answers with a Content-Length up to this are read whole


class FaultProxyError(Exception):
    """The proxy cannot start (the message names the missing file or setting)."""


@runtime_checkable
class ProxyAware(Protocol):
    """A predicate that needs what the proxy has seen (called by ``FaultProxy.arm``)."""

    def bind(self, proxy: FaultProxy) -> None: ...


def _step_of(obj: Any) -> str | None:
    status = obj.get("status") if isinstance(obj, dict) else None
    rollout = status.get("rollout") if isinstance(status, dict) else None
    step = rollout.get("step") if isinstance(rollout, dict) else None
    return step if isinstance(step, str) else None


class StatusStepIs:
    """Matches the status write (PUT or merge PATCH of ``.../kcpshards/<name>/status``) that *enters* `step`.

    Once bound to a proxy, a write whose step equals the step the proxy last saw committed for that shard
    does not match: it keeps the step rather than entering it.
    """

    def __init__(self, shard_name: str, step: str) -> None:
        self.shard_name = shard_name
        self.step = step
        self._proxy: FaultProxy | None = None

    def bind(self, proxy: FaultProxy) -> None:
        self._proxy = proxy

    def __call__(self, method: str, path: str, body: dict[str, Any] | None) -> bool:
        if method not in ("PUT", "PATCH") or body is None:
            return False
        m = _SHARD_PATH.match(path)
        if m is None or m.group(2) != self.shard_name or not m.group(3):
            return False
        if _step_of(body) != self.step:
            return False
        return self._proxy is None or self._proxy.last_step(m.group(1), m.group(2)) != self.step

    def __repr__(self) -> str:
        return f"status_step_is({self.shard_name!r}, {self.step!r})"


def status_step_is(shard_name: str, step: str) -> StatusStepIs:
    """The write of a KcpShard's status that enters ``status.rollout.step == step``."""
    return StatusStepIs(shard_name, step)


def request_is(method: str, path_suffix: str) -> Predicate:
    """Any request with this method whose path (without query) ends with `path_suffix`."""

    def predicate(m: str, path: str, body: dict[str, Any] | None) -> bool:
        return m == method.upper() and path.endswith(path_suffix)

    predicate.__qualname__ = f"request_is({method!r}, {path_suffix!r})"
    return predicate


@dataclass
class _Trigger:
    predicate: Predicate
    action: Action


def _forwarded_headers(headers: Any) -> CIMultiDict[str]:
    out: CIMultiDict[str] = CIMultiDict()
    for key, value in headers.items():
        if key.lower() not in _HOP_BY_HOP:
            out.add(key, value)
    return out


def _decode(data: bytes) -> Any:
    if not data:
        return None
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None


def _rv(obj: dict[str, Any]) -> int:
    raw = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    return int(raw) if raw.isdigit() else -1


class FaultProxy:
    """A TLS reverse proxy with a one-shot fault trigger; see ``arm``.

    `upstream_kubeconfig` is the API server's kubeconfig. The proxy serves the API server's own certificate
    (``apiserver.crt``/``apiserver.key`` next to that kubeconfig unless given), so the CA in the kubeconfig
    verifies the proxy too; ``kubeconfig_path`` is a copy pointing at the proxy, with the same CA and token.
    """

    def __init__(
        self,
        upstream_kubeconfig: Path,
        workdir: Path,
        *,
        cert_path: Path | None = None,
        key_path: Path | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.upstream_kubeconfig = Path(upstream_kubeconfig)
        self.workdir = Path(workdir)
        self.cert_path = cert_path or self.upstream_kubeconfig.parent / "apiserver.crt"
        self.key_path = key_path or self.upstream_kubeconfig.parent / "apiserver.key"
        self.host = host
        self.kubeconfig_path = self.workdir / "kubeconfig"
        self.url = ""
        self.upstream = ""
        self.fired = asyncio.Event()
        self.fired_on: tuple[str, str, dict[str, Any] | None] | None = None
        self.action_error: BaseException | None = None
        self._trigger: _Trigger | None = None
        self._steps: dict[tuple[str, str], tuple[int, str | None]] = {}
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self._handlers: set[asyncio.Task[Any]] = set()

    # --- the trigger ---

    def arm(self, predicate: Predicate, action: Action) -> None:
        """Fire `action` once, after the upstream answered 2xx to the first write matching `predicate`.

        The client of that write then loses its connection without an answer. Arming again replaces the
        previous trigger and clears ``fired``/``fired_on``.
        """
        if isinstance(predicate, ProxyAware):
            predicate.bind(self)
        self._trigger = _Trigger(predicate, action)
        self.fired = asyncio.Event()
        self.fired_on = None
        self.action_error = None

    def disarm(self) -> None:
        self._trigger = None

    @property
    def armed(self) -> bool:
        return self._trigger is not None

    def last_step(self, namespace: str, name: str) -> str | None:
        """The ``status.rollout.step`` of the newest version of this KcpShard seen in an answer."""
        seen = self._steps.get((namespace, name))
        return seen[1] if seen else None

    def _claim(self, method: str, path: str, body: dict[str, Any] | None) -> _Trigger | None:
        """The trigger, taken (so one-shot) if this request matches it. No await: concurrent requests
        cannot both claim it."""
        trigger = self._trigger
        if trigger is None or method not in WRITE_METHODS:
            return None
        try:
            matched = trigger.predicate(method, path, body)
        except Exception as exc:  # a broken predicate must not break the API path of the operator
            log.warning(
                "fault proxy predicate %r raised %s on %s %s",
                trigger.predicate,
                type(exc).__name__,
                method,
                path,
            )
            return None
        if not matched:
            return None
        self._trigger = None
        return trigger

    def _observe(self, data: bytes) -> None:
        """Remember the rollout step of each KcpShard in a committed answer (newest resourceVersion wins)."""
        obj = _decode(data)
        if not isinstance(obj, dict):
            return
        # List items carry no kind (as from a real API server); single objects must say KcpShard.
        if obj.get("kind") == "KcpShardList":
            listed = obj.get("items")
            items = listed if isinstance(listed, list) else []
        else:
            items = [obj] if obj.get("kind") == "KcpShard" else []
        for item in items:
            if not isinstance(item, dict):
                continue
            meta = item.get("metadata") or {}
            key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
            rv = _rv(item)
            if key not in self._steps or rv >= self._steps[key][0]:
                self._steps[key] = (rv, _step_of(item))

    # --- lifecycle ---

    async def start(self) -> None:
        for path in (self.cert_path, self.key_path):
            if not path.is_file():
                raise FaultProxyError(f"no serving certificate file {path}; pass cert_path and key_path")
        config = load_credentials(self.upstream_kubeconfig)
        self.upstream = config.server.rstrip("/")
        self.workdir.mkdir(parents=True, exist_ok=True)
        ssl_ctx = config.ssl_context()
        # limit=0: kopf keeps several watches open; a pool limit would queue the next request behind them.
        connector = aiohttp.TCPConnector(ssl=ssl_ctx, limit=0)
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            auto_decompress=False,  # relay bytes as sent, Content-Encoding included
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
        )
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # handler_cancellation: a client leaving a watch ends the handler, which closes the upstream watch.
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((self.host, 0))
        site = web.SockSite(self._runner, sock, ssl_context=tls.server_context(self.cert_path, self.key_path))
        await site.start()
        self.url = f"https://{self.host}:{sock.getsockname()[1]}"
        self._write_kubeconfig()
        log.info("fault proxy on %s in front of %s", self.url, self.upstream)

    def _write_kubeconfig(self) -> None:
        try:
            config = yaml.safe_load(self.upstream_kubeconfig.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise FaultProxyError(f"{self.upstream_kubeconfig}: cannot read: {type(exc).__name__}") from None
        for cluster in config.get("clusters") or []:
            spec = cluster.get("cluster") or {}
            if str(spec.get("server", "")).rstrip("/") == self.upstream:
                spec["server"] = self.url
        # The copy holds the token: 0600 like the original.
        tls.write_private(self.kubeconfig_path, yaml.safe_dump(config, sort_keys=False).encode())

    async def stop(self) -> None:
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> FaultProxy:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # --- forwarding ---

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            return await self._forward(request)
        finally:
            self._handlers.discard(task)

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        data = await request.read()
        decoded = _decode(data)
        body = decoded if isinstance(decoded, dict) else None
        trigger = self._claim(request.method, request.path, body)
        try:
            return await self._relay(request, data, body, trigger)
        except BaseException:  # the client left (cancelled) or the relay failed: nothing fired
            self._rearm(trigger)
            raise

    def _rearm(self, trigger: _Trigger | None) -> None:
        """Give back a claimed trigger whose write was not committed, unless it was re-armed meanwhile."""
        if trigger is not None and self._trigger is None and not self.fired.is_set():
            self._trigger = trigger

    async def _relay(
        self, request: web.Request, data: bytes, body: dict[str, Any] | None, trigger: _Trigger | None
    ) -> web.StreamResponse:
        assert self._session is not None
        url = URL(self.upstream + request.raw_path, encoded=True)
        try:
            async with self._session.request(
                request.method,
                url,
                headers=_forwarded_headers(request.headers),
                data=data if data else None,
                allow_redirects=False,
            ) as upstream:
                length = upstream.content_length
                bodiless = request.method == "HEAD" or upstream.status in (204, 304)
                # kube-apiserver answers anything over a few KiB chunked, without Content-Length: only a
                # watch is a stream; any other answer is read whole, so a write can fire the trigger.
                if not bodiless and (_is_watch(request) or (length or 0) > _MAX_BUFFERED):
                    self._rearm(trigger)  # a streamed answer is not a committed write
                    return await self._stream(request, upstream)
                answer = await upstream.read()
        except aiohttp.ClientError as exc:
            self._rearm(trigger)
            log.warning(
                "fault proxy: %s %s failed upstream: %s", request.method, request.path, type(exc).__name__
            )
            return _bad_gateway(f"the fault proxy cannot reach the API server: {type(exc).__name__}")
        ok = 200 <= upstream.status < 300
        if ok and request.path.startswith(_SHARDS):
            self._observe(answer)
        if trigger is not None and ok:
            return self._fire(request, trigger, body)
        self._rearm(trigger)  # not committed (e.g. 409 Conflict): its retry is the write to catch
        return web.Response(
            status=upstream.status,
            reason=upstream.reason,
            headers=_forwarded_headers(upstream.headers),
            body=answer,
        )

    def _fire(
        self, request: web.Request, trigger: _Trigger, body: dict[str, Any] | None
    ) -> web.StreamResponse:
        self.fired_on = (request.method, request.path, body)
        try:
            trigger.action()
        except Exception as exc:  # kept for the test to see; the client is dropped all the same
            self.action_error = exc
            log.warning("fault proxy action raised %s", type(exc).__name__)
        self.fired.set()
        log.info("fault proxy fired on %s %s; dropping the client's connection", request.method, request.path)
        if request.transport is not None:
            request.transport.abort()
        # aiohttp's write of this response meets the aborted transport and is dropped as a disconnect.
        return web.Response(status=500)

    async def _stream(self, request: web.Request, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
        """Relay a watch (or any answer without Content-Length) chunk by chunk, as the bytes arrive."""
        resp = web.StreamResponse(
            status=upstream.status, reason=upstream.reason, headers=_forwarded_headers(upstream.headers)
        )
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        try:
            async for chunk in upstream.content.iter_any():
                await resp.write(chunk)
        except aiohttp.ClientPayloadError:
            # The upstream broke off mid-stream: break off too, so the client does not take it for an end.
            if request.transport is not None:
                request.transport.abort()
            return resp
        await resp.write_eof()
        return resp


def _is_watch(request: web.Request) -> bool:
    return request.query.get("watch") in ("true", "1") or "/watch/" in request.path


def _bad_gateway(message: str) -> web.Response:
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "ServiceUnavailable",
        "code": 502,
    }
    return web.Response(status=502, body=json.dumps(status).encode(), content_type="application/json")
