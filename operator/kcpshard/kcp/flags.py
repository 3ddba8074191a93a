"""The version-aware `kcp start` flag table and the spec checks only the operator can make.

Flags checked at the source (github.com/kcp-dev/kcp): `pkg/server/options/options.go` (shard URLs,
`--experimental-bind-free-port` and its `--secure-port=0` validation, `--root-shard-kubeconfig-file`,
`--cache-kubeconfig` required for non-root), `pkg/server/options/flags.go` (the allow-list of generic
apiserver flags kcp passes through: `--bind-address`, `--etcd-*`, `--shutdown-delay-duration`,
`--shutdown-send-retry-after`, `--external-hostname`), `pkg/server/options/controllers.go`
(`--enable-leader-election`, lease `kube-system/kcp-controllers`), `cmd/kcp/options/generic.go`
(`--root-directory`).

Each row has a semver range and adds its flags only for versions inside it; `kcp_start_args` is pure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from kcpshard.kcp.errors import VersionError
from kcpshard.kcp.versions import SUPPORTED, SemverRange, Version, known

if TYPE_CHECKING:  # the host agents import this module; pydantic would slow their start
    from kcpshard.api.models import KcpShardSpec

ETCD_TLS_DIR = "etcd-tls"
ETCD_TLS_FILES = {"ca": "ca.crt", "cert": "tls.crt", "key": "tls.key"}
# The slot listens on loopback only: the front (HAProxy) runs on the same node with host networking and
# reaches it there, and nothing else can bypass the front to talk to a slot that is not (yet) active.
SLOT_BIND_ADDRESS = "127.0.0.1"


@dataclass(frozen=True)
class SlotPaths:
    """Where the host agent puts the slot's files (absolute paths on the node)."""

    root_dir: str
    cache_kubeconfig: str | None = None
    root_shard_kubeconfig: str | None = None


@dataclass(frozen=True)
class _Ctx:
    spec: KcpShardSpec
    paths: SlotPaths
    version: Version
    etcd_override: str | None


@dataclass(frozen=True)
class FlagRow:
    """One row of the table: the flags it owns, the versions it applies to, and what it adds."""

    flags: tuple[str, ...]
    versions: SemverRange
    emit: Callable[[_Ctx], list[str]]
    why: str


def front_url(spec: KcpShardSpec) -> str:
    """The shard URL every slot advertises: `spec.shard.baseURL`, else https://<front.address>:<front.port>."""
    if spec.shard.base_url:
        return spec.shard.base_url.rstrip("/")
    host = spec.front.address
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6 literal
    return f"https://{host}:{spec.front.port}"


def etcd_tls_paths(root_dir: str) -> dict[str, str]:
    """Files the host agent writes from the store's tlsSecretRef (ca.crt, tls.crt, tls.key)."""
    base = f"{root_dir.rstrip('/')}/{ETCD_TLS_DIR}"
    return {k: f"{base}/{v}" for k, v in ETCD_TLS_FILES.items()}


def _is_root(c: _Ctx) -> bool:
    return c.spec.shard.root


def _etcd_servers(c: _Ctx) -> list[str]:
    if c.etcd_override is not None:
        return [f"--etcd-servers={c.etcd_override}"]
    if c.spec.store.etcd is None:
        raise ValueError("a kine store needs etcd_override (the kine endpoint the host agent started)")
    return [f"--etcd-servers={','.join(c.spec.store.etcd.endpoints)}"]


def _etcd_prefix(c: _Ctx) -> list[str]:
    etcd = c.spec.store.etcd
    if c.etcd_override is not None or etcd is None or not etcd.prefix:
        return []
    return [f"--etcd-prefix={etcd.prefix}"]


def _etcd_tls(c: _Ctx) -> list[str]:
    etcd = c.spec.store.etcd
    if c.etcd_override is not None or etcd is None or etcd.tls_secret_ref is None:
        return []
    p = etcd_tls_paths(c.paths.root_dir)
    return [f"--etcd-cafile={p['ca']}", f"--etcd-certfile={p['cert']}", f"--etcd-keyfile={p['key']}"]


def _shard_urls(c: _Ctx) -> list[str]:
    url = front_url(c.spec)
    return [f"--shard-base-url={url}", f"--shard-external-url={url}", f"--shard-virtual-workspace-url={url}"]


