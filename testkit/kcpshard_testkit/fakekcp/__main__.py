"""`kcpshard-fake-kcp`: the stand-in's command line (`start [flags]`, `version`, `--version`).

Imitates `cmd/kcp/kcp.go` and `k8s.io/component-base/cli/run.go`: flag errors print `Error: <msg>` (cobra,
before logging is set up) and exit 1; errors after that are logged as `"command failed" err="<msg>"` and
exit 1; no traceback.
"""

from __future__ import annotations

import asyncio
import sys

from kcpshard_testkit.fakekcp import flags, klog
from kcpshard_testkit.fakekcp.app import Kcp, StartError
from kcpshard_testkit.fakekcp.knobs import Knobs
from kcpshard_testkit.fakekcp.server import version_info

USAGE = """kcp is a Kubernetes-like control plane (stand-in for tests: kcpshard_testkit.fakekcp)

Usage:
  kcp [command]

Available Commands:
  start       Start the control plane process
  version     Print the version

Flags:
      --version   version for kcp
"""


def _error(msg: str) -> int:
    sys.stderr.write(f"Error: {msg}\n")
    return 1


def run(argv: list[str]) -> int:
    try:
        knobs = Knobs.from_env()
    except ValueError as e:
        return _error(str(e))
    if not argv or argv[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE)
        return 0
    if argv[0] in ("version", "--version"):
        sys.stdout.write(f"kcp version {version_info(knobs.version)['gitVersion']}\n")
        return 0
    if argv[0] != "start":
        if argv[0].startswith("-"):
            return _error(f"unknown flag: {argv[0].partition('=')[0]}")
        return _error(f'unknown command "{argv[0]}" for "kcp"')
    try:
        opts = flags.parse(argv[1:])
    except flags.FlagError as e:
        if str(e) == "help requested":
            sys.stdout.write("Usage:\n  kcp start [flags]\n")
            return 0
        return _error(str(e))
    klog.set_verbosity(opts.v)
    if opts.root_shard_kubeconfig_file and flags.parse_version(knobs.version) >= (0, 33, 0):
        sys.stderr.write(
            "Flag --root-shard-kubeconfig-file has been deprecated, it is ignored: the core "
            "APIExport identities are read from the cache server\n"
        )
        opts.root_shard_kubeconfig_file = ""
    try:
        return asyncio.run(Kcp(opts, knobs).run())
    except StartError as e:
        klog.error(f'"command failed" err={klog.quote(str(e))}', "run.go:72")
        return 1
    except KeyboardInterrupt:
        return 1


def main() -> None:
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
