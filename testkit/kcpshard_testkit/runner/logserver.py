"""The kubelet's container-log endpoint for the pods this runner runs, so `kubectl logs` works.

kube-apiserver serves `pods/<name>/log` by asking the pod's node: HTTPS to the Node's
`status.daemonEndpoints.kubeletEndpoint.Port` at its InternalIP (`pkg/kubelet/server/server.go`
`getContainerLogs`: GET /containerLogs/<namespace>/<pod>/<container>). Without
`--kubelet-certificate-authority` the API server does not verify the kubelet's serving certificate,
as on a kubeadm cluster by default, so a certificate of our own CA serves.

What differs from a kubelet: one log file per container, appended across restarts, so `previous` gets
the same file; `timestamps` adds none (the runner does not stamp lines); `sinceSeconds` is ignored.
`tailLines`, `limitBytes` and `follow` work as on a kubelet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from kcpshard_testkit.apiserver.tls import server_context
from kcpshard_testkit.pki import CertificateAuthority

log = logging.getLogger("kcpshard.runner.logs")

FOLLOW_POLL_SECONDS = 0.2


def tail(data: bytes, lines: int | None, limit: int | None) -> bytes:
    """The last `lines` lines (all when None), then at most `limit` bytes of them, as the kubelet cuts."""
    if lines is not None:
        if lines <= 0:
            data = b""
        else:
            parts = data.splitlines(keepends=True)
            data = b"".join(parts[-lines:])
    if limit is not None and limit >= 0:
        data = data[:limit]
    return data


def _int(value: str | None) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError as exc:
        raise web.HTTPBadRequest(text=f"not a number: {value!r}") from exc


class LogServer:
    """Serves /containerLogs from `sandbox/pods/<ns>_<pod>_<uid8>/<container>.log`."""

    def __init__(self, sandbox: Path, running: Callable[[str, str], bool]) -> None:
        self.sandbox = sandbox
        self.running = running  # (namespace, pod) -> the pod still runs here (for follow)
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def start(self) -> int:
        app = web.Application()
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self._logs)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        certs = self.sandbox / "kubelet-pki"
        certs.mkdir(parents=True, exist_ok=True)
        cert, key = CertificateAuthority().serving().write(certs / "kubelet.crt", certs / "kubelet.key")
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=server_context(cert, key))
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _file(self, namespace: str, pod: str, container: str) -> Path:
        dirs = sorted(
            (self.sandbox / "pods").glob(f"{namespace}_{pod}_*"),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        for directory in dirs:  # the newest pod of that name (a re-created pod has a new uid)
            path = directory / f"{container}.log"
            if path.exists():
                return path
        raise web.HTTPNotFound(text=f'container "{container}" in pod "{pod}" has no log on this node')

    async def _logs(self, request: web.Request) -> web.StreamResponse:
        m, q = request.match_info, request.query
        path = self._file(m["namespace"], m["pod"], m["container"])
        lines, limit = _int(q.get("tailLines")), _int(q.get("limitBytes"))
        data = tail(path.read_bytes(), lines, limit)
        if q.get("follow") not in ("true", "1"):
            return web.Response(body=data, content_type="text/plain")
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        await response.write(data)
        offset = path.stat().st_size
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            while True:
                size = path.stat().st_size
                if size > offset:
                    with path.open("rb") as f:
                        f.seek(offset)
                        await response.write(f.read(size - offset))
                    offset = size
                elif not self.running(m["namespace"], m["pod"]):
                    break
                await asyncio.sleep(FOLLOW_POLL_SECONDS)
        return response
