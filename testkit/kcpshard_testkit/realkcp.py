"""Real kcp for the end-to-end tests: the binaries `make tools` builds into hack/tools/bin.

`NEWER` is the newest kcp release that builds from its Go modules here, `OLDER` the older minor used for
a real version upgrade (hack/tools/build.sh says why these two). A missing binary is an error that says
what to run, never a skip: the suite is meant to run on real kcp.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from kcpshard_testkit.kcpbin import NODE_BIN
from kcpshard_testkit.scenario import processes
from kcpshard_testkit.stack import Stack

TOOLS_BIN = Path(__file__).resolve().parents[2] / "hack" / "tools" / "bin"

# binary name in hack/tools/bin -> the kcp version it was built from (hack/tools/build.sh)
VERSIONS = {"kcp": "v0.31.2", "kcp-v0.30": "v0.30.0"}
NEWER, OLDER = "kcp", "kcp-v0.30"


@dataclass(frozen=True)
class RealKcp:
    version: str
    binary: str


def real_kcp(name: str) -> RealKcp:
    """The real kcp `name` (an absolute path, as the node sees its binaries)."""
    path = TOOLS_BIN / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `make tools` (builds kcp from its Go modules)")
    return RealKcp(VERSIONS[name], str(path))


def real_kcp_processes(where: Stack | Path) -> list[int]:
    """Pids of real kcp processes of a stack's workloads (their argv[0] is a binary of hack/tools/bin, or
    one put on the node by `on_the_node`)."""
    names = {str(TOOLS_BIN / name).encode() for name in VERSIONS}
    names |= {str(NODE_BIN / f"kcp-{version}").encode() for version in VERSIONS.values()}
    return [pid for pid, args in processes(where).items() if args and args[0] in names]


def put_on_node(binary: str | Path, name: str) -> str:
    """Copy `binary` into the node's binary folder as `name` (once per size: a rebuilt binary replaces
    it); returns the path there, which the slots' hostPath shows them."""
    NODE_BIN.mkdir(parents=True, exist_ok=True)
    target = NODE_BIN / name
    if not target.exists() or target.stat().st_size != Path(binary).stat().st_size:
        partial = target.with_suffix(".partial")
        shutil.copyfile(binary, partial)
        partial.chmod(0o755)
        partial.rename(target)
    return str(target)


def on_the_node(kcp: RealKcp) -> str:
    """Put the binary where the README tells users to (`/var/lib/kcpshard/bin/kcp-<version>`); returns
    that path, for `spec.kcp.binary`."""
    return put_on_node(kcp.binary, f"kcp-{kcp.version}")
