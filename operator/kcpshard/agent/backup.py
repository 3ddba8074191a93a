"""`kcpshard agent backup`: snapshot the shard's etcd before a roll (the process of the backup Job).

It runs etcd's own client, `etcdctl snapshot save` (`etcdctl/ctlv3/command/snapshot_command.go`), against
one endpoint that answers, keeps the newest `--keep` snapshots in `--dir`, and reports on its own Job's
annotations (read by `kcpshard.k8s.backup_job.backup_result`).

    kcpshard agent backup --namespace NS --job-name NAME --endpoint URL [--endpoint URL...]
                          [--tls-secret NAME] --dir DIR [--keep N] [--timeout S] [--kubeconfig PATH]

etcdctl 3.4's `snapshot save` ignores --command-timeout and waits forever on an endpoint that does not
answer (etcd-io/etcd#10298), so each endpoint is first asked for `endpoint status` (which honours the
timeouts), and the save itself is killed at the agent's own deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx

from kcpshard.agent import cli
from kcpshard.agent.child import die_with_parent
from kcpshard.agent.seed import SeedError, decode_secret_data
from kcpshard.agent.storecheck import store_tls
from kcpshard.k8s.api import JOBS, SECRETS, ApiClient, ApiError, NotFound
from kcpshard.k8s.backup_job import (
    ANNOTATION_BYTES,
    ANNOTATION_ERROR,
    ANNOTATION_PATH,
    ANNOTATION_SECONDS,
    BACKUP_KEEP,
)
from kcpshard.k8s.kubeconfig import KubeconfigError

log = logging.getLogger("kcpshard.agent.backup")

PROG = "kcpshard agent backup"
TLS_KEYS = {"ca.crt": "--cacert", "tls.crt": "--cert", "tls.key": "--key"}
# Snapshot files: `<UTC timestamp>-<job>.db`; only these are ever pruned.
SNAPSHOT_NAME = re.compile(r"^(?P<stamp>\d{8}T\d{6}Z)-.+\.db(?P<part>\.part)?$")
PATCH_RETRY_SECONDS = 30.0
INTERRUPTED = "backup interrupted by a stop signal (the Job's deadline or its deletion); no snapshot kept"


class UsageError(Exception):
    pass


class BackupFailed(Exception):
    """A failure with a one-line message a person can act on."""


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


# -- etcdctl --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    returncode: int | None  # None: killed at the deadline
    stdout: str
    stderr: str


async def run_command(command: Sequence[str], timeout: float) -> Run:
    """Run a short child in its own process group; SIGKILL the group at `timeout` or on cancellation."""
    parent = os.getpid()
    # Our own etcdctl flags win: an ETCDCTL_ENDPOINTS in the environment would make etcdctl refuse them.
    env = {k: v for k, v in os.environ.items() if not k.startswith("ETCDCTL_")}
    env["ETCDCTL_API"] = "3"
    try:
        proc = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            process_group=0,
            preexec_fn=lambda: die_with_parent(parent),
        )
    except OSError as exc:
        raise BackupFailed(f"cannot run {command[0]}: {exc.strerror or exc}") from None
    try:
        out, err = await asyncio.wait_for(proc.communicate(), max(timeout, 0.1))
    except TimeoutError:
        _kill_group(proc.pid)
        await proc.wait()
        return Run(None, "", "")
    except BaseException:
        _kill_group(proc.pid)
        with contextlib.suppress(Exception):
            await asyncio.shield(proc.wait())
        raise
    _kill_group(proc.pid)  # nothing etcdctl started may stay behind
    return Run(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _innermost_desc(error: str) -> str:
    """`rpc error: code = X desc = ...: desc = "transport: ..."` -> the last, most specific part."""
    tail = error.rsplit("desc = ", 1)[-1].strip()
    return tail.strip('"').replace('\\"', '"')


def etcdctl_error(stderr: str, returncode: int | None = None) -> str:
    """The line of etcdctl's output a person can act on.

    etcdctl prints `Error: <why>` last; `endpoint status` prints `Failed to get the status of endpoint E
    (<why>)` instead; its zap log lines (JSON) carry the dial error, which says more than a deadline.
    """
    primary = ""
    detail = ""
    for raw in stderr.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("error"):
                detail = _innermost_desc(str(entry["error"]))
            continue
        if line.startswith("Error:"):
            primary = line.removeprefix("Error:").strip()
        elif match := re.match(r"^Failed to get the status of endpoint \S+ \((.*)\)$", line):
            primary = match.group(1)
        elif not primary:
            primary = line
    if not primary:
        primary = detail or (f"exit code {returncode}" if returncode is not None else "no output")
    elif detail and detail not in primary:
        primary = f"{primary}: {detail}"
    return " ".join(primary.split())[:400]


class Etcdctl:
    """etcdctl invocations with the TLS flags and timeouts of this backup."""

    def __init__(self, binary: str, tls_flags: Sequence[str], connect_timeout: float):
        self.binary = binary
        self.tls_flags = list(tls_flags)
        self.connect_timeout = connect_timeout

    def _base(self, endpoint: str) -> list[str]:
        seconds = max(1, round(self.connect_timeout))
        return [
            self.binary,
            f"--endpoints={endpoint}",
            f"--dial-timeout={seconds}s",
            f"--command-timeout={seconds}s",
            *self.tls_flags,
        ]

    async def check(self, endpoint: str) -> str | None:
        """None when the endpoint answers `endpoint status`, else why not."""
        run = await run_command([*self._base(endpoint), "endpoint", "status"], self.connect_timeout + 5)
        if run.returncode == 0:
            return None
        if run.returncode is None:
            return f"no answer within {self.connect_timeout + 5:.0f}s"
        return etcdctl_error(run.stderr, run.returncode)

    async def save(self, endpoint: str, path: Path, timeout: float) -> str | None:
        """None once the snapshot is at `path`, else why not."""
        run = await run_command([*self._base(endpoint), "snapshot", "save", str(path)], timeout)
        if run.returncode == 0:
            return None
        if run.returncode is None:
            return f"no snapshot after {timeout:.0f}s"
        return etcdctl_error(run.stderr, run.returncode)

    async def status(self, path: Path, timeout: float) -> tuple[int | None, str | None]:
        """(keys in the snapshot, None) when etcdctl can read it, else (None, why not)."""
        run = await run_command([self.binary, "snapshot", "status", "-w", "json", str(path)], timeout)
        if run.returncode != 0:
            why = "timed out" if run.returncode is None else etcdctl_error(run.stderr, run.returncode)
            return None, why
        try:
            keys = json.loads(run.stdout).get("totalKey")
            return (int(keys) if keys is not None else None), None
        except (ValueError, AttributeError, TypeError):
            return None, None


# -- files ----------------------------------------------------------------------------------------------


def snapshot_path(directory: Path, job_name: str, when: datetime | None = None) -> Path:
    stamp = (when or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return directory / f"{stamp}-{job_name}.db"


def prepare_dir(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o700)
    except OSError as exc:
        raise BackupFailed(f"cannot prepare backup dir {directory}: {exc.strerror or exc}") from None


def prune(directory: Path, keep: int, current: Path) -> list[Path]:
    """Delete all but the newest `keep` snapshots (`current` always stays) and leftover partial files."""
    snapshots: list[tuple[str, int, Path]] = []
    leftovers: list[Path] = []
    for entry in directory.iterdir():
        match = SNAPSHOT_NAME.match(entry.name)
        if match is None or entry == current or not entry.is_file():
            continue
        if match.group("part"):
            leftovers.append(entry)  # a save killed before it finished (one backup runs at a time)
        else:
            snapshots.append((match.group("stamp"), entry.stat().st_mtime_ns, entry))
    snapshots.sort(reverse=True)
    doomed = [entry for _, _, entry in snapshots[keep - 1 :]] + leftovers
    for entry in doomed:
        entry.unlink(missing_ok=True)
    return doomed


def _remove_partial(path: Path) -> None:
    for leftover in (path, path.with_name(path.name + ".part")):
        with contextlib.suppress(OSError):
            leftover.unlink(missing_ok=True)


def write_tls_files(directory: Path, data: dict[str, str], secret: str) -> list[str]:
    """Decode the Secret's TLS keys into 0600 files; returns etcdctl's flags. Never echoes the contents."""
    try:
        decoded = decode_secret_data({k: v for k, v in data.items() if k in TLS_KEYS})
    except SeedError as exc:
        raise BackupFailed(f"TLS Secret {secret}: {exc}") from None
    try:
        # The same reading of the Secret as the slot agent's store check (ca.crt, tls.crt with tls.key).
        tls = store_tls(secret, decoded)
    except ValueError as exc:
        raise BackupFailed(f"TLS {exc}") from None
    contents = {"ca.crt": tls.ca, "tls.crt": tls.cert, "tls.key": tls.key}
    flags: list[str] = []
    for key, flag in TLS_KEYS.items():
        content = contents[key]
        if content is None:
            continue
        path = directory / key
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(content)
        except OSError as exc:
            raise BackupFailed(f"cannot write {key} of TLS Secret {secret}: {exc.strerror or exc}") from None
        flags.append(f"{flag}={path}")
    return flags


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
                _remove_partial(path)
        try:
            for gone in prune(self.opts.directory, self.opts.keep, path):
                log.info("pruned old snapshot %s", gone.name)
        except OSError as exc:
            log.warning("could not prune old snapshots in %s: %s", self.opts.directory, exc)
        return Snapshot(path=path, seconds=seconds, size_bytes=size, keys=keys)

    async def annotate(self, annotations: dict[str, str | None], budget: float = PATCH_RETRY_SECONDS) -> None:
        """Merge-patch this Job's annotations; retried while the API server is unreachable or busy."""
        body = {"metadata": {"annotations": annotations}}
        deadline = time.monotonic() + budget
        while True:
            try:
                await self.api.patch(JOBS, self.opts.namespace, self.opts.job_name, body)
                return
            except (ApiError, httpx.HTTPError) as exc:
                retry = isinstance(exc, httpx.TransportError) or (
                    isinstance(exc, ApiError) and (exc.status >= 500 or exc.status == 429)
                )
                if not retry or time.monotonic() >= deadline:
                    raise
                log.warning("could not annotate Job %s, retrying: %s", self.opts.job_name, exc)
                await asyncio.sleep(1.0)

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


async def _amain(opts: Options) -> int:
    try:
        api = ApiClient.from_kubeconfig(opts.kubeconfig)
    except KubeconfigError as exc:
        return fail(str(exc))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        return await BackupAgent(opts, api).main(stop)
    finally:
        await api.aclose()


def run(argv: list[str]) -> int:
    cli.setup_logging("backup-agent")
    try:
        opts = parse_args(argv)
    except UsageError as exc:
        return fail(str(exc))
    return asyncio.run(_amain(opts))
