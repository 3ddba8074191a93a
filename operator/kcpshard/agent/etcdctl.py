"""etcd's own client, `etcdctl`, as the backup runs it: each call a short child in its own process group,
killed at its deadline, and the line of its output a person can act on.

etcdctl 3.4's `snapshot save` ignores --command-timeout and waits forever on an endpoint that does not
answer (etcd-io/etcd#10298), so each endpoint is first asked for `endpoint status` (which honours the
timeouts), and the save itself is killed at the backup's own deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kcpshard.agent.child import die_with_parent
from kcpshard.agent.snapshot_files import BackupFailed
from kcpshard.timeouts import within


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
        out, err = await within(proc.communicate(), max(timeout, 0.1))
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
