"""Run a kcp (the stand-in, or `$KCP_BINARY`) as a child process in its own process group, for tests.

Reads the bound port from the `Serving securely on <addr>:<port>` log line, the shard-admin token from
`admin.kubeconfig`, and stops the whole group (SIGTERM, then SIGKILL) so nothing outlives its owner.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import httpx
import yaml

from kcpshard_testkit.fakekcp import kcp_binary

SERVING = re.compile(r"Serving securely on (\S+):(\d+)")
IDENTITY = re.compile(r'"\(re-\)starting leader election" identity="([^"]+)"')
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 15.0, interval: float = 0.05) -> T:
    """Poll `probe` until it returns something other than None/False; fail with `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result is not None and result is not False:
            return result
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class KcpProcess:
    """One `kcp start` child. `args` are the start flags; `env` adds to the current environment."""

    def __init__(
        self,
        root: Path,
        args: Sequence[str],
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.root = Path(root)
        self.args = list(args)
        self.env = dict(env or {})
        self.log_path = log_path or self.root.with_name(self.root.name + ".log")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def start(self) -> KcpProcess:
        env = {**os.environ, **self.env}
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [kcp_binary(), "start", f"--root-directory={self.root}", *self.args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
            )
        return self

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def exit_code(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def wait_exit(self, timeout: float = 15.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def port(self, timeout: float = 15.0) -> int:
        def probe() -> int | None:
            if self.exit_code() is not None:
                raise RuntimeError(f"kcp exited with {self.exit_code()}:\n{self.log()[-2000:]}")
            m = SERVING.search(self.log())
            return int(m.group(2)) if m else None

        return wait_for("the 'Serving securely on' line", probe, timeout)

    def identity(self, timeout: float = 15.0) -> str:
        return wait_for(
            "the leader election identity", lambda: (m := IDENTITY.search(self.log())) and m.group(1), timeout
        )

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port()}"

    def token(self, user: str = "shard-admin") -> str:
        doc = yaml.safe_load((self.root / "admin.kubeconfig").read_text())
        return str(next(u["user"]["token"] for u in doc["users"] if u["name"] == user))

    def client(self, user: str | None = "shard-admin", timeout: float = 5.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token(user)}"} if user else {}
        return httpx.Client(base_url=self.url, verify=False, headers=headers, timeout=timeout)

    def wait_ready(self, timeout: float = 20.0) -> None:
        with httpx.Client(verify=False, timeout=2.0) as c:

            def probe() -> bool:
                if self.exit_code() is not None:
                    raise RuntimeError(f"kcp exited with {self.exit_code()}:\n{self.log()[-2000:]}")
                try:
                    return c.get(f"{self.url}/readyz").status_code == 200
                except httpx.HTTPError:
                    return False

            wait_for("/readyz to answer 200", probe, timeout)

    def signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.proc.wait()
        self.signal(signal.SIGKILL)  # anything left in the group

    def __enter__(self) -> KcpProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
