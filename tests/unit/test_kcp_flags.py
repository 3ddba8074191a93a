"""The kcp start flag table: one test per row, inside and outside its version range, and validate()."""

from typing import Any

import pytest

from kcpshard.api.models import STOP_TIMEOUT_RULE, KcpShardSpec
from kcpshard.kcp.errors import VersionError
from kcpshard.kcp.flags import ROWS, SlotPaths, flag_name, kcp_start_args, kine_args, validate

ROOT = "/var/lib/kcpshard/s1/a"
PATHS = SlotPaths(
    root_dir=ROOT, cache_kubeconfig="/x/cache.kubeconfig", root_shard_kubeconfig="/x/root.kubeconfig"
)


def spec(version: str = "v0.32.1", **over: Any) -> KcpShardSpec:
    raw: dict[str, Any] = {
        "kcp": {"version": version},
        "node": "n1",
        "store": {"etcd": {"endpoints": ["http://127.0.0.1:2379", "http://127.0.0.1:2380"]}},
        "front": {"address": "10.0.0.5", "port": 6443},
    }
    raw.update(over)
    return KcpShardSpec.model_validate(raw)


def nonroot(version: str = "v0.32.1", **over: Any) -> KcpShardSpec:
    shard = {
        "name": "beta",
        "root": False,
        "cacheKubeconfigSecretRef": {"name": "c"},
        "rootShardKubeconfigSecretRef": {"name": "r"},
    }
    return spec(version, shard=shard, **over)


def names(args: list[str]) -> list[str]:
    return [n for n in (flag_name(a) for a in args) if n]


def test_every_flag_row_is_covered_by_a_test() -> None:
    owned = {f for row in ROWS for f in row.flags}
    assert owned == {
        "secure-port",
        "experimental-bind-free-port",
        "bind-address",
        "root-directory",
        "etcd-servers",
        "etcd-prefix",
        "etcd-cafile",
        "etcd-certfile",
        "etcd-keyfile",
        "shard-name",
        "shard-base-url",
        "shard-external-url",
        "shard-virtual-workspace-url",
        "external-hostname",
        "enable-leader-election",
        "shutdown-delay-duration",
        "shutdown-send-retry-after",
        "shutdown-watch-termination-grace-period",
        "cache-kubeconfig",
        "root-shard-kubeconfig-file",
        "feature-gates",
    }


@pytest.mark.parametrize("version", ["v0.26.0", "v0.32.1", "v0.33.2"])
def test_free_port_row(version: str) -> None:
    args = kcp_start_args(spec(version), PATHS)
    assert "--secure-port=0" in args and "--experimental-bind-free-port" in args


@pytest.mark.parametrize("version", ["v0.26.0", "v0.33.0"])
def test_bind_address_is_loopback(version: str) -> None:
    assert "--bind-address=127.0.0.1" in kcp_start_args(spec(version), PATHS)


def test_root_directory_row() -> None:
    assert f"--root-directory={ROOT}" in kcp_start_args(spec(), PATHS)


def test_etcd_servers_comma_list_and_prefix() -> None:
    args = kcp_start_args(spec(), PATHS)
    assert "--etcd-servers=http://127.0.0.1:2379,http://127.0.0.1:2380" in args
    assert "etcd-prefix" not in names(args)
    with_prefix = spec(store={"etcd": {"endpoints": ["http://127.0.0.1:2379"], "prefix": "/shard1"}})
    assert "--etcd-prefix=/shard1" in kcp_start_args(with_prefix, PATHS)


def test_etcd_tls_only_with_secret_ref() -> None:
    assert "etcd-cafile" not in names(kcp_start_args(spec(), PATHS))
    etcd = {"endpoints": ["https://127.0.0.1:2379"], "tlsSecretRef": {"name": "etcd-tls"}}
    tls = spec(store={"etcd": etcd})
    args = kcp_start_args(tls, PATHS)
    assert f"--etcd-cafile={ROOT}/etcd-tls/ca.crt" in args
    assert f"--etcd-certfile={ROOT}/etcd-tls/tls.crt" in args
    assert f"--etcd-keyfile={ROOT}/etcd-tls/tls.key" in args


def test_kine_store_uses_the_override_and_no_etcd_flags() -> None:
    kine = spec(store={"kine": {"endpointSecretRef": {"name": "pg"}}})
    args = kcp_start_args(kine, PATHS, etcd_override="http://127.0.0.1:41234")
    assert "--etcd-servers=http://127.0.0.1:41234" in args
    assert not {"etcd-cafile", "etcd-prefix"} & set(names(args))
    with pytest.raises(ValueError, match="kine"):
        kcp_start_args(kine, PATHS)