def _external_hostname(c: _Ctx) -> list[str]:
    host = urlsplit(front_url(c.spec)).hostname or c.spec.front.address
    return [f"--external-hostname={host}"]


def _cache_kubeconfig(c: _Ctx) -> list[str]:
    # A root shard of a sharded kcp must use the fleet's cache server too: without the flag it runs an
    # in-process one (pkg/server/server.go, installCacheServer) that no other shard reads, so they never
    # see what root replicates (its WorkspaceTypes, APIExports) and their workspaces stay Initializing.
    if _is_root(c) and c.spec.shard.cache_kubeconfig_secret_ref is None:
        return []
    if not c.paths.cache_kubeconfig:
        raise ValueError("a non-root shard needs SlotPaths.cache_kubeconfig")
    return [f"--cache-kubeconfig={c.paths.cache_kubeconfig}"]


def _root_shard_kubeconfig(c: _Ctx) -> list[str]:
    if _is_root(c):
        return []
    if not c.paths.root_shard_kubeconfig:
        raise ValueError(f"a non-root shard on kcp {c.version} needs SlotPaths.root_shard_kubeconfig")
    return [f"--root-shard-kubeconfig-file={c.paths.root_shard_kubeconfig}"]


def _feature_gates(c: _Ctx) -> list[str]:
    gates = c.spec.feature_gates
    if not gates:
        return []
    return ["--feature-gates=" + ",".join(f"{k}={'true' if gates[k] else 'false'}" for k in sorted(gates))]


ALL = SUPPORTED
R = SemverRange.parse

ROWS: tuple[FlagRow, ...] = (
    FlagRow(
        ("secure-port", "experimental-bind-free-port"),
        ALL,
        lambda c: ["--secure-port=0", "--experimental-bind-free-port"],
        "bind a free port (two slots of one shard run side by side); kcp validates --secure-port=0 with it",
    ),
    FlagRow(
        ("bind-address",),
        ALL,
        lambda c: [f"--bind-address={SLOT_BIND_ADDRESS}"],
        "listen on loopback only; the front on the same node is the only way in",
    ),
    FlagRow(
        ("root-directory",),
        ALL,
        lambda c: [f"--root-directory={c.paths.root_dir}"],
        "the slot's own root directory, seeded with the shard's root material",
    ),
    FlagRow(("etcd-servers",), ALL, _etcd_servers, "the shared store (or the slot's kine)"),
    FlagRow(("etcd-prefix",), ALL, _etcd_prefix, "the store's key prefix, when set"),
    FlagRow(
        ("etcd-cafile", "etcd-certfile", "etcd-keyfile"),
        ALL,
        _etcd_tls,
        "etcd client TLS from store.etcd.tlsSecretRef",
    ),
    FlagRow(("shard-name",), ALL, lambda c: [f"--shard-name={c.spec.shard.name}"], "the shard's name"),
    FlagRow(
        ("shard-base-url", "shard-external-url", "shard-virtual-workspace-url"),
        ALL,
        _shard_urls,
        "kcp rewrites its Shard object from these at start-up: every slot must name the front",
    ),
    FlagRow(
        ("external-hostname",),
        R(">=0.26.0 <0.31.0"),
        _external_hostname,
        "the front host for generated URLs; a no-op since v0.31.0",
    ),
    FlagRow(
        ("enable-leader-election",),
        ALL,
        lambda c: ["--enable-leader-election"],
        "two slots side by side must not both run the controllers",
    ),
    FlagRow(
        ("shutdown-delay-duration",),
        ALL,
        lambda c: [f"--shutdown-delay-duration={c.spec.shutdown_delay_seconds}s"],
        "keep serving after SIGTERM while the front moves away",
    ),
    FlagRow(
        ("shutdown-send-retry-after",),
        ALL,
        # Off (kcp's default), and owned so extraArgs cannot turn it on: with it, the old kcp answers the
        # connections clients kept alive through the L4 front 429 + Retry-After: 5, and they wait 5 s.
        # Without it, its HTTP server shuts down once the delay ends (Go's Shutdown: idle connections
        # closed, busy ones after their answer), and clients reconnect through the front to the new slot.
        lambda c: ["--shutdown-send-retry-after=false"],
        "kept-alive clients reconnect to the new slot when the delay ends instead of waiting out a 429",
    ),
    FlagRow(
        ("shutdown-watch-termination-grace-period",),
        # Off: kcp's allow-list (pkg/server/options/flags.go) has it from v0.30.0 and `kcp start options`
        # of v0.30.0 and v0.31.2 list it, but an earlier `make fidelity` run saw v0.31.2 refuse it and its
        # effect on a roll is not measured (docs/design.md). Kept as a row: switched on in one place.
        SemverRange.never(),
        lambda c: [f"--shutdown-watch-termination-grace-period={c.spec.roll.drain_timeout_seconds}s"],
        "drain watches on shutdown",
    ),
    FlagRow(
        ("cache-kubeconfig",),
        ALL,
        _cache_kubeconfig,
        "non-root shards (and a root shard given one) reach the fleet's cache server",
    ),
    FlagRow(
        ("root-shard-kubeconfig-file",),
        R(">=0.26.0 <0.33.0"),
        _root_shard_kubeconfig,
        "non-root shards up to v0.32 read core APIExport identities from the root shard",
    ),
    FlagRow(("feature-gates",), ALL, _feature_gates, "spec.featureGates, sorted"),
)

