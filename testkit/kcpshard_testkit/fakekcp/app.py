"""`kcp start`: the start-up order and the run loop of the stand-in.

Imitates `cmd/kcp/kcp.go` (RunE: complete, validate, run), `pkg/server/options/options.go` `Complete`
(the free-port listener is created before anything else; ExternalAddress from `--shard-base-url`'s host,
else the bind address), `pkg/server/server.go` `Run` (admin.kubeconfig is written *before* serving starts;
bootstrap and the leader election run as post-start hooks, i.e. after `Serving securely on ...`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import signal
import socket
import ssl
from collections.abc import Coroutine
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from kcpshard_testkit.fakekcp import bootstrap, flags, klog, rootfiles
from kcpshard_testkit.fakekcp.etcdstore import EtcdStore, StoreError
from kcpshard_testkit.fakekcp.health import Health, HealthState
from kcpshard_testkit.fakekcp.knobs import Knobs
from kcpshard_testkit.fakekcp.leader import LeaderElector, Timings, new_identity
from kcpshard_testkit.fakekcp.resources import WatchTracker
from kcpshard_testkit.fakekcp.server import build_app
from kcpshard_testkit.fakekcp.shutdown import Lifecycle
from kcpshard_testkit.fakekcp.workspaces import WorkspaceController


class StartError(Exception):
    """Start-up failed: printed by main() as kcp's `"command failed" err="..."` line, exit 1."""


def listen(bind_address: str, port: int) -> socket.socket:
    """The one listening socket, as `CreateListener` makes it."""
    family = socket.AF_INET6 if ipaddress.ip_address(bind_address).version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((bind_address, port))
    except OSError as e:
        sock.close()
        raise StartError(
            f"failed to listen on {bind_address}:{port}: listen tcp {bind_address}:{port}: "
            f"bind: {e.strerror.lower() if e.strerror else e}"
        ) from None
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def external_address(opts: flags.Options, bound_host: str, bound_port: int) -> str:
    if opts.shard_base_url:
        host = urlsplit(opts.shard_base_url).netloc
        if host:
            return host
    host = f"[{bound_host}]" if ":" in bound_host else bound_host
    return f"{host}:{bound_port}"


def cert_hosts(opts: flags.Options, bound_host: str) -> list[str]:
    hosts = [bound_host, "127.0.0.1", "localhost"]
    for url in (opts.shard_base_url, opts.shard_external_url):
        h = urlsplit(url).hostname if url else None
        if h:
            hosts.append(h)
    return [h for h in hosts if h not in ("0.0.0.0", "::")]