def test_kine_args_bind_a_free_loopback_port_and_hold_no_dsn() -> None:
    assert kine_args() == ["--listen-address=127.0.0.1:0", "--metrics-bind-address=0"]


def test_a_kine_store_with_a_backup_is_refused() -> None:
    kine = {"kine": {"endpointSecretRef": {"name": "dsn"}}}
    assert validate(spec(store=kine)) == []
    problems = validate(spec(store=kine, roll={"backup": True}))
    assert any("roll.backup snapshots an etcd store" in m for m in problems), problems


def test_shard_name_row() -> None:
    assert "--shard-name=root" in kcp_start_args(spec(), PATHS)
    assert "--shard-name=beta" in kcp_start_args(nonroot(), PATHS)


def test_all_shard_urls_name_the_front() -> None:
    args = kcp_start_args(spec(), PATHS)
    for flag in ("shard-base-url", "shard-external-url", "shard-virtual-workspace-url"):
        assert f"--{flag}=https://10.0.0.5:6443" in args
    custom = spec(shard={"baseURL": "https://kcp.example.com:443/"})
    args = kcp_start_args(custom, PATHS)
    for flag in ("shard-base-url", "shard-external-url", "shard-virtual-workspace-url"):
        assert f"--{flag}=https://kcp.example.com:443" in args


def test_ipv6_front_is_bracketed() -> None:
    args = kcp_start_args(spec(front={"address": "::1", "port": 6443}), PATHS)
    assert "--shard-base-url=https://[::1]:6443" in args


def test_every_slot_gets_the_same_args_apart_from_its_root() -> None:
    a = kcp_start_args(spec(), SlotPaths(root_dir="/s/a"))
    b = kcp_start_args(spec(), SlotPaths(root_dir="/s/b"))
    assert [x for x in a if not x.startswith("--root-directory")] == [
        x for x in b if not x.startswith("--root-directory")
    ]


@pytest.mark.parametrize(
    ("version", "present"), [("v0.26.0", True), ("v0.30.9", True), ("v0.31.0", False), ("v0.33.0", False)]
)
def test_external_hostname_only_before_v0_31(version: str, present: bool) -> None:
    args = kcp_start_args(spec(version), PATHS)
    assert ("--external-hostname=10.0.0.5" in args) is present
    assert ("external-hostname" in names(args)) is present


def test_external_hostname_uses_base_url_host() -> None:
    args = kcp_start_args(spec("v0.30.0", shard={"baseURL": "https://kcp.example.com:6443"}), PATHS)
    assert "--external-hostname=kcp.example.com" in args


def test_leader_election_row() -> None:
    assert "--enable-leader-election" in kcp_start_args(spec(), PATHS)


def test_shutdown_delay_and_no_retry_after() -> None:
    args = kcp_start_args(spec(shutdownDelaySeconds=12), PATHS)
    assert "--shutdown-delay-duration=12s" in args
    # no 429 + Retry-After: 5 for kept-alive clients: the server closes their connections instead
    assert "--shutdown-send-retry-after=false" in args


@pytest.mark.parametrize("version", ["v0.26.0", "v0.32.1", "v0.33.0"])
def test_watch_grace_period_is_never_passed(version: str) -> None:
    # kcp does not pass the generic flag through (not in pkg/server/options/flags.go): it would fail.
    assert "shutdown-watch-termination-grace-period" not in names(kcp_start_args(spec(version), PATHS))


def test_cache_kubeconfig_only_for_non_root() -> None:
    assert "cache-kubeconfig" not in names(kcp_start_args(spec(), PATHS))
    assert "--cache-kubeconfig=/x/cache.kubeconfig" in kcp_start_args(nonroot(), PATHS)
    with pytest.raises(ValueError, match="cache_kubeconfig"):
        kcp_start_args(nonroot(), SlotPaths(root_dir=ROOT, root_shard_kubeconfig="/r"))


def test_root_shard_of_a_fleet_uses_the_fleet_cache_server() -> None:
    # Without --cache-kubeconfig a root runs an in-process cache server no other shard reads.
    root = spec(shard={"name": "root", "root": True, "cacheKubeconfigSecretRef": {"name": "c"}})
    assert "--cache-kubeconfig=/x/cache.kubeconfig" in kcp_start_args(root, PATHS)
    assert "root-shard-kubeconfig-file" not in names(kcp_start_args(root, PATHS))
    assert validate(root) == []