# Flags the roll depends on: extraArgs may not set them. Name -> why (shown to the user).
RESERVED: dict[str, str] = {
    "secure-port": "the slot must bind a free port (--secure-port=0 --experimental-bind-free-port)",
    "experimental-bind-free-port": "the slot must bind a free port",
    "bind-address": "the slot listens on loopback; the front is the way in",
    "root-directory": "the host agent owns the slot's root directory",
    "cert-dir": "the serving certificate is the shard's root material in the root directory",
    "tls-cert-file": "the serving certificate is the shard's root material (apiserver.crt)",
    "tls-private-key-file": "the serving key is the shard's root material (apiserver.key)",
    "kubeconfig-path": "the operator reads admin.kubeconfig from the root directory",
    "authentication-admin-token-path": "the shard-admin token store is root material in the root directory",
    "etcd-servers": "set the store in spec.store",
    "etcd-prefix": "set it in spec.store.etcd.prefix",
    "etcd-cafile": "set spec.store.etcd.tlsSecretRef",
    "etcd-certfile": "set spec.store.etcd.tlsSecretRef",
    "etcd-keyfile": "set spec.store.etcd.tlsSecretRef",
    "shard-name": "set spec.shard.name",
    "shard-base-url": "every slot must advertise the front: set spec.shard.baseURL",
    "shard-external-url": "every slot must advertise the front: set spec.shard.baseURL",
    "shard-virtual-workspace-url": "every slot must advertise the front: set spec.shard.baseURL",
    "enable-leader-election": "slots side by side need leader election for the controller handover",
    "leader-election-namespace": "the operator hands over the lease kube-system/kcp-controllers",
    "leader-election-name": "the operator hands over the lease kube-system/kcp-controllers",
    "shutdown-delay-duration": "set spec.shutdownDelaySeconds (the roll waits for it)",
    "cache-kubeconfig": "set spec.shard.cacheKubeconfigSecretRef",
    "root-shard-kubeconfig-file": "set spec.shard.rootShardKubeconfigSecretRef",
    "feature-gates": "set spec.featureGates",
}


def flag_name(arg: str) -> str | None:
    """`--a-b=c` -> `a-b`; `-v=4` -> `v`; a value (no leading dash) -> None."""
    if not arg.startswith("-") or arg in ("-", "--"):
        return None
    return arg.lstrip("-").split("=", 1)[0]


# kcp's --etcd-servers for a kine store: the host agent puts in the address its kine logged.
KINE_URL = "{kine}"
# The env var kine reads its --endpoint from: the DSN (with its password) stays off command lines.
KINE_ENDPOINT_ENV = "KINE_ENDPOINT"
KINE_ENDPOINT_KEY = "endpoint"


def kine_args() -> list[str]:
    """Arguments of the slot's kine (k3s-io/kine `pkg/app/app.go`), without the binary; the DSN comes from
    KINE_ENDPOINT_ENV.

    Port 0: kine logs the bound port (`Kine available at http://127.0.0.1:<port>`, `pkg/endpoint`), so two
    slots side by side never collide; metrics off (its default `:8080` would collide and listen widely).
    """
    return ["--listen-address=127.0.0.1:0", "--metrics-bind-address=0"]


