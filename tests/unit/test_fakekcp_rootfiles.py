"""Root-directory files of the stand-in: token store, kubeconfig and kcp's refusals."""

from __future__ import annotations

import hashlib
import stat
from pathlib import Path

import pytest
import yaml

from kcpshard_testkit.fakekcp import rootfiles


def test_first_and_second_start(tmp_path: Path) -> None:
    store, kc = tmp_path / ".admin-token-store", tmp_path / "admin.kubeconfig"
    first = rootfiles.apply_admin_authentication(store)
    assert first.shard_admin and store.read_bytes() == hashlib.sha256(first.shard_admin.encode()).digest()
    assert stat.S_IMODE(store.stat().st_mode) == 0o600
    rootfiles.write_kubeconfig(kc, store, first, "https://h:1", b"CA", with_user=False)
    assert stat.S_IMODE(kc.stat().st_mode) == 0o600
    second = rootfiles.apply_admin_authentication(store)
    assert second.shard_admin == ""  # must be read back from the kubeconfig
    rootfiles.write_kubeconfig(kc, store, second, "https://h:1", b"CA", with_user=False)
    assert second.shard_admin == first.shard_admin and second.kcp_admin != first.kcp_admin
    assert second.authenticate(first.shard_admin) == "shard-admin"
    assert second.authenticate(second.kcp_admin) == "kcp-admin"
    assert second.authenticate(first.kcp_admin) is None
    doc = yaml.safe_load(kc.read_text())
    assert doc["current-context"] == "root"


def test_refusals_use_kcps_wording(tmp_path: Path) -> None:
    store, kc = tmp_path / ".admin-token-store", tmp_path / "admin.kubeconfig"
    store.write_bytes(hashlib.sha256(b"other").digest())
    tokens = rootfiles.apply_admin_authentication(store)
    with pytest.raises(
        rootfiles.RootFilesError,
        match=r"cannot create the 'admin.kubeconfig' file with an empty token for the shard-admin user",
    ):
        rootfiles.write_kubeconfig(kc, store, tokens, "https://h:1", b"CA", with_user=False)
    kc.write_text(yaml.safe_dump({"users": [{"name": "shard-admin", "user": {"token": "mismatch"}}]}))
    with pytest.raises(rootfiles.RootFilesError, match=r"is not valid anymore\. Remove file") as e:
        rootfiles.write_kubeconfig(kc, store, tokens, "https://h:1", b"CA", with_user=False)
    assert "mismatch" not in str(e.value)  # never a token in a message


def test_user_battery_adds_user_context(tmp_path: Path) -> None:
    tokens = rootfiles.apply_admin_authentication(tmp_path / "s")
    doc = yaml.safe_load(rootfiles.render_kubeconfig(tokens, "https://h:1", b"CA", with_user=True))
    assert {"name": "user", "context": {"cluster": "root", "user": "user"}} in doc["contexts"]
