"""`kcpshard operator`: runs the kopf operator with this package's handlers."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from typing import Any

import kopf
import prometheus_client

from kcpshard import __version__, metrics
from kcpshard.controller import handlers  # noqa: F401  (registers the handlers)
from kcpshard.controller.config import OperatorConfig
from kcpshard.controller.settings import own_identity
from kcpshard.k8s.builders import DEFAULT_IMAGE


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kcpshard operator", description="Run the kcp shard operator.")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--namespace", "-n", action="append", help="watch only this namespace (repeatable)")
    scope.add_argument("--all-namespaces", "-A", action="store_true", help="watch every namespace (default)")
    # kopf peering is never used (each shard has a Lease of its own); the flag stays accepted for the
    # scripts that still pass it.
    parser.add_argument("--standalone", action="store_true", help="accepted and ignored: kopf never peers")
    parser.add_argument(
        "--image",
        default=None,
        help=f"image of the agent Jobs and the front (default: the operator's own, else {DEFAULT_IMAGE})",
    )
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


def operator_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """What `kopf.operator` runs with: standalone (no peering) and named by `own_identity`, so kopf neither
    looks for a peering object nor asks the password database who runs it."""
    config = OperatorConfig(
        image=args.image or DEFAULT_IMAGE,
        image_from_pod=args.image is None,
        agent_command=tuple(args.agent_command.split()),
        lease_seconds=args.shard_lease_seconds,
    )
    return {
        "registry": kopf.get_default_registry(),  # filled by importing kcpshard.controller.handlers
        "memo": kopf.Memo(config=config),
        "identity": own_identity(),
        "standalone": True,
        "clusterwide": not args.namespace,
        "namespaces": args.namespace or [],
        "liveness_endpoint": args.liveness,
    }


def run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.metrics_port is not None:
        metrics.BUILD.info({"version": __version__})
        prometheus_client.start_http_server(args.metrics_port)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(kopf.operator(**operator_kwargs(args)))
    return 0
