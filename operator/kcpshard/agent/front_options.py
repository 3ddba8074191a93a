"""The command line of `kcpshard agent front`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kcpshard.agent.errors import UsageError


@dataclass(frozen=True)
class Options:
    shard: str
    namespace: str | None = None
    state_dir: Path | None = None
    haproxy: str | None = None
    kubeconfig: str | None = None
    report_interval: float = 1.0
    hold_seconds: float = 0.0
    members_dir: Path | None = None


def parse_args(argv: Sequence[str]) -> Options:
    parser = argparse.ArgumentParser(
        prog="kcpshard agent front", description="Run a shard's HAProxy front and follow its KcpShard status."
    )
    parser.add_argument("--namespace", help="namespace of the KcpShard (default: the kubeconfig's)")
    parser.add_argument("--shard", required=True, help="name of the KcpShard")
    parser.add_argument("--state-dir", type=Path, help="folder for haproxy.cfg and the runtime socket")
    parser.add_argument("--haproxy", default=None, help="haproxy executable (default: haproxy on PATH)")
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig (default: $KUBECONFIG or in-cluster)")
    parser.add_argument(
        "--report-interval", type=float, default=1.0, help="seconds between connection reports (default 1)"
    )
    parser.add_argument(
        "--hold-seconds",
        type=float,
        default=0.0,
        help="after SIGTERM, serve on until another pod of the front serves, at most this long (default 0)",
    )
    parser.add_argument(
        "--members-dir",
        type=Path,
        default=None,
        help="drive HAProxy containers of the pod through this shared folder (haproxy_member.py) "
        "rather than run HAProxy as children",
    )
    args = parser.parse_args(list(argv))
    if args.report_interval <= 0:
        raise UsageError("--report-interval must be positive")
    if args.hold_seconds < 0:
        raise UsageError("--hold-seconds must not be negative")
    return Options(
        shard=args.shard,
        namespace=args.namespace,
        state_dir=args.state_dir,
        haproxy=args.haproxy,
        kubeconfig=args.kubeconfig,
        report_interval=args.report_interval,
        hold_seconds=args.hold_seconds,
        members_dir=args.members_dir,
    )
