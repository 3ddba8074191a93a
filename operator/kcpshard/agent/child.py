"""The kcp child process of the host agent: started so it cannot outlive the agent, its log passed through.

Like the kubelet's container runtime, the agent is the only parent: the child gets its own process group
(so a final SIGKILL reaches anything it started) and PR_SET_PDEATHSIG SIGKILL (prctl(2)), so it dies when
the agent dies, even by SIGKILL.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import os
import re
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import BinaryIO

from kcpshard.timeouts import within

PR_SET_PDEATHSIG = 1
# Lines of the child's stderr that may carry a credential are never copied into a status message.
_SECRETISH = re.compile(r"token|bearer|password|secret", re.IGNORECASE)
HIDDEN_LINE = "[line hidden: it may hold a credential]"
# Colour codes (kine's logrus forces them even into a pipe) have no place in a status message.
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
# A line of a child that scrubs its output is passed on at this length even without its end, so a child
# that never ends a line cannot fill the agent's memory.
MAX_LINE = 65536


def die_with_parent(parent_pid: int) -> None:
    """Runs in the forked child before exec."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


class Child:
    """A running kcp: its process, and the tail of its stderr for the exit report."""

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        tail_lines: int,
        out: BinaryIO,
        on_line: Callable[[str], None] | None = None,
        scrub: Callable[[bytes], bytes] | None = None,
    ):
        self.proc = proc
        self._tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._out = out
        self._on_line = on_line
        self._scrub = scrub
        self._pump = asyncio.create_task(self._pass_through())

    @property
    def pid(self) -> int:
        return self.proc.pid

    @classmethod
    async def start(
        cls,
        command: Sequence[str],
        *,
        tail_lines: int = 5,
        out: BinaryIO | None = None,
        env: Mapping[str, str] | None = None,
        on_line: Callable[[str], None] | None = None,
        scrub: Callable[[bytes], bytes] | None = None,
    ) -> Child:
        """Start `command` (with `env`, else the agent's); `on_line` sees each stderr line as it comes.

        With `scrub`, stderr is passed on (and kept, and shown to `on_line`) a whole line at a time, each
        line through `scrub` first: for a child that may print a secret it was given.
        Raises OSError when it cannot be executed."""
        parent = os.getpid()
        proc = await asyncio.create_subprocess_exec(
            *command,
            env=None if env is None else dict(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=None,  # inherited: kcp's stdout goes straight to the agent's
            stderr=asyncio.subprocess.PIPE,
            process_group=0,
            preexec_fn=lambda: die_with_parent(parent),
        )
        return cls(proc, tail_lines, out or sys.stdout.buffer, on_line, scrub)

    async def _pass_through(self) -> None:
        """Copy stderr to the agent's stdout as it comes, keeping the last lines."""
        assert self.proc.stderr is not None
        if self._scrub is not None:
            await self._pass_lines(self._scrub)
            return
        partial = b""
        while True:
            chunk = await self.proc.stderr.read(65536)
            if not chunk:
                break
            self._write(chunk)
            lines = (partial + chunk).split(b"\n")
            partial = lines.pop()[-4096:]
            for line in lines:
                self._remember(line)
        self._remember(partial)

    async def _pass_lines(self, scrub: Callable[[bytes], bytes]) -> None:
        """Whole lines through `scrub`: a secret split across two reads is still one line when scrubbed."""
        assert self.proc.stderr is not None
        partial = b""
        while True:
            chunk = await self.proc.stderr.read(65536)
            if not chunk:
                break
            lines = (partial + chunk).split(b"\n")
            partial = lines.pop()
            if len(partial) >= MAX_LINE:
                lines.append(partial)
                partial = b""
            for line in lines:
                self._pass_line(scrub(line))
        if partial:
            self._pass_line(scrub(partial))

    def _pass_line(self, line: bytes) -> None:
        self._write(line + b"\n")
        self._remember(line)

    def _write(self, data: bytes) -> None:
        try:
            self._out.write(data)
            self._out.flush()
        except (OSError, ValueError):
            pass  # a closed stdout must not stop the drain, or kcp would block on a full pipe

    def _remember(self, raw: bytes) -> None:
        line = raw.decode("utf-8", errors="replace").rstrip()
        if line:
            self._tail.append(line)
            if self._on_line is not None:
                self._on_line(line)

    def tail(self) -> list[str]:
        """The last stderr lines without colour codes, any line that looks like it holds a credential
        replaced."""
        lines = (_COLOUR.sub("", line) for line in self._tail)
        return [HIDDEN_LINE if _SECRETISH.search(line) else line[:300] for line in lines]

    def signal(self, signum: int) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signum)

    def kill_group(self) -> None:
        """SIGKILL the whole process group (the child and anything it started)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    async def wait(self) -> int:
        return await self.proc.wait()

    async def drained(self, limit: float = 2.0) -> None:
        """Wait for the end of stderr (bounded: a grandchild may hold the pipe open)."""
        try:
            await within(asyncio.shield(self._pump), limit)
        except TimeoutError:
            self._pump.cancel()


def exit_code(returncode: int) -> int:
    """Shell and kubelet convention: killed by signal N is 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name} (exit code {exit_code(returncode)})"
    return f"exit code {returncode}"
