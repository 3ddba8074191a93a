"""A real etcd server for tests and local runs (`/usr/bin/etcd` from Debian's etcd-server).

Starts one single-member etcd on free 127.0.0.1 client and peer ports with its own data dir, waits for
`/health`, and stops it with SIGTERM then SIGKILL on its own process group, so nothing outlives it.
Usable from async code (`async with EtcdServer(...)`) and from plain code (`start_sync`/`stop_sync`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

import httpx

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
    """The etcd binary, or a clear error when the Debian package is not installed."""
    path = os.environ.get("ETCD_BINARY", ETCD_BINARY)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        found = shutil.which("etcd")
        if found is None:
            raise EtcdError("etcd not found: install the Debian package etcd-server")
        path = found
    return path


class EtcdServer:
    """One etcd member on loopback. `endpoint` is `http://127.0.0.1:PORT` once started."""

    def __init__(self, workdir: Path, name: str = "etcd") -> None:
        self.workdir = Path(workdir)
        self.name = name
        self.endpoint = ""
        self.data_dir = self.workdir / f"{name}.data"
        self.log_path = self.workdir / f"{name}.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start_sync(self) -> None:
        binary = etcd_binary()
        self.workdir.mkdir(parents=True, exist_ok=True)
        # A port picked free can be taken before etcd binds it: retry with fresh ports.
        last_error = ""
        for _ in range(3):
            client, peer = _free_port(), _free_port()
            client_url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
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
            with open(self.log_path, "ab") as log:
                self._proc = subprocess.Popen(
                    args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
                )
            self.endpoint = client_url
            ok, last_error = self._wait_healthy()
            if ok:
                return
            self.stop_sync()
        raise EtcdError(f"etcd did not become healthy: {last_error} (log: {self.log_path})")

    def _wait_healthy(self) -> tuple[bool, str]:
        assert self._proc is not None
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        last = "not started"
        with httpx.Client(timeout=1.0) as client:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    return False, f"etcd exited with code {self._proc.returncode}"
                try:
                    resp = client.get(f"{self.endpoint}/health")
                    if resp.status_code == 200 and resp.json().get("health") in ("true", True):
                        return True, ""
                    last = f"HTTP {resp.status_code}"
                except (httpx.HTTPError, ValueError) as e:
                    last = type(e).__name__
                time.sleep(0.05)
        return False, f"timed out ({last})"

    def stop_sync(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
        # Children of the group (none expected) must not survive either.
        _signal_group(proc.pid, signal.SIGKILL)

    async def start(self) -> None:
        await asyncio.to_thread(self.start_sync)

    async def stop(self) -> None:
        await asyncio.to_thread(self.stop_sync)

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


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
