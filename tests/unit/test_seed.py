"""Seeding a slot root from the shard's Secret (kcpshard.agent.seed)."""

from __future__ import annotations

import base64
import hashlib
import stat
from pathlib import Path

import pytest
import yaml

from kcpshard.agent import seed
from kcpshard.agent.seed import ROOT_FILES, SeedKind

TOKEN = "shard-admin-token-for-tests"
CERT = b"-----BEGIN CERTIFICATE-----\nU0VSVkVS\n-----END CERTIFICATE-----\n"
CA = b"-----BEGIN CERTIFICATE-----\nQ0E=\n-----END CERTIFICATE-----\n"


def material(token: str = TOKEN) -> dict[str, bytes]:
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "users": [
            {"name": "kcp-admin", "user": {"token": "per-start"}},
            {"name": "shard-admin", "user": {"token": token}},
        ],
    }
    return {
        "apiserver.crt": CERT + CA,
        "apiserver.key": b"-----BEGIN PRIVATE KEY-----\nSw==\n-----END PRIVATE KEY-----\n",
        "sa.key": b"-----BEGIN RSA PRIVATE KEY-----\nU0E=\n-----END RSA PRIVATE KEY-----\n",
        ".admin-token-store": hashlib.sha256(token.encode()).digest(),
        "admin.kubeconfig": yaml.safe_dump(kubeconfig).encode(),
    }


def secret_of(files: dict[str, bytes], **extra: str) -> dict[str, object]:
    data = {name: base64.b64encode(value).decode() for name, value in files.items()}
    data.update(extra)
    return {"metadata": {"name": "s-shared", "resourceVersion": "7"}, "data": data}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "slots" / "a"


def test_all_five_are_seeded(root: Path) -> None:
    plan = seed.plan_seed(secret_of(material()))
    assert plan.kind is SeedKind.SEEDED
    seed.wipe_root(root)
    seed.write_material(root, plan.files)
    assert seed.read_material(root) == material()
    assert not seed.material_problems(seed.read_material(root))


def test_files_and_dir_modes(root: Path) -> None:
    seed.wipe_root(root)
    seed.write_material(root, material())
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    for name in ROOT_FILES:
        assert stat.S_IMODE((root / name).stat().st_mode) == 0o600, name


def test_existing_file_mode_is_tightened(root: Path) -> None:
    root.mkdir(parents=True)
    (root / "sa.key").write_bytes(b"old")
    (root / "sa.key").chmod(0o644)
    seed.write_material(root, material())
    assert stat.S_IMODE((root / "sa.key").stat().st_mode) == 0o600
    assert (root / "sa.key").read_bytes() == material()["sa.key"]


def test_no_material_is_a_fresh_start() -> None:
    for secret in ({"metadata": {}}, {"data": {}}, secret_of({}, unrelated="eA==")):
        plan = seed.plan_seed(secret)
        assert plan.kind is SeedKind.FRESH_START
        assert plan.files == {}


def test_some_material_is_refused_with_the_missing_names() -> None:
    files = material()
    del files["admin.kubeconfig"], files["sa.key"]
    plan = seed.plan_seed(secret_of(files))
    assert plan.kind is SeedKind.INCOMPLETE
    assert plan.missing == ("sa.key", "admin.kubeconfig")
    assert plan.files == {}


def test_empty_value_counts_as_missing() -> None:
    secret = secret_of(material())
    secret["data"]["sa.key"] = ""  # type: ignore[index]
    plan = seed.plan_seed(secret)
    assert plan.kind is SeedKind.INCOMPLETE
    assert plan.missing == ("sa.key",)


def test_missing_secret() -> None:
    assert seed.plan_seed(None).kind is SeedKind.SECRET_NOT_FOUND


def test_bad_base64_names_the_key_not_the_value() -> None:
    secret = {"data": {"sa.key": "not base64 !!"}}
    with pytest.raises(seed.SeedError) as info:
        seed.plan_seed(secret)
    assert "sa.key" in str(info.value)
    assert "not base64" not in str(info.value)


def test_wipe_removes_everything_but_keeps_the_dir(root: Path) -> None:
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "sub" / "deeper" / "f").write_text("x")
    (root / ".admin-token-store").write_bytes(b"stale")
    outside = root.parent / "outside"
    outside.write_text("keep")
    (root / "link").symlink_to(outside)
    root.chmod(0o755)
    seed.wipe_root(root)
    assert root.is_dir()
    assert list(root.iterdir()) == []
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert outside.read_text() == "keep"  # a symlink is removed, not followed


