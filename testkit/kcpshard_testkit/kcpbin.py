"""kcp binaries for tests: one small wrapper script per version or per fault.

On a real node every kcp version is its own binary (`spec.kcp.binary`). Tests do the same: a wrapper
sets the stand-in's knobs (its claimed version, a fault such as never becoming ready) and runs it, or
runs `$KCP_BINARY` when that names a real kcp (then the knobs do nothing and the fault tests do not
apply). Changing `spec.kcp.binary` to another wrapper is a spec change, so it rolls like an upgrade.

A wrapper written into the node's binary folder (`NODE_BIN`, the slots' hostPath shows it) runs in the
slot's container, so it runs the stand-in of the test image (`kcpshard-fake-kcp` on its PATH).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from kcpshard_testkit.fakekcp import kcp_binary

NODE_BIN = Path("/var/lib/kcpshard/bin")  # where the README tells users to put kcp binaries
IMAGE_FAKE_KCP = "kcpshard-fake-kcp"  # the stand-in as the test image has it


def make_kcp(directory: Path, name: str, *, command: str | None = None, **knobs: str | float | bool) -> str:
    """Write `<directory>/<name>` and return its path.

    `knobs` are the stand-in's environment knobs without the prefix, e.g. `version="v0.33.0"` for
    KCP_FAKE_VERSION or `never_ready=True` for KCP_FAKE_NEVER_READY. `command` replaces the kcp
    command line altogether (e.g. a process that never listens).
    """
    directory.mkdir(parents=True, exist_ok=True)
    lines = ["#!/bin/sh"]
    for key, value in knobs.items():
        text = ("1" if value else "0") if isinstance(value, bool) else str(value)
        lines.append(f"export KCP_FAKE_{key.upper()}={shlex.quote(text)}")
    program = IMAGE_FAKE_KCP if directory.is_relative_to(NODE_BIN) else kcp_binary()
    lines.append(command if command is not None else f'exec {shlex.quote(program)} "$@"')
    path = directory / name
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)
    return str(path)
