"""The host agent's command line (kcpshard.agent.slot_options.parse_args): the options of issue 4."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcpshard.agent.errors import UsageError
from kcpshard.agent.slot_options import Options, SecretKey, parse_args
from kcpshard.agent.store_refs import StoreEndpoint, store_endpoint

BASE = ["--namespace", "kcp", "--slot", "alpha-a", "--secret", "alpha-shared", "--root-dir", "/var/x/a"]
KCP = ["--", "kcp", "start", "--root-directory=/var/x/a"]


def parse(*extra: str) -> Options:
    return parse_args([*BASE, *extra, *KCP])


def test_defaults_leave_the_new_steps_off() -> None:
    opts = parse_args([*BASE, *KCP])
    assert opts.store_endpoints == [] and opts.store_wait == 20.0
    assert opts.cache_kubeconfig_secret is None and opts.root_shard_kubeconfig_secret is None
    assert opts.admin_secret is None and opts.front_url is None
    assert opts.root_dir == Path("/var/x/a") and opts.command == KCP[1:]


def test_all_new_options() -> None:
    opts = parse_args(
        [
            *BASE,
            *("--store-endpoint", "http://127.0.0.1:2379", "--store-endpoint", "https://etcd-1.example"),
            *("--store-wait", "5"),
            *("--cache-kubeconfig-secret", "cache"),
            *("--root-shard-kubeconfig-secret", "root-shard:admin.kubeconfig"),
            *("--admin-secret", "alpha-a-admin", "--front-url", "https://kcp.example:6443"),
            *KCP,
        ]
    )
    assert opts.store_endpoints == [
        StoreEndpoint("http://127.0.0.1:2379", "127.0.0.1", 2379),
        StoreEndpoint("https://etcd-1.example", "etcd-1.example", 2379),  # etcd's client port by default
    ]
    assert opts.store_wait == 5.0
    assert opts.cache_kubeconfig_secret == SecretKey("cache", "kubeconfig")
    assert opts.root_shard_kubeconfig_secret == SecretKey("root-shard", "admin.kubeconfig")
    assert (opts.admin_secret, opts.front_url) == ("alpha-a-admin", "https://kcp.example:6443")
    assert opts.command == KCP[1:]  # what follows `--` is kcp's, untouched


def test_store_endpoint_hides_userinfo_and_keeps_ipv6() -> None:
    assert store_endpoint("https://root:s3cret@10.0.0.5:32379") == StoreEndpoint(
        "https://10.0.0.5:32379", "10.0.0.5", 32379
    )
    assert store_endpoint("http://[::1]:2379") == StoreEndpoint("http://[::1]:2379", "::1", 2379)


@pytest.mark.parametrize(
    "url",
    [
        "127.0.0.1:2379",
        "unix:///run/etcd.sock",
        "http://",
        "http://u:s3cret@host:99999",
        "u:s3cret@host:2379",
    ],
)
def test_bad_store_endpoints_are_usage_errors_without_credentials(url: str) -> None:
    with pytest.raises(UsageError) as info:
        parse("--store-endpoint", url)
    assert "--store-endpoint" in str(info.value)
    assert "s3cret" not in str(info.value)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--admin-secret", "a"), "--admin-secret and --front-url go together"),
        (("--front-url", "https://kcp.example"), "--admin-secret and --front-url go together"),
        (("--admin-secret", "a", "--front-url", "http://kcp.example"), "is not a URL like https://"),
        (("--admin-secret", "Not_A_Name", "--front-url", "https://kcp.example"), "is not a Secret name"),
        (("--cache-kubeconfig-secret", "cache:"), "takes NAME or NAME:KEY"),
        (("--cache-kubeconfig-secret", "ns/cache"), "takes NAME or NAME:KEY"),
        (("--root-shard-kubeconfig-secret", ":kubeconfig"), "takes NAME or NAME:KEY"),
        (("--store-wait", "-1"), "--store-wait must not be negative"),
    ],
)
def test_usage_errors(extra: tuple[str, ...], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse(*extra)


def test_front_url_with_userinfo_is_refused_without_showing_it() -> None:
    with pytest.raises(UsageError) as info:
        parse("--admin-secret", "a", "--front-url", "https://admin:s3cret@kcp.example")
    assert "s3cret" not in str(info.value)
