"""`kcp start` flags: pflag syntax, kcp defaults and kcp's validation wording.

Imitates `cmd/kcp/kcp.go`, `cmd/kcp/options/generic.go`, `pkg/server/options/options.go` (flags, `Validate`),
`pkg/server/options/authentication.go` and the pflag/cobra parse errors (`unknown flag: --x`,
`flag needs an argument: --x`, `invalid argument "v" for "--x" flag: ...`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum

BATTERIES_ALL = ("admin", "metrics-viewer", "user", "workspace-types")
BATTERIES_DEFAULT = ("admin", "workspace-types")
ROOT_SHARD = "root"


class FlagError(Exception):
    """A parse error: printed as `Error: <msg>` and exit 1, as cobra does before logging is set up."""


class Kind(Enum):
    STRING = "string"
    BOOL = "bool"
    INT = "int"
    DURATION = "duration"
    LIST = "list"


# Flags the stand-in acts on (name -> kind). Others kcp knows are accepted and ignored (IGNORED).
FLAGS: dict[str, Kind] = {
    "root-directory": Kind.STRING,
    "secure-port": Kind.INT,
    "experimental-bind-free-port": Kind.BOOL,
    "bind-address": Kind.STRING,
    "etcd-servers": Kind.LIST,
    "etcd-prefix": Kind.STRING,
    "shard-name": Kind.STRING,
    "shard-base-url": Kind.STRING,
    "shard-external-url": Kind.STRING,
    "shard-virtual-workspace-url": Kind.STRING,
    "external-hostname": Kind.STRING,
    "enable-leader-election": Kind.BOOL,
    "shutdown-delay-duration": Kind.DURATION,
    "shutdown-send-retry-after": Kind.BOOL,
    "shutdown-watch-termination-grace-period": Kind.DURATION,
    "feature-gates": Kind.STRING,
    "cache-kubeconfig": Kind.STRING,
    "root-shard-kubeconfig-file": Kind.STRING,
    "batteries-included": Kind.LIST,
    "v": Kind.INT,
    "kubeconfig-path": Kind.STRING,
    "authentication-admin-token-path": Kind.STRING,
}
IGNORED: dict[str, Kind] = {
    "etcd-cafile": Kind.STRING,
    "etcd-certfile": Kind.STRING,
    "etcd-keyfile": Kind.STRING,
    "tls-cert-file": Kind.STRING,
    "tls-private-key-file": Kind.STRING,
    "client-ca-file": Kind.STRING,
    "service-account-key-file": Kind.STRING,
    "service-account-private-key-file": Kind.STRING,
    "shard-kubeconfig-file": Kind.STRING,
    "shard-virtual-workspace-ca-file": Kind.STRING,
    "shard-client-cert-file": Kind.STRING,
    "shard-client-key-file": Kind.STRING,
    "shard-replica-count": Kind.INT,
    "profiler-address": Kind.STRING,
    "root-identities-file": Kind.STRING,
    "logging-format": Kind.STRING,
    "token-auth-file": Kind.STRING,
    "run-controllers": Kind.BOOL,
    "run-virtual-workspaces": Kind.BOOL,
    "audit-log-path": Kind.STRING,
    "miniproxy-mapping-file": Kind.STRING,
    "cache-client-kubeconfig": Kind.STRING,
    "leader-election-namespace": Kind.STRING,
    "leader-election-name": Kind.STRING,
}
SHORTHANDS = {"v": "v"}

_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Go's time.ParseDuration, in seconds."""
    s = text
    sign = 1.0
    if s[:1] in "+-" and s:
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError(f'time: invalid duration "{text}"')
    total, pos = 0.0, 0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if m is None:
            if re.match(r"(\d+\.?\d*|\.\d+)", s[pos:]) and not re.search(r"[a-zµμ]", s[pos:]):
                raise ValueError(f'time: missing unit in duration "{text}"')
            raise ValueError(f'time: invalid duration "{text}"')
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    return sign * total


def parse_version(v: str) -> tuple[int, int, int]:
    m = re.match(r"^v?(\d+)\.(\d+)\.(\d+)", v.strip())
    if m is None:
        raise ValueError(f"not a semantic version: {v!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


@dataclass
class Options:
    root_directory: str = ".kcp"
    secure_port: int = 6443
    experimental_bind_free_port: bool = False
    bind_address: str = "127.0.0.1"
    etcd_servers: list[str] = field(default_factory=list)
    etcd_prefix: str = "/registry"
    shard_name: str = ROOT_SHARD
    shard_base_url: str = ""
    shard_external_url: str = ""
    shard_virtual_workspace_url: str = ""
    external_hostname: str = ""
    enable_leader_election: bool = False
    shutdown_delay_duration: float = 0.0
    shutdown_send_retry_after: bool = False
    shutdown_watch_termination_grace_period: float = 0.0
    feature_gates: dict[str, bool] = field(default_factory=dict)
    cache_kubeconfig: str = ""
    root_shard_kubeconfig_file: str = ""
    batteries_included: list[str] = field(default_factory=lambda: list(BATTERIES_DEFAULT))
    v: int = 2
    kubeconfig_path: str = "admin.kubeconfig"
    authentication_admin_token_path: str = ".admin-token-store"
    args: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)


