"""Reading shard-admin and kcp-admin credentials from kcp's admin.kubeconfig."""

import base64
from typing import Any

import pytest
import yaml

from kcpshard.kcp.kubeconfig import (
    KubeconfigError,
    ShardAdmin,
    base_url,
    kcp_admin_kubeconfig,
    shard_admin,
)

CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
SHARD_TOKEN = "shard-admin-secret-token-0123"
KCP_TOKEN = "kcp-admin-volatile-token-4567"


def admin_kubeconfig(base: str = "https://10.0.0.5:6443", newer: bool = True) -> dict[str, Any]:
    """As kcp's createKubeConfig writes it (pkg/server/options/authentication.go)."""
    ca = base64.b64encode(CA).decode()
    clusters = [
        {"name": "root", "cluster": {"server": f"{base}/clusters/root", "certificate-authority-data": ca}},
        {"name": "base", "cluster": {"server": base, "certificate-authority-data": ca}},
    ]
    contexts = [
        {"name": "root", "context": {"cluster": "root", "user": "kcp-admin"}},
        {"name": "base", "context": {"cluster": "base", "user": "kcp-admin"}},
    ]
    if newer:
        clusters.append(
            {
                "name": "system:admin",
                "cluster": {"server": f"{base}/clusters/system:admin", "certificate-authority-data": ca},
            }
        )
        contexts += [
            {"name": "system:admin", "context": {"cluster": "system:admin", "user": "shard-admin"}},
            {"name": "shard-base", "context": {"cluster": "base", "user": "shard-admin"}},
        ]
    else:
        contexts.append({"name": "system:admin", "context": {"cluster": "base", "user": "shard-admin"}})
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": clusters,
        "contexts": contexts,
        "current-context": "root",
        "users": [
            {"name": "kcp-admin", "user": {"token": KCP_TOKEN}},
            {"name": "shard-admin", "user": {"token": SHARD_TOKEN}},
        ],
    }


@pytest.mark.parametrize("newer", [True, False])
def test_shard_admin_from_both_layouts(newer: bool) -> None:
    creds = shard_admin(yaml.safe_dump(admin_kubeconfig(newer=newer)))
    assert creds == ShardAdmin("https://10.0.0.5:6443", CA, SHARD_TOKEN)


def test_repr_hides_the_token() -> None:
    creds = shard_admin(yaml.safe_dump(admin_kubeconfig()))
    assert SHARD_TOKEN not in repr(creds) and SHARD_TOKEN not in str(creds)
    assert "10.0.0.5" in repr(creds)


def test_shard_admin_context_must_use_shard_admin() -> None:
    doc = admin_kubeconfig()
    for c in doc["contexts"]:
        if c["name"] == "shard-base":
            c["context"]["user"] = "kcp-admin"
    with pytest.raises(KubeconfigError, match="does not use user shard-admin"):
        shard_admin(yaml.safe_dump(doc))


def test_missing_parts_are_named_without_secrets() -> None:
    doc = admin_kubeconfig()
    doc["users"] = [u for u in doc["users"] if u["name"] != "shard-admin"]
    with pytest.raises(KubeconfigError, match="shard-admin has no token"):
        shard_admin(yaml.safe_dump(doc))
    doc = admin_kubeconfig()
    doc["contexts"] = [c for c in doc["contexts"] if c["context"]["user"] != "shard-admin"]
    with pytest.raises(KubeconfigError, match="no shard-admin context"):
        shard_admin(yaml.safe_dump(doc))


def test_invalid_yaml_error_does_not_quote_the_text() -> None:
    text = f"users: [{{token: {SHARD_TOKEN}\n  - : ]"
    with pytest.raises(KubeconfigError) as info:
        shard_admin(text)
    assert SHARD_TOKEN not in str(info.value)


@pytest.mark.parametrize(
    ("server", "base"),
    [
        ("https://h:6443/clusters/root", "https://h:6443"),
        ("https://h:6443", "https://h:6443"),
        ("https://h:6443/prefix/clusters/system:admin", "https://h:6443/prefix"),
    ],
)
def test_base_url(server: str, base: str) -> None:
    assert base_url(server) == base


def test_kcp_admin_kubeconfig_drops_shard_admin() -> None:
    out = yaml.safe_load(kcp_admin_kubeconfig(yaml.safe_dump(admin_kubeconfig())))
    assert [u["name"] for u in out["users"]] == ["kcp-admin"]
    assert out["users"][0]["user"]["token"] == KCP_TOKEN
    assert SHARD_TOKEN not in yaml.safe_dump(out)
    assert {c["name"] for c in out["contexts"]} == {"root", "base"}
    assert {c["name"] for c in out["clusters"]} == {"root", "base"}
    assert out["current-context"] == "root"


def test_kcp_admin_kubeconfig_can_name_another_server() -> None:
    out = yaml.safe_load(kcp_admin_kubeconfig(yaml.safe_dump(admin_kubeconfig()), server="https://front:443"))
    servers = {c["name"]: c["cluster"]["server"] for c in out["clusters"]}
    assert servers == {"root": "https://front:443/clusters/root", "base": "https://front:443"}
    assert base64.b64decode(out["clusters"][0]["cluster"]["certificate-authority-data"]) == CA
