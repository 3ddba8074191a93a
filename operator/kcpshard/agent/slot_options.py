"""The command line of `kcpshard agent slot`, checked before anything runs.

kcpshard agent slot --namespace NS --slot NAME --secret SECRET --root-dir DIR
                    [--kubeconfig PATH] [--job-name JOB] [--stop-timeout S]
                    [--store-endpoint URL ...] [--store-wait S]
                    [--cache-kubeconfig-secret NAME[:KEY]] [--root-shard-kubeconfig-secret NAME[:KEY]]
                    [--admin-secret NAME --front-url URL] -- <kcp> start <flags...>
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from kcpshard.agent.errors import UsageError
from kcpshard.agent.store_refs import EndpointError, StoreEndpoint, store_endpoint

# apimachinery `validation.IsDNS1123Subdomain` (Secret names) and `IsConfigMapKey` (Secret data keys).
_SECRET_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_SECRET_DATA_KEY = re.compile(r"[-._a-zA-Z0-9]{1,253}")


@dataclass(frozen=True)
class SecretKey:
    name: str
    key: str


@dataclass
class Options:
    namespace: str
    slot: str
    secret: str
    root_dir: Path
    command: list[str]
    kubeconfig: str | None = None
    job_name: str | None = None
    stop_timeout: float = 60.0
    hold_timeout: float = 0.0  # slot_hold.py
    listen_timeout: float = 300.0
    pod_uid: str | None = field(default=None)
    pod_name: str | None = field(default=None)
    store_endpoints: list[StoreEndpoint] = field(default_factory=list)
    store_wait: float = 20.0
    store_tls_secret: str | None = None
    kine: str | None = None  # the kine binary, when the store is kine
    cache_kubeconfig_secret: SecretKey | None = None
    root_shard_kubeconfig_secret: SecretKey | None = None
    admin_secret: str | None = None
    front_url: str | None = None


def _store_endpoint(url: str) -> StoreEndpoint:
    try:
        return store_endpoint(url)
    except EndpointError as exc:
        raise UsageError(f"--store-endpoint {exc}") from None


def secret_key(option: str, value: str | None) -> SecretKey | None:
    """`NAME[:KEY]`, KEY `kubeconfig` by default (a Secret name and a Secret data key)."""
    if value is None:
        return None
    name, sep, key = value.partition(":")
    key = key if sep else "kubeconfig"
    if not _SECRET_NAME.fullmatch(name) or not _SECRET_DATA_KEY.fullmatch(key):
        raise UsageError(f"{option} takes NAME or NAME:KEY, not {value!r}")
    return SecretKey(name, key)


def front_url(admin_secret: str | None, url: str | None) -> str | None:
    """The server URL of the published kcp-admin kubeconfig; checks --admin-secret along with it."""
    if (admin_secret is None) != (url is None):
        raise UsageError("--admin-secret and --front-url go together")
    if admin_secret is not None and not _SECRET_NAME.fullmatch(admin_secret):
        raise UsageError(f"--admin-secret {admin_secret!r} is not a Secret name")
    if url is not None:
        parts = urlsplit(url)
        if parts.scheme != "https" or not parts.hostname or parts.username or parts.query:
            raise UsageError(
                f"--front-url {url.rpartition('@')[2]} is not a URL like https://kcp.example:6443"
            )
    return url


def parse_args(argv: Sequence[str]) -> Options:
    argv = list(argv)
    if "--" not in argv:
        raise UsageError("the kcp command line must follow `--`")
    split = argv.index("--")
    own, command = argv[:split], argv[split + 1 :]
    if not command:
        raise UsageError("no kcp command after `--`")
    parser = argparse.ArgumentParser(prog="kcpshard agent slot", description="Host agent of one KcpSlot.")
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--slot", required=True, help="name of the KcpSlot")
    parser.add_argument("--secret", required=True, help="the shard's shared-material Secret")
    parser.add_argument("--root-dir", required=True, type=Path, help="kcp's --root-directory")
    parser.add_argument("--kubeconfig", default=None, help="default: $KUBECONFIG, else in-cluster")
    parser.add_argument("--job-name", default=os.environ.get("JOB_NAME"))
    parser.add_argument("--stop-timeout", type=float, default=60.0, help="SIGTERM to SIGKILL, seconds")
    parser.add_argument(
        "--hold-timeout",
        type=float,
        default=0.0,
        help="on SIGTERM, seconds kcp serves on while the shard still serves this slot (0: stop at once)",
    )
    parser.add_argument("--listen-timeout", type=float, default=300.0, help="seconds to wait for the port")
    parser.add_argument(
        "--store-endpoint", action="append", default=[], help="etcd client URL that must answer first"
    )
    parser.add_argument(
        "--store-wait", type=float, default=20.0, help="seconds to wait for the store (or for kine to listen)"
    )
    parser.add_argument(
        "--store-tls-secret",
        help="Secret with the store's ca.crt (and tls.crt, tls.key) for kcp and the check",
    )
    parser.add_argument(
        "--kine", help="kine binary to run first, its DSN in $KINE_ENDPOINT (kcp's --etcd-servers={kine})"
    )
    parser.add_argument("--cache-kubeconfig-secret", help="NAME[:KEY] copied to <root-dir>/cache.kubeconfig")
    parser.add_argument(
        "--root-shard-kubeconfig-secret", help="NAME[:KEY] copied to <root-dir>/root-shard.kubeconfig"
    )
    parser.add_argument("--admin-secret", help="Secret to publish kcp's kcp-admin kubeconfig in, once ready")
    parser.add_argument("--front-url", help="server URL of the published kubeconfig (the shard's front)")
    args = parser.parse_args(own)
    if args.store_wait < 0:
        raise UsageError("--store-wait must not be negative")
    return Options(
        namespace=args.namespace,
        slot=args.slot,
        secret=args.secret,
        root_dir=args.root_dir,
        command=command,
        kubeconfig=args.kubeconfig,
        job_name=args.job_name,
        stop_timeout=args.stop_timeout,
        hold_timeout=args.hold_timeout,
        listen_timeout=args.listen_timeout,
        pod_uid=os.environ.get("POD_UID"),
        pod_name=os.environ.get("POD_NAME"),
        store_endpoints=[_store_endpoint(url) for url in args.store_endpoint],
        store_tls_secret=args.store_tls_secret,
        kine=args.kine,
        store_wait=args.store_wait,
        cache_kubeconfig_secret=secret_key("--cache-kubeconfig-secret", args.cache_kubeconfig_secret),
        root_shard_kubeconfig_secret=secret_key(
            "--root-shard-kubeconfig-secret", args.root_shard_kubeconfig_secret
        ),
        admin_secret=args.admin_secret,
        front_url=front_url(args.admin_secret, args.front_url),
    )