def _convert(name: str, kind: Kind, raw: str) -> object:
    def bad(reason: str) -> FlagError:
        return FlagError(f'invalid argument "{raw}" for "--{name}" flag: {reason}')

    if kind is Kind.BOOL:
        low = raw.lower()
        if low in ("1", "t", "true"):
            return True
        if low in ("0", "f", "false"):
            return False
        return bad(f'strconv.ParseBool: parsing "{raw}": invalid syntax')
    if kind is Kind.INT:
        try:
            return int(raw, 0) if raw.lower().startswith(("0x", "0o", "0b")) else int(raw)
        except ValueError:
            return bad(f'strconv.ParseInt: parsing "{raw}": invalid syntax')
    if kind is Kind.DURATION:
        try:
            return parse_duration(raw)
        except ValueError as e:
            return bad(str(e))
    if kind is Kind.LIST:
        return [p for p in raw.split(",") if p] if raw else []
    return raw


def _feature_gates(raw: str) -> dict[str, bool]:
    gates: dict[str, bool] = {}
    for part in filter(None, (p.strip() for p in raw.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise FlagError(
                f'invalid argument "{raw}" for "--feature-gates" flag: missing bool value for {key}'
            )
        if value.lower() not in ("true", "false"):
            raise FlagError(
                f'invalid argument "{raw}" for "--feature-gates" flag: invalid value of {key}={value}, '
                f'err: strconv.ParseBool: parsing "{value}": invalid syntax'
            )
        gates[key] = value.lower() == "true"
    return gates


def parse(argv: list[str]) -> Options:
    """Parse `kcp start` arguments (without the `start`) the way pflag does."""
    opts = Options()
    seen: set[str] = set()
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            opts.args.extend(argv[i:])
            break
        if not arg.startswith("-") or arg == "-":
            opts.args.append(arg)
            continue
        if arg.startswith("--"):
            name, has_value, value = arg[2:].partition("=")
            display = f"--{name}"
        else:
            short, has_value, value = arg[1:].partition("=")
            if short[:1] not in SHORTHANDS:
                raise FlagError(f"unknown shorthand flag: '{short[:1]}' in {arg}")
            if not has_value and len(short) > 1:  # -v4
                has_value, value = "=", short[1:]
            name, display = SHORTHANDS[short[:1]], f"-{short[:1]}"
        if name in ("help", "h"):
            raise FlagError("help requested")
        kind = FLAGS.get(name) or IGNORED.get(name)
        if kind is None:
            raise FlagError(f"unknown flag: {display}")
        if not has_value:
            if kind is Kind.BOOL:
                value = "true"
            elif i < len(argv):
                value = argv[i]
                i += 1
            else:
                raise FlagError(f"flag needs an argument: {display}")
        if name == "feature-gates":
            opts.feature_gates.update(_feature_gates(value))
            seen.add(name)
            continue
        converted = _convert(name, kind, value)
        if isinstance(converted, FlagError):
            raise converted
        if name in FLAGS:
            attr = name.replace("-", "_")
            if kind is Kind.LIST and name in seen and isinstance(converted, list):
                # pflag slices: the first use replaces the default, later uses append.
                converted = [*getattr(opts, attr), *converted]
            setattr(opts, attr, converted)
        seen.add(name)
    opts.seen = seen
    return opts


def complete_batteries(opts: Options) -> list[str]:
    """`+x`/`-x` entries edit the default set, as kcp's Complete does."""
    if not any(b.startswith(("+", "-")) for b in opts.batteries_included):
        return list(opts.batteries_included)
    bats = set(BATTERIES_DEFAULT)
    for b in opts.batteries_included:
        if b.startswith("+"):
            bats.add(b[1:])
        elif b.startswith("-"):
            bats.discard(b[1:])
    return sorted(bats)


def validate(opts: Options, version: str) -> list[str]:
    """kcp's `CompletedOptions.Validate`, plus the version-dependent root-shard-kubeconfig rule."""
    errs: list[str] = []
    if opts.experimental_bind_free_port and opts.secure_port != 0:
        errs.append("--secure-port=0 required if --experimental-bind-free-port is set")
    if not opts.experimental_bind_free_port and not 0 < opts.secure_port < 65536:
        errs.append(
            f"--secure-port {opts.secure_port} must be between 1 and 65535, inclusive. It cannot be "
            "turned off with 0"
        )
    if not opts.etcd_servers:
        # The stand-in has no embedded etcd: kcp would start one, we cannot.
        errs.append("--etcd-servers must be specified (the stand-in kcp has no embedded etcd)")
    if opts.shard_name != ROOT_SHARD and not opts.cache_kubeconfig:
        errs.append("--cache-kubeconfig is required for non-root shards")
    if (
        opts.shard_name != ROOT_SHARD
        and not opts.root_shard_kubeconfig_file
        and parse_version(version) < (0, 33, 0)
    ):
        # Not a check real kcp <= v0.32 makes: without the flag a non-root shard never resolves the core
        # APIExport identities from the root and never becomes ready. The stand-in fails fast instead.
        errs.append("--root-shard-kubeconfig-file is required for non-root shards")
    differential = False
    for i, b in enumerate(opts.batteries_included):
        if b.startswith(("+", "-")):
            if not differential and i > 0:
                errs.append("--batteries-included must all be prefixed with + or - or none")
                break
            differential = True
            b = b[1:]
        elif differential:
            errs.append("--batteries-included must all be prefixed with + or - or none")
            break
        if b not in BATTERIES_ALL:
            errs.append(f"unknown battery: {b}")
    bats = set(complete_batteries(opts))
    if "user" in bats and "admin" not in bats:
        errs.append("battery user enabled which requires admin as well")
    return errs


def aggregate(errs: list[str]) -> str:
    """`utilerrors.NewAggregate(errs).Error()`."""
    return errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]"
