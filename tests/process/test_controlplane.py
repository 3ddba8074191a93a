"""The real control plane: started from the built binaries, private files, nothing left after stop."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from kcpshard.k8s.api import ApiClient, ApiError
from kcpshard.k8s.credentials import load_credentials
from kcpshard_testkit.controlplane import ControlPlane
from kcpshard_testkit.identity import SERVICEACCOUNTS
from kcpshard_testkit.tools import ToolMissing

pytestmark = pytest.mark.timeout(180)


def alive(pid: int | None) -> bool:
    return pid is not None and os.path.exists(f"/proc/{pid}")


async def test_starts_serves_as_admin_and_stops_everything(tmp_path: Path) -> None:
    plane = ControlPlane(tmp_path / "cp")
    await plane.start()
    try:
        pids = [plane.etcd.pid, *(d.pid for d in (plane.apiserver, plane.controller_manager) if d)]
        assert len(pids) == 3 and all(alive(pid) for pid in pids)
        for private in ("admin.kubeconfig", "controller-manager.kubeconfig", "sa.key", "apiserver.key"):
            assert (tmp_path / "cp" / private).stat().st_mode & 0o777 == 0o600, private
        async with ApiClient.from_kubeconfig(plane.admin_kubeconfig) as api:
            version = await api.request("GET", "/version")
            assert version["gitVersion"] == "v1.37.2"
            review = await api.request(
                "POST",
                "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
            )
            assert "system:masters" in review["status"]["userInfo"]["groups"]
            # each controller runs as its own service account (--use-service-account-credentials)
            for account in ("job-controller", "deployment-controller", "generic-garbage-collector"):
                await api.get(SERVICEACCOUNTS, "kube-system", account)
        assert '"etcd-version":"3.6.' in (tmp_path / "cp" / "etcd.log").read_text()
    finally:
        await plane.stop()
    assert not any(alive(pid) for pid in pids)
    await plane.stop()  # idempotent


async def test_anonymous_is_refused(tmp_path: Path) -> None:
    async with ControlPlane(tmp_path / "cp") as plane:
        admin = load_credentials(plane.admin_kubeconfig)
        # the CA only: no user
        config = dataclasses.replace(admin, cert_data=None, key_data=None, reload=None)
        async with ApiClient(config) as anonymous:
            with pytest.raises(ApiError) as refused:
                await anonymous.request("GET", "/api/v1/namespaces/default/secrets")
    assert refused.value.status in (401, 403)


async def test_a_missing_binary_says_how_to_build_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KCPSHARD_TOOLS_BIN", str(tmp_path / "empty"))
    with pytest.raises(ToolMissing, match=r"kube-apiserver is not built .* run `make tools`"):
        await ControlPlane(tmp_path / "cp").start()
    assert not (tmp_path / "cp" / "etcd.log").exists()  # nothing was started
