"""`kcpshard operator`: runs the kopf operator with this package's handlers."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging

import kopf
import prometheus_client

from kcpshard.controller import handlers  # noqa: F401  (registers the handlers)
from kcpshard.controller.config import OperatorConfig
from kcpshard.k8s.builders import DEFAULT_IMAGE


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kcpshard operator", description="Run the kcp shard operator.")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--namespace", "-n", action="append", help="watch only this namespace (repeatable)")
    scope.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace (default)")
    parser.add_argument("--standalone", action="store_true", help="no peering: the only operator running")
    parser.add_argument("--peering", default=None, help="kopf peering name (two replicas: one acts)")
    parser.add_argument("--image", default=DEFAULT_IMAGE, help="image of the agent Jobs and the front")
    parser.add_argument(
        "--agent-command",
        default="kcpshard",
        help="how the agent Jobs start the kcpshard program (space separated)",
    )
    parser.add_argument(
        "--shard-lease-seconds",
        type=float,
        default=15.0,
        help="per-shard Lease: a standby replica takes a shard over after this long without renewal",
    )
    parser.add_argument("--liveness", default=None, help="e.g. http://0.0.0.0:8080/healthz")
    parser.add_argument("--metrics-port", type=int, default=None, help="Prometheus metrics port")
    parser.add_argument("--verbose", "-v", action="store_true")
    return parser


def run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.metrics_port is not None:
        prometheus_client.start_http_server(args.metrics_port)
    config = OperatorConfig(
        image=args.image,
        agent_command=tuple(args.agent_command.split()),
        lease_seconds=args.shard_lease_seconds,
    )
    memo = kopf.Memo(config=config)
    registry = kopf.get_default_registry()  # filled by importing kcpshard.controller.handlers
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(
            kopf.operator(
                registry=registry,
                memo=memo,
                standalone=args.standalone,
                peering_name=args.peering,
                clusterwide=not args.namespace,
                namespaces=args.namespace or [],
                liveness_endpoint=args.liveness,
            )
        )
    return 0