@pytest.mark.parametrize(
    ("version", "present"),
    [("v0.26.0", True), ("v0.32.9", True), ("v0.33.0", False), ("v0.33.0-rc.1", False), ("v0.33.4", False)],
)
def test_root_shard_kubeconfig_for_non_root_up_to_v0_32(version: str, present: bool) -> None:
    args = kcp_start_args(nonroot(version), PATHS)
    assert ("--root-shard-kubeconfig-file=/x/root.kubeconfig" in args) is present
    assert "root-shard-kubeconfig-file" not in names(kcp_start_args(spec(version), PATHS))


def test_feature_gates_sorted() -> None:
    args = kcp_start_args(spec(featureGates={"Zeta": False, "Alpha": True}), PATHS)
    assert "--feature-gates=Alpha=true,Zeta=false" in args
    assert "feature-gates" not in names(kcp_start_args(spec(), PATHS))


def test_extra_args_come_last_in_order() -> None:
    args = kcp_start_args(spec(extraArgs=["--v=4", "--batteries-included=admin,user"]), PATHS)
    assert args[-2:] == ["--v=4", "--batteries-included=admin,user"]


def test_unknown_version_is_refused() -> None:
    with pytest.raises(VersionError, match="not supported"):
        kcp_start_args(spec("v0.25.0"), PATHS)


# validate()


def test_valid_specs_have_no_messages() -> None:
    assert validate(spec()) == []
    assert validate(nonroot()) == []


def test_validate_unknown_version() -> None:
    msgs = validate(spec("v0.40.0"))
    assert len(msgs) == 1 and "v0.40.0" in msgs[0] and "not supported" in msgs[0]


def test_validate_store_neither_or_both() -> None:
    assert any("one of etcd or kine" in m for m in validate(spec(store={})))
    both = {"etcd": {"endpoints": ["http://127.0.0.1:2379"]}, "kine": {"endpointSecretRef": {"name": "pg"}}}
    assert any("both" in m for m in validate(spec(store=both)))


def test_validate_non_root_needs_cache_kubeconfig() -> None:
    s = spec(shard={"name": "beta", "root": False, "rootShardKubeconfigSecretRef": {"name": "r"}})
    assert [m for m in validate(s) if "cacheKubeconfigSecretRef" in m]


def test_validate_non_root_root_shard_kubeconfig_by_version() -> None:
    shard = {"name": "beta", "root": False, "cacheKubeconfigSecretRef": {"name": "c"}}
    assert any("rootShardKubeconfigSecretRef" in m for m in validate(spec("v0.32.1", shard=shard)))
    assert validate(spec("v0.33.0", shard=shard)) == []


def test_validate_root_flag_matches_name() -> None:
    assert any("must be named root" in m for m in validate(spec(shard={"name": "beta", "root": True})))
    odd = {
        "name": "root",
        "root": False,
        "cacheKubeconfigSecretRef": {"name": "c"},
        "rootShardKubeconfigSecretRef": {"name": "r"},
    }
    assert any("may not be named root" in m for m in validate(spec(shard=odd)))


@pytest.mark.parametrize(
    "url", ["http://kcp.example.com", "https://", "https://kcp.example.com/clusters/root"]
)
def test_validate_base_url(url: str) -> None:
    assert any("baseURL" in m for m in validate(spec(shard={"baseURL": url})))


@pytest.mark.parametrize(
    "arg",
    [
        "--secure-port=6443",
        "--root-directory=/tmp/x",
        "--shard-base-url=https://x",
        "--enable-leader-election=false",
        "--etcd-servers",
        "--feature-gates=A=true",
        "--leader-election-name=other",
        "-bind-address=0.0.0.0",
    ],
)
def test_validate_refuses_reserved_extra_args(arg: str) -> None:
    msgs = validate(spec(extraArgs=[arg, "value"] if "=" not in arg else [arg]))
    name = arg.lstrip("-").split("=")[0]
    assert len(msgs) == 1 and f"--{name}" in msgs[0] and ":" in msgs[0]


def test_validate_allows_harmless_extra_args() -> None:
    assert validate(spec(extraArgs=["--v=4", "--external-hostname=x", "--batteries-included=+user"])) == []


@pytest.mark.parametrize("value", ["-admin", "workspace-types", "user,-admin"])
def test_validate_keeps_the_admin_battery(value: str) -> None:
    msgs = validate(spec(extraArgs=["--batteries-included", value]))
    assert msgs and "admin battery" in msgs[0]


@pytest.mark.parametrize(
    ("stop", "delay", "refused"), [(5, 5, True), (4, 5, True), (6, 5, False), (120, 0, False)]
)
def test_a_stop_timeout_inside_the_shutdown_delay_is_refused(stop: int, delay: int, refused: bool) -> None:
    problems = validate(spec(roll={"stopTimeoutSeconds": stop}, shutdownDelaySeconds=delay))
    assert (STOP_TIMEOUT_RULE["message"] in problems) is refused
