"""A real etcd server for tests and local runs: etcd 3.6 from `make tools`, else Debian's etcd-server.

Starts one single-member etcd on free 127.0.0.1 client and peer ports with its own data dir, waits for
`/health`, and stops it with SIGTERM then SIGKILL on its own process group; it also dies with the process
that started it (PR_SET_PDEATHSIG, `daemon.py`), so nothing outlives it. Usable from async code
(`async with EtcdServer(...)`) and from plain code (`start_sync`/`stop_sync`). etcd 3.5 and newer run with
`--unsafe-no-fsync` (a test store need not survive a power cut).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

import httpx

from kcpshard_testkit import tools
from kcpshard_testkit.daemon import Daemon, DaemonError

ETCD_BINARY = "/usr/bin/etcd"
START_TIMEOUT_SECONDS = 20.0
STOP_TIMEOUT_SECONDS = 5.0


class EtcdError(RuntimeError):
    """etcd could not be found, started or reached."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def etcd_binary() -> str:
    """`$ETCD_BINARY`, else etcd 3.6 of `make tools`, else Debian's, else PATH's; a clear error if none."""
    candidates = [os.environ.get("ETCD_BINARY", ""), str(tools.tools_bin() / "etcd"), ETCD_BINARY]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    found = shutil.which("etcd")
    if found is None:
        raise EtcdError(
            "etcd not found: run `make tools` (etcd 3.6) or install the Debian package etcd-server"
        )
    return found


@functools.cache
def etcd_version(binary: str) -> tuple[int, int]:
    """(major, minor) from `etcd --version`; (0, 0) when it cannot be read."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return (0, 0)
    match = re.search(r"etcd Version: (\d+)\.(\d+)", out)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


class EtcdServer:
    """One etcd member on loopback. `endpoint` is `http://127.0.0.1:PORT` once started."""

    def __init__(self, workdir: Path, name: str = "etcd", binary: str | None = None) -> None:
        self.workdir = Path(workdir)
        self.name = name
        self.binary = binary
        self.endpoint = ""
        self.data_dir = self.workdir / f"{name}.data"
        self.log_path = self.workdir / f"{name}.log"
        self._daemon: Daemon | None = None

    @property
    def pid(self) -> int | None:
        return self._daemon.pid if self._daemon is not None else None

    def _spawn(self) -> None:
        """Start etcd on fresh free ports (in the calling thread: see daemon.py)."""
        binary = self.binary or etcd_binary()
        self.workdir.mkdir(parents=True, exist_ok=True)
        client_url, peer_url = f"http://127.0.0.1:{_free_port()}", f"http://127.0.0.1:{_free_port()}"
        args = [
            binary,
            f"--name={self.name}",
            f"--data-dir={self.data_dir}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster={self.name}={peer_url}",
            "--initial-cluster-state=new",
            "--logger=zap",
        ]
        if etcd_version(binary) >= (3, 5):
            args.append("--unsafe-no-fsync")
        self._daemon = Daemon(self.name, args, self.log_path)
        self._daemon.start()
        self.endpoint = client_url

    def start_sync(self) -> None:
        # A port picked free can be taken before etcd binds it: retry with fresh ports.
        last_error = ""
        for _ in range(3):
            self._spawn()
            ok, last_error = self._wait_healthy()
            if ok:
                return
            self.stop_sync()
        raise EtcdError(f"etcd did not become healthy: {last_error} (log: {self.log_path})")

    def _wait_healthy(self) -> tuple[bool, str]:
        assert self._daemon is not None
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        last = "not started"
        with httpx.Client(timeout=1.0) as client:
            while time.monotonic() < deadline:
                if self._daemon.returncode is not None:
                    return False, f"etcd exited with code {self._daemon.returncode}"
                try:
                    resp = client.get(f"{self.endpoint}/health")
                    if _healthy(resp):
                        return True, ""
                    last = f"HTTP {resp.status_code}"
                except (httpx.HTTPError, ValueError) as e:
                    last = type(e).__name__
                time.sleep(0.05)
        return False, f"timed out ({last})"

    def stop_sync(self) -> None:
        daemon, self._daemon = self._daemon, None
        if daemon is not None:
            daemon.stop(STOP_TIMEOUT_SECONDS)

    async def start(self) -> None:
        last_error = ""
        for _ in range(3):
            self._spawn()
            assert self._daemon is not None
            async with httpx.AsyncClient(timeout=1.0) as client:

                async def healthy() -> bool:
                    try:
                        return _healthy(await client.get(f"{self.endpoint}/health"))
                    except (httpx.HTTPError, ValueError):
                        return False

                try:
                    await self._daemon.wait_ready("/health", healthy, START_TIMEOUT_SECONDS)
                    return
                except DaemonError as exc:
                    last_error = str(exc)
            await self.stop()
        raise EtcdError(f"etcd did not become healthy: {last_error}")

    async def stop(self) -> None:
        daemon, self._daemon = self._daemon, None
        if daemon is not None:
            await daemon.astop(STOP_TIMEOUT_SECONDS)

    async def __aenter__(self) -> EtcdServer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def __enter__(self) -> EtcdServer:
        self.start_sync()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop_sync()


def _healthy(resp: httpx.Response) -> bool:
    return resp.status_code == 200 and resp.json().get("health") in ("true", True)
