"""`kcpshard agent slot`: the host agent of one KcpSlot (the process of the slot's Job).

It plays, for one kcp process, the part the kubelet plays for a container (`pkg/kubelet/kuberuntime`:
start, report status, stop with a grace period then SIGKILL), and reports on `KcpSlot.status` what only
the host can see: the seeded root material, the bound port, the slot's own `/readyz`, the exit.
Every status write is a read-modify-write (`mutate_status`): the operator writes the same object.

Before kcp starts: one of the store endpoints must accept a TCP connection (kcp would otherwise retry
etcd and never become ready, which says less), the root is seeded, and a non-root shard's kubeconfigs are
copied from their Secrets. Once kcp is ready, its kcp-admin kubeconfig is published in a Secret.

    kcpshard agent slot --namespace NS --slot NAME --secret SECRET --root-dir DIR
                        [--kubeconfig PATH] [--job-name JOB] [--stop-timeout S]
                        [--store-endpoint URL ...] [--store-wait S]
                        [--cache-kubeconfig-secret NAME[:KEY]] [--root-shard-kubeconfig-secret NAME[:KEY]]
                        [--admin-secret NAME --front-url URL] -- <kcp> start <flags...>
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import signal
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

from kcpshard.agent import cli, seed
from kcpshard.agent.child import Child, describe_exit, exit_code
from kcpshard.agent.kine import Kine, KineError, KineStopped, without_dsn
from kcpshard.agent.kine import kcp_command as kine_kcp_command
from kcpshard.agent.procnet import listening_ports
from kcpshard.agent.storecheck import (
    EndpointError,
    StoreEndpoint,
    StoreTLS,
    client_context,
    connect_problem,
    store_endpoint,
    store_tls,
)
from kcpshard.api.conditions import Status, now_precise, set_condition
from kcpshard.k8s.api import KCPSLOTS, SECRETS, ApiClient, ApiError, Conflict, NotFound
from kcpshard.k8s.kubeconfig import KubeconfigError
from kcpshard.k8s.status import mutate_status
from kcpshard.kcp import readyz
from kcpshard.kcp.errors import KcpError
from kcpshard.kcp.kubeconfig import kcp_admin_kubeconfig

log = logging.getLogger("kcpshard.agent.slot")

POLL_FAST = 0.2  # readyz until first ready, and material/port polling
POLL_SLOW = 1.0  # readyz once ready
POLL_STORE = 0.25  # between rounds of connection attempts to the store
STORE_CONNECT_TIMEOUT = 2.0
PUBLISH_ATTEMPTS = 5
WRITE_TIMEOUT = 10.0  # a status write never holds up stopping kcp
API_ERRORS = (ApiError, httpx.HTTPError, KubeconfigError, TimeoutError)
# apimachinery `validation.IsDNS1123Subdomain` (Secret names) and `IsConfigMapKey` (Secret data keys).
_SECRET_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_SECRET_DATA_KEY = re.compile(r"[-._a-zA-Z0-9]{1,253}")


@dataclass(frozen=True)
class Cond:
    type: str
    status: Status
    reason: str
    message: str = ""


@dataclass(frozen=True)
class SecretKey:
    name: str
    key: str


@dataclass
class Options:
    namespace: str
    slot: str
    secret: str
    root_dir: Path
    command: list[str]
    kubeconfig: str | None = None
    job_name: str | None = None
    stop_timeout: float = 60.0
    listen_timeout: float = 300.0
    pod_uid: str | None = field(default=None)
    pod_name: str | None = field(default=None)
    store_endpoints: list[StoreEndpoint] = field(default_factory=list)
    store_wait: float = 20.0
    store_tls_secret: str | None = None
    kine: str | None = None  # the kine binary, when the store is kine
    cache_kubeconfig_secret: SecretKey | None = None
    root_shard_kubeconfig_secret: SecretKey | None = None
    admin_secret: str | None = None
    front_url: str | None = None


class UsageError(Exception):
    pass


def _store_endpoint(url: str) -> StoreEndpoint:
    try:
        return store_endpoint(url)
    except EndpointError as exc:
        raise UsageError(f"--store-endpoint {exc}") from None


def secret_key(option: str, value: str | None) -> SecretKey | None:
    """`NAME[:KEY]`, KEY `kubeconfig` by default (a Secret name and a Secret data key)."""
    if value is None:
        return None
    name, sep, key = value.partition(":")
    key = key if sep else "kubeconfig"
    if not _SECRET_NAME.fullmatch(name) or not _SECRET_DATA_KEY.fullmatch(key):
        raise UsageError(f"{option} takes NAME or NAME:KEY, not {value!r}")
    return SecretKey(name, key)


def front_url(admin_secret: str | None, url: str | None) -> str | None:
    """The server URL of the published kcp-admin kubeconfig; checks --admin-secret along with it."""
    if (admin_secret is None) != (url is None):
        raise UsageError("--admin-secret and --front-url go together")
    if admin_secret is not None and not _SECRET_NAME.fullmatch(admin_secret):
        raise UsageError(f"--admin-secret {admin_secret!r} is not a Secret name")
    if url is not None:
        parts = urlsplit(url)
        if parts.scheme != "https" or not parts.hostname or parts.username or parts.query:
            raise UsageError(
                f"--front-url {url.rpartition('@')[2]} is not a URL like https://kcp.example:6443"
            )
    return url


def parse_args(argv: Sequence[str]) -> Options:
    argv = list(argv)
    if "--" not in argv:
        raise UsageError("the kcp command line must follow `--`")
    split = argv.index("--")
    own, command = argv[:split], argv[split + 1 :]
    if not command:
        raise UsageError("no kcp command after `--`")
    parser = argparse.ArgumentParser(prog="kcpshard agent slot", description="Host agent of one KcpSlot.")
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--slot", required=True, help="name of the KcpSlot")
    parser.add_argument("--secret", required=True, help="the shard's shared-material Secret")
    parser.add_argument("--root-dir", required=True, type=Path, help="kcp's --root-directory")
    parser.add_argument("--kubeconfig", default=None, help="default: $KUBECONFIG, else in-cluster")
    parser.add_argument("--job-name", default=os.environ.get("JOB_NAME"))
    parser.add_argument("--stop-timeout", type=float, default=60.0, help="SIGTERM to SIGKILL, seconds")
    parser.add_argument("--listen-timeout", type=float, default=300.0, help="seconds to wait for the port")
    parser.add_argument(
        "--store-endpoint", action="append", default=[], help="etcd client URL that must answer first"
    )
    parser.add_argument(
        "--store-wait", type=float, default=20.0, help="seconds to wait for the store (or for kine to listen)"
    )
    parser.add_argument(
        "--store-tls-secret",
        help="Secret with the store's ca.crt (and tls.crt, tls.key) for kcp and the check",
    )
    parser.add_argument(
        "--kine", help="kine binary to run first, its DSN in $KINE_ENDPOINT (kcp's --etcd-servers={kine})"
    )
    parser.add_argument("--cache-kubeconfig-secret", help="NAME[:KEY] copied to <root-dir>/cache.kubeconfig")
    parser.add_argument(
        "--root-shard-kubeconfig-secret", help="NAME[:KEY] copied to <root-dir>/root-shard.kubeconfig"
    )
    parser.add_argument("--admin-secret", help="Secret to publish kcp's kcp-admin kubeconfig in, once ready")
    parser.add_argument("--front-url", help="server URL of the published kubeconfig (the shard's front)")
    args = parser.parse_args(own)
    if args.store_wait < 0:
        raise UsageError("--store-wait must not be negative")
    return Options(
        namespace=args.namespace,
        slot=args.slot,
        secret=args.secret,
        root_dir=args.root_dir,
        command=command,
        kubeconfig=args.kubeconfig,
        job_name=args.job_name,
        stop_timeout=args.stop_timeout,
        listen_timeout=args.listen_timeout,
        pod_uid=os.environ.get("POD_UID"),
        pod_name=os.environ.get("POD_NAME"),
        store_endpoints=[_store_endpoint(url) for url in args.store_endpoint],
        store_tls_secret=args.store_tls_secret,
        kine=args.kine,
        store_wait=args.store_wait,
        cache_kubeconfig_secret=secret_key("--cache-kubeconfig-secret", args.cache_kubeconfig_secret),
        root_shard_kubeconfig_secret=secret_key(
            "--root-shard-kubeconfig-secret", args.root_shard_kubeconfig_secret
        ),
        admin_secret=args.admin_secret,
        front_url=front_url(args.admin_secret, args.front_url),
    )


def status_change(
    fields: Mapping[str, Any] | None, conditions: Sequence[Cond], generation: int | None
) -> Any:
    """A `mutate_status` function: set `fields` (None removes one) and the conditions."""

    def fn(status: dict[str, Any]) -> dict[str, Any]:
        for key, value in (fields or {}).items():
            if value is None:
                status.pop(key, None)
            else:
                status[key] = value
        conds = status.get("conditions") or []
        for c in conditions:
            conds = set_condition(
                conds, c.type, c.status, c.reason, c.message, observed_generation=generation
            )
        status["conditions"] = conds
        return status

    return fn


class Fatal(Exception):
    """Stop kcp and exit 1; the condition saying why is already written.

    `ready`: the Ready condition to leave once kcp has stopped, when the cause is written on Ready itself
    (stopping kcp would otherwise replace it with a plain "kcp stopped")."""

    def __init__(self, message: str, ready: Cond | None = None) -> None:
        super().__init__(message)
        self.ready = ready


class SlotAgent:
    def __init__(self, opts: Options, api: ApiClient):
        self.opts = opts
        self.api = api
        self.generation: int | None = None
        self.child: Child | None = None
        self.kine: Kine | None = None  # the slot's own kine, when the store is kine
        self.slot: dict[str, Any] = {}  # the KcpSlot as first read: the owner of the published Secret
        self.stop_requested = asyncio.Event()
        self.ready_once = asyncio.Event()  # Ready=True written for this kcp process
        self.signals = 0
        self.slot_gone = False  # our KcpSlot was deleted: nobody reads our reports any more

    # -- status ------------------------------------------------------------------------------------------

    async def write(self, fields: Mapping[str, Any] | None = None, *conditions: Cond) -> bool:
        """One status change; False (logged) when the API server cannot be reached or refuses."""
        fn = status_change(fields, conditions, self.generation)
        try:
            await asyncio.wait_for(
                mutate_status(
                    self.api,
                    KCPSLOTS,
                    self.opts.namespace,
                    self.opts.slot,
                    fn,
                    uid=(self.slot.get("metadata") or {}).get("uid"),
                ),
                WRITE_TIMEOUT,
            )
            return True
        except NotFound:
            if not self.slot_gone:
                log.info(
                    "KcpSlot %s is gone (deleted, or another object has its name): not reporting", self.where
                )
            self.slot_gone = True
            return False
        except API_ERRORS as exc:
            log.warning(
                "could not write the status of KcpSlot %s: %s", self.where, str(exc) or type(exc).__name__
            )
            return False

    async def persist(self, fields: Mapping[str, Any] | None = None, *conditions: Cond) -> None:
        """A write that must land (pid, port, the upload): retried until it does or the task is cancelled."""
        while not self.slot_gone:
            if await self.write(fields, *conditions):
                return
            await asyncio.sleep(POLL_SLOW)

    @property
    def where(self) -> str:
        return f"{self.opts.namespace}/{self.opts.slot}"

    # -- signals -----------------------------------------------------------------------------------------

    def on_signal(self) -> None:
        self.signals += 1
        if self.signals == 1:
            log.info("stop requested: stopping kcp")
            self.stop_requested.set()
        elif self.child is not None:
            # kcp exits at once on a second signal, as kube-apiserver does (genericapiserver signal handler).
            log.info("second stop request: forwarding it to kcp")
            self.child.signal(signal.SIGTERM)

    # -- the program -------------------------------------------------------------------------------------

    async def main(self) -> int:
        try:
            slot = await self.api.get(KCPSLOTS, self.opts.namespace, self.opts.slot)
        except NotFound:
            return fail(f"KcpSlot {self.where} not found")
        except API_ERRORS as exc:
            return fail(f"cannot read KcpSlot {self.where}: {exc}")
        self.slot = slot
        self.generation = (slot.get("metadata") or {}).get("generation")
        pod = f" in pod {self.opts.pod_name}" if self.opts.pod_name else ""
        starting = f"host agent starting{pod}"
        first = {
            "podUID": self.opts.pod_uid,
            "jobName": self.opts.job_name,
            "startedAt": now_precise(),
            # A new process: nothing of an earlier start of this slot holds any more.
            **dict.fromkeys(("pid", "port", "readyAt", "exitedAt", "exitCode")),
        }
        conds = [Cond(t, "Unknown", "Starting", starting) for t in ("Seeded", "Listening", "Ready")]
        if not await self.write(first, *conds):
            return fail(f"cannot write the status of KcpSlot {self.where}")

        if self.opts.kine is not None:
            started = await self.start_kine(self.opts.kine)
            if not isinstance(started, Kine):
                return started
            self.kine = started
        try:
            return await self.seed_and_run()
        finally:
            if self.kine is not None:
                await self.kine.stop()  # after kcp: it holds kcp's data

    async def seed_and_run(self) -> int:
        tls = await self.read_store_tls()
        if tls is False:
            return 1
        if not await self.wait_for_store(tls):
            return 1
        if self.stop_requested.is_set():
            return await self.stopped_before_start()
        plan, secret = await self.read_secret()
        if plan is None:
            return 1
        kubeconfigs = await self.read_kubeconfigs()
        if kubeconfigs is None:
            return 1
        if tls is not None:
            kubeconfigs = {**kubeconfigs, **tls.files()}
        if not await self.seed_root(plan, kubeconfigs):
            return 1
        if self.stop_requested.is_set():
            return await self.stopped_before_start()
        command, env = self.opts.command, None
        if self.kine is not None:
            command, env = kine_kcp_command(command, self.kine.url), without_dsn(os.environ)
        try:
            self.child = await Child.start(command, env=env)
        except OSError as exc:
            msg = f"cannot start {self.opts.command[0]}: {exc.strerror or exc}"
            await self.write(None, Cond("Ready", "False", "StartFailed", msg))
            return fail(msg)
        log.info("kcp started, pid %d", self.child.pid)
        return await self.supervise(self.child, plan, secret)

    async def start_kine(self, binary: str) -> Kine | int:
        """The slot's kine, listening; else the agent's exit code: 1 (Seeded=False StoreUnreachable written)
        when kine did not start, 0 when a stop came first (as while waiting for an etcd store)."""
        try:
            return await Kine.start(binary, self.opts.store_wait, stop=self.stop_requested)
        except KineStopped:
            return await self.stopped_before_start()
        except KineError as exc:
            await self.write(None, Cond("Seeded", "False", "StoreUnreachable", str(exc)))
            return fail(str(exc))

    async def watch_kine(self, kine: Kine) -> None:
        """kcp cannot serve without its kine: kine ending ends the slot (kcp is stopped)."""
        why = await kine.exited()
        log.error("%s", why)
        ready = Cond("Ready", "False", "StoreExited", why)
        await self.write(None, ready)
        raise Fatal(why, ready)

    async def stopped_before_start(self) -> int:
        stopped = Cond("Ready", "False", "Exited", "stopped before kcp started")
        await self.write({"exitedAt": now_precise()}, stopped)
        return 0

    async def read_store_tls(self) -> StoreTLS | Literal[False] | None:
        """The store's TLS from --store-tls-secret (None when not given); False, with Seeded=False
        written, when the Secret is missing or holds no usable TLS: kcp would fail on its files."""
        name = self.opts.store_tls_secret
        if name is None:
            return None
        where = f"{self.opts.namespace}/{name}"
        try:
            secret = await self.api.get(SECRETS, self.opts.namespace, name)
            tls = store_tls(where, seed.decode_secret_data(secret.get("data")))
            # A CA that does not parse fails here, where the message can say which Secret holds it.
            client_context(tls)
            return tls
        except NotFound:
            reason, msg = "MissingSecret", f"Secret {where} (the store's TLS) not found"
        except (ValueError, seed.SeedError, ssl.SSLError) as exc:
            reason, msg = "InvalidMaterial", f"the store's TLS Secret {where}: {exc}"
        except API_ERRORS as exc:
            fail(f"cannot read Secret {where}: {exc}")
            return False
        await self.write(None, Cond("Seeded", "False", reason, msg))
        fail(msg)
        return False

    async def wait_for_store(self, tls: StoreTLS | None) -> bool:
        """True once one store endpoint accepts a connection (a verified TLS handshake for https), or none
        is given, or a stop came.

        False (Seeded=False StoreUnreachable written) when none did within --store-wait.
        """
        endpoints = self.opts.store_endpoints
        if not endpoints:
            return True
        context = client_context(tls) if any(e.tls for e in endpoints) else None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.opts.store_wait
        while True:
            timeout = min(STORE_CONNECT_TIMEOUT, max(POLL_STORE, deadline - loop.time()))
            problems = await asyncio.gather(*(connect_problem(e, timeout, tls, context) for e in endpoints))
            for endpoint, problem in zip(endpoints, problems, strict=True):
                if problem is None:
                    log.info("store endpoint %s answers", endpoint.url)
                    return True
            left = deadline - loop.time()
            if left <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop_requested.wait(), min(POLL_STORE, left))
                return True
        detail = "; ".join(f"{e.url}: {p}" for e, p in zip(endpoints, problems, strict=True))
        msg = f"none of the store endpoints answered within {self.opts.store_wait:g}s: {detail}"
        await self.write(None, Cond("Seeded", "False", "StoreUnreachable", msg))
        fail(msg)
        return False

    async def read_secret(self) -> tuple[seed.SeedPlan | None, dict[str, Any]]:
        name = self.opts.secret
        try:
            secret: dict[str, Any] | None = await self.api.get(SECRETS, self.opts.namespace, name)
        except NotFound:
            secret = None
        except API_ERRORS as exc:
            fail(f"cannot read Secret {self.opts.namespace}/{name}: {exc}")
            return None, {}
        try:
            plan = seed.plan_seed(secret)
        except seed.SeedError as exc:
            await self.write(None, Cond("Seeded", "False", "InvalidMaterial", str(exc)))
            fail(str(exc))
            return None, {}
        if plan.kind is seed.SeedKind.SECRET_NOT_FOUND:
            msg = f"Secret {self.opts.namespace}/{name} not found"
        elif plan.kind is seed.SeedKind.INCOMPLETE:
            msg = f"Secret {name} holds only part of the root material; missing: {', '.join(plan.missing)}"
        else:
            return plan, secret or {}
        await self.write(None, Cond("Seeded", "False", plan.kind.value, msg))
        fail(msg)
        return None, {}

    async def read_kubeconfigs(self) -> dict[str, bytes] | None:
        """A non-root shard's kubeconfigs from their Secrets (file name -> content).

        None, with Seeded=False written, when a Secret or its key is missing: kcp must not start without
        them (it would fail its flag validation, or run without the cache server).
        """
        wanted = (
            (seed.CACHE_KUBECONFIG, self.opts.cache_kubeconfig_secret),
            (seed.ROOT_SHARD_KUBECONFIG, self.opts.root_shard_kubeconfig_secret),
        )
        files: dict[str, bytes] = {}
        for filename, ref in wanted:
            if ref is None:
                continue
            where = f"Secret {self.opts.namespace}/{ref.name}"
            reason = "MissingSecret"
            try:
                value = seed.secret_value(await self.api.get(SECRETS, self.opts.namespace, ref.name), ref.key)
                msg = f"{where} has no key {ref.key}"
            except NotFound:
                value, msg = None, f"{where} not found"
            except seed.SeedError as exc:
                value, reason, msg = None, "InvalidMaterial", f"{where}: {exc}"
            except API_ERRORS as exc:
                fail(f"cannot read {where}: {exc}")
                return None
            if value is None:
                await self.write(None, Cond("Seeded", "False", reason, msg))
                fail(msg)
                return None
            files[filename] = value
        return files

    async def seed_root(self, plan: seed.SeedPlan, kubeconfigs: Mapping[str, bytes]) -> bool:
        try:
            seed.wipe_root(self.opts.root_dir)
            if plan.kind is seed.SeedKind.SEEDED:
                seed.write_material(self.opts.root_dir, plan.files)
            for name, content in kubeconfigs.items():
                seed.write_private_file(self.opts.root_dir, name, content)
        except (OSError, seed.SeedError) as exc:
            msg = f"cannot prepare {self.opts.root_dir}: {getattr(exc, 'strerror', None) or exc}"
            await self.write(None, Cond("Seeded", "False", "RootDirFailed", msg))
            fail(msg)
            return False
        if plan.kind is seed.SeedKind.SEEDED:
            msg = f"root material copied from Secret {self.opts.secret}"
        else:
            msg = "first slot of the shard: kcp generates the root material"
        if kubeconfigs:
            msg += f"; {' and '.join(kubeconfigs)} written from their Secrets"
        log.info("%s", msg)
        await self.write(None, Cond("Seeded", "True", plan.kind.value, msg))
        return True

    async def supervise(self, child: Child, plan: seed.SeedPlan, secret: dict[str, Any]) -> int:
        workers = [asyncio.create_task(self.watch_kcp(child))]
        if self.kine is not None:
            workers.append(asyncio.create_task(self.watch_kine(self.kine)))
        if plan.kind is seed.SeedKind.FRESH_START:
            workers.append(asyncio.create_task(self.upload_material(secret)))
        if self.opts.admin_secret:
            workers.append(asyncio.create_task(self.publish_admin(self.opts.admin_secret)))
        exited = asyncio.create_task(child.wait())
        stop = asyncio.create_task(self.stop_requested.wait())
        waiting: set[asyncio.Task[Any]] = {exited, stop, *workers}
        result = 0
        final: Cond | None = None  # the Ready condition a Fatal leaves once kcp stopped
        while True:
            done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if exited in done or stop in done:
                break
            failed = [t for t in done if t.exception() is not None]
            if failed:
                exc = failed[0].exception()
                if isinstance(exc, Fatal):
                    final = exc.ready
                else:
                    log.error("host agent failed: %s", exc)
                result = 1
                break
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)

        if exited.done() and not self.stop_requested.is_set() and result == 0:
            return await self.report_crash(child)
        stop.cancel()
        await self.stop_kcp(child, final)
        return result

    async def report_crash(self, child: Child) -> int:
        returncode = child.proc.returncode or 0
        await child.drained()
        tail = child.tail()
        msg = f"kcp exited by itself: {describe_exit(returncode)}"
        if tail:
            msg += "; last lines: " + " | ".join(tail)
        log.error("kcp exited by itself: %s", describe_exit(returncode))
        child.kill_group()  # anything kcp left behind
        await self.write(
            {"exitedAt": now_precise(), "exitCode": exit_code(returncode)},
            Cond("Ready", "False", "ProcessExited", msg),
            Cond("Listening", "False", "ProcessExited", "kcp is not running"),
        )
        return 1

    async def stop_kcp(self, child: Child, ready: Cond | None = None) -> None:
        """SIGTERM, wait up to --stop-timeout, then SIGKILL; report the exit. Works without the API server.

        `ready`: the cause that stopped kcp, kept as the Ready condition with the exit added."""
        stopping = asyncio.create_task(
            self.write(None, Cond("Ready", "False", "Stopping", "host agent is stopping kcp"))
        )
        child.signal(signal.SIGTERM)
        unlistened = asyncio.create_task(self.report_unlistened(child))
        try:
            returncode = await asyncio.wait_for(child.wait(), self.opts.stop_timeout)
        except TimeoutError:
            log.warning("kcp did not stop within %ss: killing it", self.opts.stop_timeout)
            child.kill_group()
            returncode = await child.wait()
        finally:
            unlistened.cancel()
        child.kill_group()
        await child.drained()
        await stopping
        stopped = f"kcp stopped: {describe_exit(returncode)}"
        log.info("%s", stopped)
        if ready is not None:
            ready = Cond(ready.type, ready.status, ready.reason, f"{ready.message}; {stopped}")
        await self.write(
            {"exitedAt": now_precise(), "exitCode": exit_code(returncode)},
            ready or Cond("Ready", "False", "Exited", stopped),
            Cond("Listening", "False", "Exited", "kcp is not running"),
        )

    async def report_unlistened(self, child: Child) -> None:
        """Once a stopping kcp closed its listener (after its shutdown delay), say so: what it still serves
        are long-running requests (watches), which kcp holds until its HTTP server's shutdown timeout
        (60 s) unless the front closes them; the operator asks the front to, so their clients resume on
        the new slot at once."""
        while True:
            try:
                if not listening_ports(child.pid):
                    break
            except OSError:
                return  # gone: the exit is reported by the caller
            await asyncio.sleep(POLL_FAST / 2)
        log.info("kcp stopped listening; it serves only the requests still open")
        await self.write(None, Cond("Listening", "False", "ShuttingDown", "kcp stopped listening"))

    async def watch_kcp(self, child: Child) -> None:
        await self.persist({"pid": child.pid})
        port = await self.wait_for_port(child)
        await self.persist(
            {"port": port}, Cond("Listening", "True", "Bound", f"listening on 127.0.0.1:{port}")
        )
        log.info("kcp listens on 127.0.0.1:%d", port)
        await self.watch_ready(port)

    async def wait_for_port(self, child: Child) -> int:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.opts.listen_timeout
        ports: list[int] = []
        while loop.time() < deadline:
            try:
                ports = listening_ports(child.pid)
            except OSError:
                ports = []  # the process is gone or going: the exit is reported by the caller
            if len(ports) == 1:
                return ports[0]
            await asyncio.sleep(POLL_FAST / 2)
        found = ", ".join(map(str, ports)) or "none"
        msg = f"kcp did not listen on exactly one port within {self.opts.listen_timeout:g}s (found: {found})"
        await self.write(None, Cond("Listening", "False", "ListenTimeout", msg))
        log.error("%s", msg)
        raise Fatal(msg)

    async def watch_ready(self, port: int) -> None:
        """Poll /readyz: fast until ready, then every second; write only when readiness changes."""
        client: httpx.AsyncClient | None = None
        written: bool | None = None  # the readiness last written; None: still Starting
        try:
            while True:
                if client is None:
                    try:
                        ca = seed.last_certificate((self.opts.root_dir / "apiserver.crt").read_bytes())
                        client = readyz.client_for(ca)
                    except (OSError, ValueError, seed.SeedError):
                        await asyncio.sleep(POLL_FAST)
                        continue
                result = await readyz.probe(client, port)
                if result.ok and written is not True:
                    fields = {"readyAt": now_precise()} if written is None else None
                    msg = f"readyz ok on 127.0.0.1:{port}"
                    if await self.write(fields, Cond("Ready", "True", "ReadyzOK", msg)):
                        log.info("kcp is ready")
                        written = True
                        self.ready_once.set()
                elif (
                    not result.ok
                    and written is True
                    and await self.write(None, Cond("Ready", "False", "ReadyzFailing", result.detail))
                ):
                    log.warning("kcp is not ready: %s", result.detail)
                    written = False
                await asyncio.sleep(POLL_SLOW if written is not None else POLL_FAST)
        finally:
            if client is not None:
                await client.aclose()

    async def upload_material(self, secret: dict[str, Any]) -> None:
        """Fresh start: once kcp has written the five files, put them into the shard's Secret.

        The PUT carries the resourceVersion read before seeding, so of two fresh slots only one wins; the
        loser re-reads and accepts the winner's material only when it is the same as its own.
        """
        files = await self.wait_for_material()
        name = self.opts.secret
        for _ in range(5):
            try:
                await self.api.replace(
                    SECRETS, self.opts.namespace, name, seed.secret_with_material(secret, files)
                )
            except Conflict:
                secret, plan = await self.current_secret()
            except NotFound:
                secret, plan = {}, seed.SeedPlan(seed.SeedKind.SECRET_NOT_FOUND)
            except API_ERRORS as exc:
                log.warning("could not upload the root material to Secret %s, retrying: %s", name, exc)
                await asyncio.sleep(POLL_SLOW)
                continue
            else:
                msg = f"root material uploaded to Secret {name}"
                log.info("%s", msg)
                await self.persist(None, Cond("Seeded", "True", "FreshStart", msg))
                return
            if plan.kind is seed.SeedKind.FRESH_START:
                continue  # another field of the Secret changed: try again with the new resourceVersion
            if plan.kind is seed.SeedKind.SEEDED and plan.files == files:
                same = f"root material is in Secret {name}"
                await self.persist(None, Cond("Seeded", "True", "FreshStart", same))
                return
            if plan.kind is seed.SeedKind.SEEDED:
                msg = f"Secret {name} got other root material while this slot started fresh; restart the slot"
            elif plan.kind is seed.SeedKind.SECRET_NOT_FOUND:
                msg = f"Secret {name} was deleted; cannot upload the root material"
            else:
                msg = f"Secret {name} now holds part of the root material; missing: {', '.join(plan.missing)}"
            await self.write(None, Cond("Seeded", "False", "MaterialConflict", msg))
            log.error("%s", msg)
            raise Fatal(msg)
        msg = f"Secret {name} kept changing; gave up uploading the root material"
        await self.write(None, Cond("Seeded", "False", "MaterialConflict", msg))
        raise Fatal(msg)

    async def publish_admin(self, name: str) -> None:
        """Once kcp is ready: its kcp-admin kubeconfig (a new token on every start) in Secret `name`.

        A few tries, then a logged error: kcp serves on whether or not the Secret could be written.
        """
        await self.ready_once.wait()
        for attempt in range(1, PUBLISH_ATTEMPTS + 1):
            try:
                text = (self.opts.root_dir / "admin.kubeconfig").read_bytes()
                kubeconfig = kcp_admin_kubeconfig(text, server=self.opts.front_url)
                body = seed.admin_secret(name, self.opts.namespace, kubeconfig, self.slot)
                await self.create_or_replace(body)
            except OSError as exc:
                problem = f"cannot read admin.kubeconfig: {exc.strerror or type(exc).__name__}"
            except (KcpError, *API_ERRORS) as exc:  # kcp.kubeconfig's messages never hold a token
                problem = str(exc) or type(exc).__name__
            else:
                log.info("published kcp-admin kubeconfig in Secret %s", name)
                return
            log.warning(
                "could not publish the kcp-admin kubeconfig in Secret %s (try %d): %s", name, attempt, problem
            )
            await asyncio.sleep(POLL_SLOW)
        log.error("gave up publishing the kcp-admin kubeconfig in Secret %s; kcp keeps running", name)

    async def create_or_replace(self, body: dict[str, Any]) -> None:
        """Create the Secret; when it exists, replace it guarded by the resourceVersion just read."""
        name = body["metadata"]["name"]
        try:
            await self.api.create(SECRETS, self.opts.namespace, body)
        except Conflict:
            current = await self.api.get(SECRETS, self.opts.namespace, name)
            version = (current.get("metadata") or {}).get("resourceVersion")
            body = {**body, "metadata": {**body["metadata"], "resourceVersion": version}}
            await self.api.replace(SECRETS, self.opts.namespace, name, body)  # a 409 here: the next try

    async def current_secret(self) -> tuple[dict[str, Any], seed.SeedPlan]:
        """The Secret now and what it holds; retries while the API server is unreachable."""
        while True:
            try:
                secret = await self.api.get(SECRETS, self.opts.namespace, self.opts.secret)
                return secret, seed.plan_seed(secret)
            except NotFound:
                return {}, seed.SeedPlan(seed.SeedKind.SECRET_NOT_FOUND)
            except seed.SeedError:
                return {}, seed.SeedPlan(seed.SeedKind.INCOMPLETE)
            except API_ERRORS as exc:
                log.warning("could not read Secret %s, retrying: %s", self.opts.secret, exc)
                await asyncio.sleep(POLL_SLOW)

    async def wait_for_material(self) -> dict[str, bytes]:
        """The five files once complete, consistent and unchanged across two polls (kcp has finished them)."""
        previous: dict[str, bytes] | None = None
        while True:
            files = seed.read_material(self.opts.root_dir)
            if not seed.material_problems(files):
                if files == previous:
                    return files
                previous = files
            else:
                previous = None
            await asyncio.sleep(POLL_FAST)


def fail(message: str) -> int:
    return cli.fail("kcpshard agent slot", message)


async def _amain(opts: Options) -> int:
    try:
        api = ApiClient.from_kubeconfig(opts.kubeconfig)
    except KubeconfigError as exc:
        return fail(str(exc))
    agent = SlotAgent(opts, api)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, agent.on_signal)
    try:
        return await agent.main()
    finally:
        if agent.child is not None and agent.child.proc.returncode is None:
            agent.child.kill_group()  # never leave kcp behind, whatever went wrong
            with contextlib.suppress(Exception):
                await agent.child.wait()
        await api.aclose()


def run(argv: list[str]) -> int:
    cli.setup_logging("slot-agent")
    try:
        opts = parse_args(argv)
    except UsageError as exc:
        return fail(str(exc))
    return asyncio.run(_amain(opts))