class Kcp:
    def __init__(self, opts: flags.Options, knobs: Knobs) -> None:
        self.opts = opts
        self.knobs = knobs
        self.root = Path(opts.root_directory).absolute()
        self.state = HealthState()
        self.identity = new_identity()
        self.tasks: list[asyncio.Task[None]] = []
        self.bootstrapped = asyncio.Event()

    def _path(self, p: str) -> Path:
        return Path(p) if os.path.isabs(p) else self.root / p

    async def run(self) -> int:
        opts, knobs = self.opts, self.knobs
        errs = flags.validate(opts, knobs.version)
        if errs:
            raise StartError(flags.aggregate(errs))
        batteries = flags.complete_batteries(opts)
        klog.info(f'"running with selected batteries" batteries="{",".join(batteries)}"', "kcp.go:140")
        try:
            rootfiles.mkdir_root(self.root)
            sock = listen(opts.bind_address, 0 if opts.experimental_bind_free_port else opts.secure_port)
        except rootfiles.RootFilesError as e:
            raise StartError(str(e)) from None
        bound_host, bound_port = sock.getsockname()[:2]
        ext = external_address(opts, bound_host, bound_port)
        base_url = f"https://{ext}"
        hosts = cert_hosts(opts, bound_host)
        crt, key = await asyncio.to_thread(rootfiles.ensure_serving_cert, self.root, hosts)
        await asyncio.to_thread(rootfiles.ensure_sa_key, self.root, knobs.rsa_bits)
        token_store = self._path(opts.authentication_admin_token_path)
        tokens = rootfiles.apply_admin_authentication(token_store)
        store = EtcdStore(opts.etcd_servers, opts.etcd_prefix)
        watches = WatchTracker()
        health = Health(store, self.state)
        lifecycle = Lifecycle(
            self.state,
            watches,
            opts.shutdown_delay_duration,
            opts.shutdown_send_retry_after,
            opts.shutdown_watch_termination_grace_period,
            knobs.retry_after_hold,
            knobs.ignore_sigterm,
            knobs.watch_hold,
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lifecycle.on_signal, sig.name)
        if "admin" in batteries:
            try:
                rootfiles.write_kubeconfig(
                    self._path(opts.kubeconfig_path),
                    token_store,
                    tokens,
                    base_url,
                    crt.read_bytes(),
                    with_user="user" in batteries,
                )
            except rootfiles.RootFilesError as e:
                sock.close()
                await store.close()
                raise StartError(str(e)) from None
        ssl_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ssl_ctx.load_cert_chain(crt, key)
        ssl_ctx.set_alpn_protocols(["http/1.1"])
        app = build_app(store, health, lifecycle, watches, tokens.authenticate, knobs.version)
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        site = web.SockSite(runner, sock, ssl_context=ssl_ctx)
        await site.start()
        shown = f"[{bound_host}]:{bound_port}" if ":" in bound_host else f"{bound_host}:{bound_port}"
        klog.info(f"Serving securely on {shown}", "secure_serving.go:213")
        self._post_start(store, base_url)

        async def stop_listening() -> None:
            await site.stop()
            if runner.server is not None:
                lifecycle.close_connections(list(runner.server.connections))

        try:
            await lifecycle.run(stop_listening)
        finally:
            for t in self.tasks:
                t.cancel()
            for t in self.tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
            await runner.cleanup()
            await store.close()
        return 0

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        self.tasks.append(asyncio.ensure_future(coro))

    def _post_start(self, store: EtcdStore, base_url: str) -> None:
        knobs = self.knobs
        self._spawn(self._bootstrap(store, base_url))
        self._spawn(self._startup_timer())
        if knobs.crash_after is not None:
            self._spawn(self._crash(knobs.crash_after))
        if self.opts.enable_leader_election:
            elector = LeaderElector(
                store, self.identity, Timings(knobs.lease_duration, knobs.renew_deadline, knobs.retry_period)
            )
            self._spawn(elector.run())
            is_leader = lambda: elector.is_leader  # noqa: E731
        else:
            is_leader = lambda: True  # noqa: E731
        controller = WorkspaceController(
            store, base_url, self.opts.shard_name, self.identity, is_leader, knobs.controller_period
        )
        self._spawn(self._after_bootstrap(controller.run()))

    async def _after_bootstrap(self, coro: Coroutine[Any, Any, None]) -> None:
        await self.bootstrapped.wait()
        await coro

    async def _bootstrap(self, store: EtcdStore, base_url: str) -> None:
        while True:
            try:
                await bootstrap.run(store, self.opts, base_url, self.knobs.version)
                break
            except StoreError as e:
                klog.error(f'"failed to bootstrap, retrying" err="{e}"', "server.go:420")
                await asyncio.sleep(1.0)
        klog.info(
            f'"finished bootstrapping the shard" shard="{self.opts.shard_name}" '
            f'version="{self.knobs.version}"',
            "server.go:430",
        )
        self.state.bootstrapped = True
        self.bootstrapped.set()

    async def _startup_timer(self) -> None:
        await asyncio.sleep(self.knobs.startup_seconds)
        if not self.knobs.never_ready:
            self.state.started = True

    async def _crash(self, after: float) -> None:
        await asyncio.sleep(after)
        klog.error("panic: crashing on purpose (KCP_FAKE_CRASH_AFTER_SECONDS)", "server.go:1")
        os._exit(2)
