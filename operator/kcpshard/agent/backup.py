"""`kcpshard agent backup`: snapshot the shard's etcd before a roll (the process of the backup Job).

It runs etcd's own client, `etcdctl snapshot save` (etcdctl.py), against one endpoint that answers, keeps
the newest `--keep` snapshots in `--dir` (snapshot_files.py), and reports on its own Job's annotations
(read by `kcpshard.k8s.backup_job.backup_result`).

    kcpshard agent backup --namespace NS --job-name NAME --endpoint URL [--endpoint URL...]
                          [--tls-secret NAME] --dir DIR [--keep N] [--timeout S] [--kubeconfig PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from kcpshard import retry
from kcpshard.agent import cli
from kcpshard.agent.errors import UsageError
from kcpshard.agent.etcdctl import Etcdctl
from kcpshard.agent.snapshot_files import (
    BackupFailed,
    prepare_dir,
    prune,
    remove_partial,
    snapshot_path,
    write_tls_files,
)
from kcpshard.k8s.api import JOBS, SECRETS, ApiClient, ApiError, NotFound
from kcpshard.k8s.backup_job import (
    ANNOTATION_BYTES,
    ANNOTATION_ERROR,
    ANNOTATION_PATH,
    ANNOTATION_SECONDS,
    BACKUP_KEEP,
)

log = logging.getLogger("kcpshard.agent.backup")

PROG = "kcpshard agent backup"


PATCH_RETRY_SECONDS = 30.0


INTERRUPTED = "backup interrupted by a stop signal (the Job's deadline or its deletion); no snapshot kept"


@dataclass
class Options:
    namespace: str
    job_name: str
    endpoints: list[str]
    directory: Path
    keep: int = BACKUP_KEEP
    tls_secret: str | None = None
    timeout: float = 600.0
    connect_timeout: float = 5.0
    kubeconfig: str | None = None
    etcdctl: str = "etcdctl"


@dataclass(frozen=True)
class Snapshot:
    path: Path
    seconds: float
    size_bytes: int
    keys: int | None


def parse_args(argv: Sequence[str]) -> Options:
    parser = argparse.ArgumentParser(prog=PROG, description="Snapshot the shard's etcd (etcdctl).")
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--job-name", default=os.environ.get("JOB_NAME"), help="default: $JOB_NAME")
    parser.add_argument("--endpoint", action="extend", nargs="+", required=True, help="etcd client URL")
    parser.add_argument("--tls-secret", default=None, help="Secret with ca.crt, tls.crt, tls.key")
    parser.add_argument("--dir", required=True, type=Path, help="folder of the snapshots on the node")
    parser.add_argument("--keep", type=int, default=BACKUP_KEEP, help="snapshots kept in --dir")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for the whole backup")
    parser.add_argument("--connect-timeout", type=float, default=5.0, help="seconds per endpoint check")
    parser.add_argument("--kubeconfig", default=None, help="default: $KUBECONFIG, else in-cluster")
    parser.add_argument("--etcdctl", default="etcdctl", help="etcdctl binary (default: from PATH)")
    args = parser.parse_args(list(argv))
    if not args.job_name:
        raise UsageError("--job-name is required (or $JOB_NAME)")
    if args.keep < 1:
        raise UsageError("--keep must be at least 1")
    if args.timeout <= 0 or args.connect_timeout <= 0:
        raise UsageError("--timeout and --connect-timeout must be positive")
    return Options(
        namespace=args.namespace,
        job_name=args.job_name,
        endpoints=list(args.endpoint),
        directory=args.dir,
        keep=args.keep,
        tls_secret=args.tls_secret,
        timeout=args.timeout,
        connect_timeout=args.connect_timeout,
        kubeconfig=args.kubeconfig,
        etcdctl=args.etcdctl,
    )


# -- the program ----------------------------------------------------------------------------------------


class BackupAgent:
    def __init__(self, opts: Options, api: ApiClient):
        self.opts = opts
        self.api = api

    async def tls_flags(self, tmp: Path) -> list[str]:
        name = self.opts.tls_secret
        if name is None:
            return []
        where = f"{self.opts.namespace}/{name}"
        try:
            secret = await self.api.get(SECRETS, self.opts.namespace, name)
        except NotFound:
            raise BackupFailed(f"TLS Secret {where} not found") from None
        except (ApiError, httpx.HTTPError) as exc:
            raise BackupFailed(f"cannot read TLS Secret {where}: {str(exc) or type(exc).__name__}") from None
        return write_tls_files(tmp, dict(secret.get("data") or {}), where)

    async def choose_endpoint(self, etcdctl: Etcdctl) -> str:
        """The first endpoint that answers: etcdctl 3.4 saves a snapshot from exactly one."""
        reasons: list[str] = []
        for endpoint in self.opts.endpoints:
            why = await etcdctl.check(endpoint)
            if why is None:
                return endpoint
            log.warning("etcd endpoint %s does not answer: %s", endpoint, why)
            if why not in reasons:
                reasons.append(why)
        raise BackupFailed(self.failure("; ".join(reasons), self.opts.endpoints))

    @staticmethod
    def failure(why: str, endpoints: Sequence[str]) -> str:
        return f"etcdctl snapshot save failed: {why} (endpoints {', '.join(endpoints)})"

    async def backup(self) -> Snapshot:
        started = time.monotonic()
        binary = shutil.which(self.opts.etcdctl)
        if binary is None:
            raise BackupFailed(
                f"{self.opts.etcdctl} not found in PATH: the backup image needs etcdctl (Debian: etcd-client)"
            )
        prepare_dir(self.opts.directory)
        tmp = Path(tempfile.mkdtemp(prefix="kcpshard-etcd-tls-"))  # 0700
        try:
            etcdctl = Etcdctl(binary, await self.tls_flags(tmp), self.opts.connect_timeout)
            endpoint = await self.choose_endpoint(etcdctl)
            return await self.save(etcdctl, endpoint, started)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    async def save(self, etcdctl: Etcdctl, endpoint: str, started: float) -> Snapshot:
        path = snapshot_path(self.opts.directory, self.opts.job_name)
        remaining = self.opts.timeout - (time.monotonic() - started)
        if remaining < 1:
            raise BackupFailed(
                self.failure(f"no time left of --timeout {self.opts.timeout:.0f}s", [endpoint])
            )
        log.info("saving a snapshot of %s to %s", endpoint, path)
        kept = False
        seconds = 0.0
        try:
            begin = time.monotonic()
            why = await etcdctl.save(endpoint, path, remaining)
            seconds = time.monotonic() - begin
            if why is not None:
                raise BackupFailed(self.failure(why, [endpoint]))
            path.chmod(0o600)
            keys, unreadable = await etcdctl.status(path, max(5.0, remaining - seconds))
            if unreadable is not None:
                raise BackupFailed(f"the snapshot etcdctl wrote cannot be read back: {unreadable}")
            size = path.stat().st_size
            kept = True
        except OSError as exc:
            raise BackupFailed(f"cannot finish the snapshot {path}: {exc.strerror or exc}") from None
        finally:
            if not kept:
                remove_partial(path)
        try:
            for gone in prune(self.opts.directory, self.opts.keep, path):
                log.info("pruned old snapshot %s", gone.name)
        except OSError as exc:
            log.warning("could not prune old snapshots in %s: %s", self.opts.directory, exc)
        return Snapshot(path=path, seconds=seconds, size_bytes=size, keys=keys)

    async def annotate(self, annotations: dict[str, str | None], budget: float = PATCH_RETRY_SECONDS) -> None:
        """Merge-patch this Job's annotations; retried while the API server is unreachable or busy."""
        body = {"metadata": {"annotations": annotations}}

        async def once() -> None:
            await self.api.patch(JOBS, self.opts.namespace, self.opts.job_name, body)

        def warn(exc: BaseException, _: float) -> None:
            log.warning("could not annotate Job %s, retrying: %s", self.opts.job_name, exc)

        await retry.retrying(
            once, passing=retry.not_now, backoff=retry.Backoff.every(1.0), budget=budget, on_retry=warn
        )

    async def report_failure(self, message: str, budget: float = PATCH_RETRY_SECONDS) -> int:
        try:
            await self.annotate({ANNOTATION_ERROR: message}, budget)
        except (ApiError, httpx.HTTPError) as exc:
            return fail(f"{message} (and the Job cannot be annotated: {str(exc) or type(exc).__name__})")
        return fail(message)

    async def main(self, stop: asyncio.Event) -> int:
        work = asyncio.ensure_future(self.backup())
        stopper = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({work, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        if not work.done():
            work.cancel()  # kills etcdctl and removes the partial file
            with contextlib.suppress(asyncio.CancelledError, BackupFailed):
                await work
            return await self.report_failure(INTERRUPTED, budget=5.0)
        try:
            snap = work.result()
        except BackupFailed as exc:
            return await self.report_failure(str(exc))
        keys = f", {snap.keys} keys" if snap.keys is not None else ""
        log.info("snapshot saved: %s (%d bytes%s, %.3fs)", snap.path, snap.size_bytes, keys, snap.seconds)
        report: dict[str, str | None] = {
            ANNOTATION_PATH: str(snap.path),
            ANNOTATION_SECONDS: f"{snap.seconds:.3f}",
            ANNOTATION_BYTES: str(snap.size_bytes),
            ANNOTATION_ERROR: None,
        }
        try:
            await self.annotate(report)
        except (ApiError, httpx.HTTPError) as exc:
            why = str(exc) or type(exc).__name__
            return fail(
                f"snapshot saved at {snap.path}, but Job {self.opts.job_name} cannot be annotated: {why}"
            )
        return 0


def fail(message: str) -> int:
    return cli.fail(PROG, message)


async def _work(opts: Options, api: ApiClient) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    return await BackupAgent(opts, api).main(stop)


def run(argv: Sequence[str]) -> int:
    return cli.main("backup", argv, parse_args, _work)