def kcp_start_args(spec: KcpShardSpec, paths: SlotPaths, etcd_override: str | None = None) -> list[str]:
    """`kcp start` arguments for one slot (without the binary and `start`); extraArgs come last.

    `etcd_override` is the kine endpoint (`http://127.0.0.1:<port>`) when the store is kine.
    Raises VersionError for a version outside the table and ValueError for a missing path; call
    `validate` first.
    """
    version = Version.parse(spec.kcp.version)
    if not known(version):
        raise VersionError(f"kcp {version} is not supported (supported: {SUPPORTED})")
    ctx = _Ctx(spec, paths, version, etcd_override)
    args: list[str] = []
    for row in ROWS:
        if version in row.versions:
            args.extend(row.emit(ctx))
    args.extend(spec.extra_args)
    return args


def _check_batteries(arg: str, following: str | None) -> str | None:
    value = arg.split("=", 1)[1] if "=" in arg else (following or "")
    items = [b.strip() for b in value.split(",") if b.strip()]
    differential = any(b.startswith(("+", "-")) for b in items)
    # kcp: "+x"/"-x" edit the default set (which has admin); a plain list replaces it.
    removes_admin = "-admin" in items if differential else "admin" not in items
    if removes_admin:
        return "extraArgs --batteries-included must keep the admin battery: it writes admin.kubeconfig"
    return None


def _check_extra_args(extra: list[str]) -> list[str]:
    msgs: list[str] = []
    for i, arg in enumerate(extra):
        name = flag_name(arg)
        if name is None:
            continue
        if name in RESERVED:
            msgs.append(f"extraArgs may not set --{name}: {RESERVED[name]}")
        elif name == "batteries-included":
            following = extra[i + 1] if i + 1 < len(extra) else None
            msg = _check_batteries(arg, following)
            if msg:
                msgs.append(msg)
    return msgs


def _check_base_url(url: str) -> str | None:
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        return f"shard.baseURL {url!r} must be an https URL with a host"
    if parts.path.strip("/") or parts.query or parts.fragment:
        return f"shard.baseURL {url!r} must not have a path, query or fragment"
    return None


# No action can snapshot kine: the backup Job runs etcdctl.
BACKUP_NEEDS_ETCD = "roll.backup snapshots an etcd store: with store.kine, back up kine's database instead"


def validate(spec: KcpShardSpec) -> list[str]:
    """Human messages for what only the operator can judge (the CRD schema checks the rest)."""
    msgs: list[str] = []
    try:
        version: Version | None = Version.parse(spec.kcp.version)
    except VersionError as exc:
        msgs.append(str(exc))
        version = None
    if version is not None and not known(version):
        msgs.append(f"kcp {version} is not supported: this operator knows kcp {SUPPORTED}")
    store = spec.store
    if store.etcd is None and store.kine is None:
        msgs.append("store needs one of etcd or kine")
    elif store.etcd is not None and store.kine is not None:
        msgs.append("store has both etcd and kine: choose one")
    elif store.kine is not None and spec.roll.backup:
        msgs.append(BACKUP_NEEDS_ETCD)
    shard = spec.shard
    if shard.root and shard.name != "root":
        msgs.append(f"a root shard must be named root (kcp treats shard {shard.name!r} as non-root)")
    if not shard.root and shard.name == "root":
        msgs.append("a non-root shard may not be named root")
    if not shard.root:
        if shard.cache_kubeconfig_secret_ref is None:
            msgs.append("a non-root shard needs shard.cacheKubeconfigSecretRef (kcp --cache-kubeconfig)")
        if (
            version is not None
            and version in _row("root-shard-kubeconfig-file").versions
            and shard.root_shard_kubeconfig_secret_ref is None
        ):
            msgs.append(
                f"a non-root shard on kcp {version} needs shard.rootShardKubeconfigSecretRef "
                "(kcp --root-shard-kubeconfig-file, required up to v0.32)"
            )
    if shard.base_url:
        msg = _check_base_url(shard.base_url)
        if msg:
            msgs.append(msg)
    msgs.extend(_check_extra_args(spec.extra_args))
    from kcpshard.api.models import spec_rule_problems

    msgs.extend(spec_rule_problems(spec))
    return msgs


def _row(flag: str) -> FlagRow:
    return next(r for r in ROWS if flag in r.flags)
