"""Process tests of the stand-in's leader election and workspace controller on one real etcd."""

from __future__ import annotations

import datetime as dt
import signal
import time
from pathlib import Path

import httpx

from kcpshard_testkit.etcd import EtcdServer
from kcpshard_testkit.fakekcp.process import KcpProcess, wait_for

LEASE = "/clusters/system:admin/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kcp-controllers"
WS = "/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces"
# Shortened timings for tests only; the defaults are kcp's 60 s / 5 s / 2 s.
QUICK = {
    "KCP_FAKE_RSA_BITS": "2048",
    "KCP_FAKE_STARTUP_SECONDS": "0.1",
    "KCP_FAKE_LEASE_DURATION_SECONDS": "4",
    "KCP_FAKE_RENEW_DEADLINE_SECONDS": "1",
    "KCP_FAKE_RETRY_PERIOD_SECONDS": "0.3",
}


def start(
    kcps: list[KcpProcess], root: Path, etcd: EtcdServer, env: dict[str, str] | None = None
) -> KcpProcess:
    args = [
        "--secure-port=0",
        "--experimental-bind-free-port",
        f"--etcd-servers={etcd.endpoint}",
        "--enable-leader-election",
    ]
    k = KcpProcess(root, args, {**QUICK, **(env or {})})
    kcps.append(k)
    k.start()
    k.wait_ready()
    return k


def holder(c: httpx.Client) -> str | None:
    r = c.get(LEASE)
    return r.json()["spec"]["holderIdentity"] if r.status_code == 200 else None


def leaders(*ks: KcpProcess) -> list[str]:
    return [k.identity() for k in ks if "successfully acquired lease kube-system/kcp-controllers" in k.log()]


def test_two_on_one_etcd_exactly_one_leader(kcps: list[KcpProcess], etcd: EtcdServer, tmp_path: Path) -> None:
    a = start(kcps, tmp_path / "a", etcd)
    b = start(kcps, tmp_path / "b", etcd)
    with a.client() as c:
        current = wait_for("a lease holder", lambda: holder(c))
        lease = c.get(LEASE).json()["spec"]
    assert current in (a.identity(), b.identity())
    assert a.identity() != b.identity()
    assert lease["leaseDurationSeconds"] == 4
    # Several retry periods later the same single process holds it and no one else acquired.
    wait_for("several renewals", lambda: _renewed_after(a, lease["renewTime"]))
    assert leaders(a, b) == [current]
    with b.client() as c:
        assert holder(c) == current


def _renewed_after(k: KcpProcess, renew_time: str) -> bool:
    with k.client() as c:
        return bool(c.get(LEASE).json()["spec"]["renewTime"] > renew_time)


def test_deleted_lease_is_taken_again(kcps: list[KcpProcess], etcd: EtcdServer, tmp_path: Path) -> None:
    a = start(kcps, tmp_path / "a", etcd)
    with a.client() as c:
        first = wait_for("a lease holder", lambda: holder(c))
        assert first == a.identity()
        a.signal(signal.SIGKILL)  # dies without releasing
        a.wait_exit()
    b = start(kcps, tmp_path / "b", etcd, env={"KCP_FAKE_LEASE_DURATION_SECONDS": "600"})
    with b.client() as c:
        # The dead holder's lease is still valid for b: b does not take it...
        assert holder(c) == first
        assert c.delete(LEASE).status_code == 200
        # ...until it is deleted.
        assert wait_for("b to take the lease", lambda: holder(c) == b.identity() or None, timeout=10)
        assert c.get(LEASE).json()["spec"]["leaseDurationSeconds"] == 600


def test_kill_9_leader_other_takes_over_after_expiry(
    kcps: list[KcpProcess], etcd: EtcdServer, tmp_path: Path
) -> None:
    a = start(kcps, tmp_path / "a", etcd)
    with a.client() as c:
        wait_for("a to lead", lambda: holder(c) == a.identity() or None)
    b = start(kcps, tmp_path / "b", etcd)
    with b.client() as c:
        assert holder(c) == a.identity()
        a.signal(signal.SIGKILL)
        a.wait_exit()
        last = c.get(LEASE).json()["spec"]  # a's last renewal
        wait_for("b to take over", lambda: holder(c) == b.identity() or None, timeout=15)
        spec = c.get(LEASE).json()["spec"]
    assert spec["leaseTransitions"] == last["leaseTransitions"] + 1
    # b acquired only once a's last renewal had expired (same clock for both processes).
    expired_for = _ts(spec["acquireTime"]) - _ts(last["renewTime"])
    assert expired_for >= last["leaseDurationSeconds"]


def _ts(micro_time: str) -> float:
    return dt.datetime.strptime(micro_time, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC).timestamp()


def test_only_the_leader_readies_workspaces(kcps: list[KcpProcess], etcd: EtcdServer, tmp_path: Path) -> None:
    a = start(kcps, tmp_path / "a", etcd, env={"KCP_FAKE_LEASE_DURATION_SECONDS": "600"})
    with a.client() as c:
        wait_for("a to lead", lambda: holder(c) == a.identity() or None)
    a.signal(signal.SIGKILL)
    a.wait_exit()
    b = start(kcps, tmp_path / "b", etcd, env={"KCP_FAKE_LEASE_DURATION_SECONDS": "600"})
    body = {
        "apiVersion": "tenancy.kcp.io/v1alpha1",
        "kind": "Workspace",
        "metadata": {"name": "probe"},
        "spec": {},
    }
    with b.client() as c:
        assert c.post(WS, json=body).status_code == 201
        # b runs alone but is not the leader: for many controller periods (0.2 s) the workspace must stay
        # put. Observing a non-event needs a fixed window; it is not a wait for a condition.
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            assert c.get(f"{WS}/probe").json()["status"]["phase"] == "Scheduling"
            time.sleep(0.1)
        assert c.delete(LEASE).status_code == 200
        ws = wait_for(
            "the workspace to be Ready",
            lambda: (w := c.get(f"{WS}/probe").json())["status"]["phase"] == "Ready" and w,
            timeout=10,
        )
    assert ws["metadata"]["annotations"]["fake.kcp.io/readied-by"] == b.identity()
