"""Real kcp for the end-to-end tests: the binaries `make tools` builds into hack/tools/bin.

`NEWER` is the newest kcp release that builds from its Go modules here, `OLDER` the older minor used for
a real version upgrade (hack/tools/build.sh says why these two). A missing binary is an error that says
what to run, never a skip: the suite is meant to run on real kcp.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from kcpshard_testkit.scenario import processes

TOOLS_BIN = Path(__file__).resolve().parents[2] / "hack" / "tools" / "bin"

# binary name in hack/tools/bin -> the kcp version it was built from (hack/tools/build.sh)
VERSIONS = {"kcp": "v0.31.2", "kcp-v0.30": "v0.30.0"}
NEWER, OLDER = "kcp", "kcp-v0.30"


@dataclass(frozen=True)
class RealKcp:
    version: str
    binary: str


def real_kcp(name: str) -> RealKcp:
    """The real kcp `name` (absolute path, so the runner's pods run it as a node's binary would be)."""
    path = TOOLS_BIN / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `make tools` (builds kcp from its Go modules)")
    return RealKcp(VERSIONS[name], str(path))


def real_kcp_processes(sandbox: Path) -> list[int]:
    """Pids of real kcp processes started under the sandbox (their argv[0] is a binary of hack/tools/bin)."""
    names = {str(TOOLS_BIN / name).encode() for name in VERSIONS}
    return [pid for pid, args in processes(sandbox).items() if args and args[0] in names]


NODE_BIN = Path("/var/lib/kcpshard/bin")


def on_the_node(kcp: RealKcp) -> str:
    """Put the binary where the README tells users to (`/var/lib/kcpshard/bin/kcp-<version>`, which the
    slots' hostPath shows them); returns that path, for `spec.kcp.binary`."""
    NODE_BIN.mkdir(parents=True, exist_ok=True)
    target = NODE_BIN / f"kcp-{kcp.version}"
    if not target.exists() or target.stat().st_size != Path(kcp.binary).stat().st_size:
        partial = target.with_suffix(".partial")
        shutil.copyfile(kcp.binary, partial)
        partial.chmod(0o755)
        partial.rename(target)
    return str(target)
