"""EmulatedApiServer: the store, the HTTPS listener and the kubeconfig, started and stopped together.

KMock's `Server` is not used for listening: it serves plain HTTP only and installs a process-wide aiohttp
DNS interceptor plus a client session, which the operator's own aiohttp clients must not share.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from aiohttp import web

from . import tls
from .app import ApiApp
from .errors import ApiError
from .registry import Registry, builtin_types
from .store import Store

log = logging.getLogger(__name__)


class CRDLoadError(Exception):
    """A CRD file could not be read or was refused (the message names the file)."""


def _crd_documents(paths: Sequence[Path]) -> list[tuple[Path, dict[str, Any]]]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml", ".json"))
        else:
            files.append(path)
    docs = []
    for file in files:
        try:
            loaded = list(yaml.safe_load_all(file.read_text()))
        except (OSError, yaml.YAMLError) as exc:
            raise CRDLoadError(f"{file}: cannot read CRDs: {str(exc).splitlines()[0]}") from None
        docs += [
            (file, d) for d in loaded if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition"
        ]
    return docs


class EmulatedApiServer:
    """An in-memory Kubernetes API server over HTTPS with bearer-token authentication."""

    def __init__(
        self,
        workdir: Path,
        crd_paths: Sequence[Path] | Path = (),
        host: str = "127.0.0.1",
        port: int = 0,
        history_size: int = 5000,
        bookmark_interval: float = 5.0,
    ) -> None:
        self.workdir = Path(workdir)
        self.crd_paths = (
            [Path(crd_paths)] if isinstance(crd_paths, str | Path) else [Path(p) for p in crd_paths]
        )
        self.host = host
        self.port = port
        self.history_size = history_size
        self.bookmark_interval = bookmark_interval
        self.token = tls.new_token()
        self.kubeconfig_path = self.workdir / "kubeconfig"
        self.ca_path = self.workdir / "ca.crt"
        self.url = ""
        self.store: Store | None = None
        self._app: ApiApp | None = None
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        registry = Registry()
        for rt in builtin_types():
            registry.add(rt)
        self.store = Store(registry, self.history_size)
        crd_type = registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        assert crd_type is not None
        for file, doc in _crd_documents(self.crd_paths):
            try:
                self.store.create(crd_type, "", doc)
            except ApiError as exc:
                raise CRDLoadError(f"{file}: {exc.message}") from None
        self.ca_path, cert_path, key_path = tls.make_certificates(self.workdir)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        self.url = f"https://{self.host}:{self.port}"
        self._app = ApiApp(self.store, self.token, f"{self.host}:{self.port}", self.bookmark_interval)
        self._runner = web.AppRunner(
            self._app.make_app(), handler_cancellation=True, access_log=None, shutdown_timeout=1.0
        )
        await self._runner.setup()
        site = web.SockSite(self._runner, sock, ssl_context=tls.server_context(cert_path, key_path))
        await site.start()
        tls.write_kubeconfig(self.kubeconfig_path, self.url, self.ca_path, self.token)
        log.info("emulated API server serving on %s (kubeconfig %s)", self.url, self.kubeconfig_path)

    async def stop(self) -> None:
        if self.store is not None:
            self.store.close()  # ends every watch stream
        if self._app is not None:
            for task in list(self._app.watches):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*self._app.watches, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> EmulatedApiServer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