def test_wipe_creates_a_missing_dir(root: Path) -> None:
    seed.wipe_root(root)
    assert root.is_dir() and stat.S_IMODE(root.stat().st_mode) == 0o700


@pytest.mark.parametrize("path", ["/", "/tmp", str(Path.home())])
def test_wipe_refuses_dangerous_paths(path: str) -> None:
    with pytest.raises(seed.SeedError):
        seed.wipe_root(Path(path))


def test_material_problems_while_kcp_is_writing() -> None:
    files = material()
    assert seed.material_problems(files) == []
    partial = dict(files)
    del partial["admin.kubeconfig"]
    assert seed.material_problems(partial) == ["admin.kubeconfig missing or empty"]
    half = dict(files, **{"apiserver.crt": CERT[:30]})
    assert seed.material_problems(half) == ["apiserver.crt has no complete certificate"]
    other = dict(files, **{".admin-token-store": hashlib.sha256(b"other").digest()})
    assert seed.material_problems(other) == [".admin-token-store does not match the shard-admin token"]
    no_user = dict(files, **{"admin.kubeconfig": b"users: []\n"})
    assert seed.material_problems(no_user) == ["admin.kubeconfig has no shard-admin token"]


def test_shard_admin_token() -> None:
    assert seed.shard_admin_token(material()["admin.kubeconfig"]) == TOKEN
    assert seed.shard_admin_token(b": not yaml : [") is None


def test_secret_with_material_keeps_other_keys_and_resource_version() -> None:
    secret = secret_of({}, other="eA==")
    secret["stringData"] = {"x": "y"}
    body = seed.secret_with_material(secret, material())
    assert body["metadata"]["resourceVersion"] == "7"
    assert body["data"]["other"] == "eA=="
    assert "stringData" not in body
    assert seed.plan_seed(body).files == material()
    assert "data" not in secret or "sa.key" not in secret["data"]  # the input is not changed


def test_last_certificate_is_the_ca() -> None:
    assert seed.last_certificate(CERT + CA) == CA.decode()
    with pytest.raises(seed.SeedError):
        seed.last_certificate(b"nothing here")


def test_private_file_is_0600_and_replaces_an_open_file(root: Path) -> None:
    seed.wipe_root(root)
    (root / seed.CACHE_KUBECONFIG).write_bytes(b"old, longer content")
    (root / seed.CACHE_KUBECONFIG).chmod(0o644)
    seed.write_private_file(root, seed.CACHE_KUBECONFIG, b"new")
    assert (root / seed.CACHE_KUBECONFIG).read_bytes() == b"new"
    assert stat.S_IMODE((root / seed.CACHE_KUBECONFIG).stat().st_mode) == 0o600


def test_private_file_does_not_follow_a_symlink(root: Path) -> None:
    seed.wipe_root(root)
    target = root.parent / "elsewhere"
    target.write_bytes(b"keep")
    (root / seed.ROOT_SHARD_KUBECONFIG).symlink_to(target)
    with pytest.raises(OSError):
        seed.write_private_file(root, seed.ROOT_SHARD_KUBECONFIG, b"secret")
    assert target.read_bytes() == b"keep"


def test_secret_value() -> None:
    secret = secret_of({"kubeconfig": b"kc"}, empty="")
    assert seed.secret_value(secret, "kubeconfig") == b"kc"
    assert seed.secret_value(secret, "empty") is None
    assert seed.secret_value(secret, "absent") is None
    assert seed.secret_value({"metadata": {}}, "kubeconfig") is None
    with pytest.raises(seed.SeedError, match="kubeconfig"):
        seed.secret_value({"data": {"kubeconfig": "not base64 !!"}}, "kubeconfig")


def test_admin_secret_is_owned_by_the_slot() -> None:
    slot = {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "KcpSlot",
        "metadata": {"name": "alpha-a", "namespace": "kcp", "uid": "u-1", "resourceVersion": "9"},
    }
    body = seed.admin_secret("alpha-a-admin", "kcp", "kind: Config\n", slot)
    assert body["type"] == "Opaque"
    assert body["metadata"] == {
        "name": "alpha-a-admin",
        "namespace": "kcp",
        "ownerReferences": [
            {
                "apiVersion": "kcpshard.dev/v1alpha1",
                "kind": "KcpSlot",
                "name": "alpha-a",
                "uid": "u-1",
                "controller": False,
            }
        ],
    }
    assert base64.b64decode(body["data"]["kubeconfig"]) == b"kind: Config\n"
