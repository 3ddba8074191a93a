"""A server process of the test stack (etcd, kube-apiserver, kube-controller-manager) that cannot leak.

Each runs in its own process group with PR_SET_PDEATHSIG=SIGKILL (so it dies with the process that
started it, even by SIGKILL), its stdout and stderr in one log file; `stop` sends SIGTERM, then SIGKILL to
the whole group after a timeout. PR_SET_PDEATHSIG follows the *thread* that forked: start daemons from
the thread that lives as long as they should (the event loop's), never from a short-lived worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

from kcpshard.agent.child import die_with_parent
from kcpshard_testkit.waiting import wait_for

STOP_TIMEOUT_SECONDS = 10.0


class DaemonError(RuntimeError):
    """A daemon could not start, or exited while it was awaited."""


class Daemon:
    def __init__(
        self, name: str, argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc is not None else None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        parent = os.getpid()
        with self.log_path.open("ab") as log:
            try:
                self._proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    start_new_session=True,
                    preexec_fn=lambda: die_with_parent(parent),
                )
            except OSError as exc:
                raise DaemonError(f"cannot run {self.argv[0]}: {exc.strerror}") from None

    def check_running(self) -> None:
        """Raise `DaemonError`, with the end of the log, when the process has exited."""
        code = self.returncode
        if code is not None:
            raise DaemonError(f"{self.name} exited with code {code}; last log lines:\n{self.log_tail()}")

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join("    " + line for line in text.splitlines()[-lines:])

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> int | None:
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
        signal_group(proc.pid, signal.SIGKILL)  # whatever it started goes with it
        return proc.returncode

    async def astop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> int | None:
        return await asyncio.to_thread(self.stop, timeout)

    async def wait_ready(self, what: str, ready: Callable[[], Awaitable[bool]], timeout: float) -> None:
        """Wait until `ready()`; `DaemonError` (with the log's end) when the process exits or time is up."""

        async def ready_or_exited() -> bool:
            return self.returncode is not None or await ready()

        try:
            await wait_for(f"{self.name}: {what}", ready_or_exited, timeout)
        except TimeoutError as exc:
            raise DaemonError(f"{exc}; last log lines of {self.log_path}:\n{self.log_tail()}") from None
        self.check_running()


def signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
