"""One container as a local process: its own process group, killed with its parent.

Stands in for the container runtime (CRI ``StartContainer``/``StopContainer``): the process runs in a
new session (its own process group, so SIGTERM/SIGKILL reach everything it forked), and
``PR_SET_PDEATHSIG`` makes the kernel SIGKILL it if the runner dies without stopping it. When the main
process ends, the rest of its group is SIGKILLed, as a container's processes die with its PID 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

from kcpshard.agent.child import die_with_parent, exit_code


class ContainerProcess:
    """A started container process."""

    def __init__(self, proc: asyncio.subprocess.Process):
        self._proc = proc
        self.pid = proc.pid

    @classmethod
    async def start(
        cls, argv: Sequence[str], env: Mapping[str, str], cwd: Path, log_path: Path
    ) -> ContainerProcess:
        """Start ``argv``; raises ``OSError`` when it cannot be executed (not found, not executable)."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        parent = os.getpid()
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                env=dict(env),
                cwd=str(cwd),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_fd,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=lambda: die_with_parent(parent),
            )
        finally:
            os.close(log_fd)
        return cls(proc)

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    async def wait(self) -> int:
        """Wait for the main process; then sweep what is left of its group. Returns the exit code."""
        code = await self._proc.wait()
        self._signal_group(signal.SIGKILL)
        return exit_code(code)

    def kill_group(self) -> None:
        """SIGKILL the whole group now (last resort on cancellation)."""
        self._signal_group(signal.SIGKILL)

    def _signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    async def stop(self, grace: float) -> int:
        """SIGTERM the group, SIGKILL after ``grace`` seconds if still alive. Returns the exit code."""
        if self._proc.returncode is None:
            self._signal_group(signal.SIGTERM)
            try:
                await asyncio.wait_for(asyncio.shield(self._proc.wait()), timeout=max(grace, 0.0))
            except TimeoutError:
                self._signal_group(signal.SIGKILL)
        code = await self._proc.wait()
        self._signal_group(signal.SIGKILL)
        return exit_code(code)
