"""The real parts built from our Go modules (`hack/tools/build.sh`, `make tools`): where they are.

`hack/tools/bin/` of the checkout holds links to kube-apiserver, kube-controller-manager, etcd and etcdctl
3.6, kcp and kine; `KCPSHARD_TOOLS_BIN` points elsewhere (e.g. a shared build).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_BIN = REPO / "hack" / "tools" / "bin"


class ToolMissing(RuntimeError):
    """A real part is not built."""


def tools_bin() -> Path:
    return Path(os.environ.get("KCPSHARD_TOOLS_BIN") or DEFAULT_BIN)


def has_tool(name: str) -> bool:
    path = tools_bin() / name
    return path.is_file() and os.access(path, os.X_OK)


def tool(name: str) -> Path:
    """The path of a built binary, or `ToolMissing` saying how to build it."""
    if not has_tool(name):
        raise ToolMissing(
            f"{name} is not built ({tools_bin() / name} is missing): run `make tools` "
            f"(or `bash hack/tools/build.sh {name}`)"
        )
    return tools_bin() / name
