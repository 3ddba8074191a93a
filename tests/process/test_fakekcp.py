"""Process tests of the stand-in kcp: port 0, root files, readiness, auth, routes, shutdown, validation."""

from __future__ import annotations

import base64
import hashlib
import signal
import socket
import ssl
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from kcpshard.agent.procnet import listening_ports
from kcpshard_testkit.etcd import EtcdServer
from kcpshard_testkit.fakekcp import binary_path
from kcpshard_testkit.fakekcp.process import KcpProcess, wait_for

FAST = {"KCP_FAKE_RSA_BITS": "2048", "KCP_FAKE_STARTUP_SECONDS": "0.2"}
WS = "/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces"


def start(
    kcps: list[KcpProcess], root: Path, etcd: EtcdServer, *extra: str, env: dict[str, str] | None = None
) -> KcpProcess:
    args = ["--secure-port=0", "--experimental-bind-free-port", f"--etcd-servers={etcd.endpoint}", *extra]
    k = KcpProcess(root, args, {**FAST, **(env or {})})
    kcps.append(k)
    return k.start()


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [binary_path(), *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **FAST, **(env or {})},
    )


def kubeconfig(root: Path) -> dict[str, object]:
    doc: dict[str, object] = yaml.safe_load((root / "admin.kubeconfig").read_text())
    return doc


def users(doc: dict[str, object]) -> dict[str, str]:
    return {u["name"]: u["user"]["token"] for u in doc["users"]}  # type: ignore[attr-defined]


def test_free_port_one_listener_and_log_line(
    kcps: list[KcpProcess], etcd: EtcdServer, tmp_path: Path
) -> None:
    k = start(kcps, tmp_path / "root", etcd)
    port = k.port()
    assert port != 6443
    assert f"Serving securely on 127.0.0.1:{port}" in k.log()
    # admin.kubeconfig exists by the time serving is announced: it is written before.
    assert (tmp_path / "root" / "admin.kubeconfig").is_file()
    assert wait_for("one listening socket", lambda: listening_ports(k.pid) or None) == [port]
    doc = kubeconfig(tmp_path / "root")
    servers = {c["name"]: c["cluster"]["server"] for c in doc["clusters"]}  # type: ignore[attr-defined]
    assert servers == {
        "base": f"https://127.0.0.1:{port}",
        "root": f"https://127.0.0.1:{port}/clusters/root",
        "system:admin": f"https://127.0.0.1:{port}/clusters/system:admin",
    }


def test_root_files_formats_and_modes(kcps: list[KcpProcess], etcd: EtcdServer, tmp_path: Path) -> None:
    root = tmp_path / "root"
    k = start(kcps, root, etcd, "--shard-base-url=https://front.example.test:7443")
    k.wait_ready()
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    for name in ("apiserver.key", "sa.key", ".admin-token-store", "admin.kubeconfig"):
        assert stat.S_IMODE((root / name).stat().st_mode) == 0o600, name
    certs = x509.load_pem_x509_certificates((root / "apiserver.crt").read_bytes())
    assert len(certs) == 2 and certs[0].issuer == certs[1].subject  # serving cert, then its CA
    sans = certs[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in sans.get_values_for_type(x509.DNSName)
    assert "front.example.test" in sans.get_values_for_type(x509.DNSName)
    assert "127.0.0.1" in [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
    assert b"RSA PRIVATE KEY" in (root / "sa.key").read_bytes()
    doc = kubeconfig(root)
    tokens = users(doc)
    assert set(tokens) == {"kcp-admin", "shard-admin"}
    assert (root / ".admin-token-store").read_bytes() == hashlib.sha256(
        tokens["shard-admin"].encode()
    ).digest()
    ctx = {c["name"]: c["context"] for c in doc["contexts"]}  # type: ignore[attr-defined]
    assert ctx["root"] == {"cluster": "root", "user": "kcp-admin"}
    assert ctx["base"] == {"cluster": "base", "user": "kcp-admin"}
    assert ctx["system:admin"] == {"cluster": "system:admin", "user": "shard-admin"}
    assert ctx["shard-base"] == {"cluster": "base", "user": "shard-admin"}
    base = next(c for c in doc["clusters"] if c["name"] == "base")  # type: ignore[attr-defined]
    assert base["cluster"]["server"] == "https://front.example.test:7443"  # the base URL, not the port
    assert (
        base64.b64decode(base["cluster"]["certificate-authority-data"])
        == (root / "apiserver.crt").read_bytes()
    )
    # TLS really uses that cert: verification against its CA succeeds for 127.0.0.1.
    ca = certs[1].public_bytes(Encoding.PEM)
    (tmp_path / "ca.pem").write_bytes(ca)
    with httpx.Client(verify=ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))) as c:
        assert c.get(f"https://127.0.0.1:{k.port()}/readyz").text == "ok"


def test_second_start_reuses_shard_admin_token(
    kcps: list[KcpProcess], etcd: EtcdServer, tmp_path: Path
) -> None:
    root = tmp_path / "root"
    first = start(kcps, root, etcd)
    first.wait_ready()
    before = users(kubeconfig(root))
    key_before = (root / "apiserver.key").read_bytes()
    first.stop()
    second = start(kcps, root, etcd)
    second.wait_ready()
    after = users(kubeconfig(root))
    assert after["shard-admin"] == before["shard-admin"]
    assert after["kcp-admin"] != before["kcp-admin"]
    assert (root / "apiserver.key").read_bytes() == key_before
    with second.client("shard-admin") as c:
        assert c.get("/clusters/root/api/v1/namespaces").status_code == 200
    with second.client(None) as c:  # the old kcp-admin token is gone with the old process
        r = c.get(
            "/clusters/root/api/v1/namespaces", headers={"Authorization": f"Bearer {before['kcp-admin']}"}
        )
        assert r.status_code == 401


def test_refuses_token_store_without_kubeconfig(etcd: EtcdServer, tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    (root / ".admin-token-store").write_bytes(hashlib.sha256(b"x").digest())
    r = run_cli(
        "start",
        f"--root-directory={root}",
        "--secure-port=0",
        "--experimental-bind-free-port",
        f"--etcd-servers={etcd.endpoint}",
    )
    assert r.returncode == 1
    assert (
        "cannot create the 'admin.kubeconfig' file with an empty token for the shard-admin user" in r.stderr
    )
    assert "Traceback" not in r.stderr
    assert not (root / "admin.kubeconfig").exists()


def test_readyz_before_and_after_ready_and_on_sigterm(
    kcps: list[KcpProcess], etcd: EtcdServer, tmp_path: Path
) -> None:
    k = start(
        kcps, tmp_path / "root", etcd, "--shutdown-delay-duration=30s", env={"KCP_FAKE_STARTUP_SECONDS": "60"}
    )
    with httpx.Client(base_url=k.url, verify=False) as c:
        r = c.get("/readyz")
        assert r.status_code == 500
        assert "[+]ping ok" in r.text and "failed: reason withheld" in r.text
        assert r.text.rstrip().endswith("readyz check failed")
        assert c.get("/livez").status_code in (200, 500)  # anonymous, answered
    k.signal(signal.SIGKILL)  # its 30 s shutdown delay is not under test here
    k.wait_exit()
    k2 = start(kcps, tmp_path / "root2", etcd, "--shutdown-delay-duration=30s")
    k2.wait_ready()
    with httpx.Client(base_url=k2.url, verify=False) as c:
        assert c.get("/readyz").text == "ok"
        verbose = c.get("/readyz?verbose").text
        assert "[+]shutdown ok" in verbose and "readyz check passed" in verbose
        k2.signal(signal.SIGTERM)

        def failing() -> httpx.Response | None:
            r = c.get("/readyz")
            return r if r.status_code == 500 else None

        assert "[-]shutdown failed: reason withheld" in wait_for("readyz to fail", failing).text
        # Still serving other requests during the delay.
        with k2.client() as admin:
            assert admin.get("/clusters/root/api/v1/namespaces").status_code == 200
    assert k2.exit_code() is None
    k2.signal(signal.SIGTERM)  # a second signal exits at once, code 1
    assert k2.wait_exit() == 1


def test_shutdown_send_retry_after(kcps: list[KcpProcess], etcd: EtcdServer, tmp_path: Path) -> None:
    k = start(
        kcps,
        tmp_path / "root",
        etcd,
        "--shutdown-delay-duration=1s",
        "--shutdown-send-retry-after",
        env={"KCP_FAKE_RETRY_AFTER_HOLD_SECONDS": "30"},
    )
    k.wait_ready()
    token = k.token()
    k.signal(signal.SIGTERM)

    def got_429() -> httpx.Response | None:
        with httpx.Client(base_url=k.url, verify=False) as c:
            r = c.get("/clusters/root/api/v1/namespaces", headers={"Authorization": f"Bearer {token}"})
            return r if r.status_code == 429 else None

    r = wait_for("a 429 after the shutdown delay", got_429)
    assert r.headers["Retry-After"] == "5"
    assert r.headers["Connection"] == "close"
    assert r.text.strip() == "The apiserver is shutting down, please try again later."
    with httpx.Client(base_url=k.url, verify=False) as c:  # health checks are exempt
        assert c.get("/readyz").status_code == 500


def _get(conn: ssl.SSLSocket, token: str, query: str = "") -> bytes:
    """One keep-alive GET on `conn`; the head of the answer (the list is small: one read holds it)."""
    path = f"/clusters/root/api/v1/namespaces{query}"
    conn.sendall(f"GET {path} HTTP/1.1\r\nHost: kcp\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
    return conn.recv(65536).split(b"\r\n\r\n", 1)[0].lower()


def test_without_retry_after_kept_alive_connections_close_when_the_delay_ends(
    kcps: list[KcpProcess], etcd: EtcdServer, tmp_path: Path
) -> None:
    """What the operator relies on (it passes `--shutdown-send-retry-after=false`): a client's kept-alive
    connection is served through the shutdown delay and then closed by the server, so the client opens a
    new one (through the front, to the new slot) instead of waiting out a 429's Retry-After."""
    k = start(
        kcps, tmp_path / "root", etcd, "--shutdown-delay-duration=2s", "--shutdown-send-retry-after=false"
    )
    k.wait_ready()
    token = k.token()
    host, port = k.url.removeprefix("https://").rsplit(":", 1)
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE

    def connect() -> ssl.SSLSocket:
        return context.wrap_socket(socket.create_connection((host, int(port))), server_hostname=host)

    # An open watch keeps the process alive after its HTTP server stopped (it holds watches), so the
    # idle connection's close below is the server's doing, not the process's exit.
    with connect() as watch, connect() as conn:
        assert _get(watch, token, "?watch=true").startswith(b"http/1.1 200")
        assert _get(conn, token).startswith(b"http/1.1 200")
        k.signal(signal.SIGTERM)
        during = _get(conn, token)  # the same connection, inside the delay: served, kept alive
        assert during.startswith(b"http/1.1 200") and b"connection: close" not in during
        conn.settimeout(30)
        assert conn.recv(1) == b""  # closed once the delay ended: no 429, no Retry-After to wait out
        assert k.exit_code() is None
        assert 'name="NotAcceptingNewRequest"' in k.log()
    assert k.wait_exit() == 0


def test_shutdown_exits_zero_after_delay(kcps: list[KcpProcess], etcd: EtcdServer, tmp_path: Path) -> None:
    k = start(kcps, tmp_path / "root", etcd, "--shutdown-delay-duration=500ms")
    k.wait_ready()
    k.signal(signal.SIGTERM)
    assert k.wait_exit() == 0
    assert 'name="AfterShutdownDelayDuration"' in k.log()


def test_auth_and_routes(kcps: list[KcpProcess], etcd: EtcdServer, tmp_path: Path) -> None:
    k = start(kcps, tmp_path / "root", etcd, env={"KCP_FAKE_VERSION": "v0.32.3"})
    k.wait_ready()
    with httpx.Client(base_url=k.url, verify=False) as anon:
        assert anon.get("/version").json()["gitVersion"].endswith("+kcp-v0.32.3")
        bad = anon.get("/clusters/root/api/v1/namespaces", headers={"Authorization": "Bearer nope"})
        assert bad.status_code == 401 and bad.json()["reason"] == "Unauthorized"
        assert anon.get("/clusters/root/api/v1/namespaces").status_code == 403
    for user in ("shard-admin", "kcp-admin"):
        with k.client(user) as c:
            names = [n["metadata"]["name"] for n in c.get("/clusters/root/api/v1/namespaces").json()["items"]]
            assert "default" in names
    with k.client() as c:
        cm = "/clusters/root/api/v1/namespaces/default/configmaps"
        created = c.post(cm, json={"metadata": {"name": "a"}, "data": {"k": "v"}})
        assert created.status_code == 201
        assert c.post(cm, json={"metadata": {"name": "a"}}).json()["reason"] == "AlreadyExists"
        got = c.get(f"{cm}/a").json()
        got["data"]["k"] = "w"
        assert c.put(f"{cm}/a", json=got).json()["data"] == {"k": "w"}
        assert c.put(f"{cm}/a", json=got).status_code == 409  # stale resourceVersion
        assert c.delete(f"{cm}/a").json()["status"] == "Success"
        assert c.get(f"{cm}/a").status_code == 404
        marker = c.get("/clusters/system:system-crds/api/v1/namespaces/default/configmaps/system-crds").json()
        assert marker["data"]["version"] == "v0.32.3"
        shard = c.get("/clusters/root/apis/core.kcp.io/v1alpha1/shards/root").json()
        assert shard["spec"]["baseURL"] == f"https://127.0.0.1:{k.port()}"
        assert "tenancy.kcp.io" in [g["name"] for g in c.get("/clusters/root/apis").json()["groups"]]


def test_shard_object_follows_the_slot_urls(kcps: list[KcpProcess], etcd: EtcdServer, tmp_path: Path) -> None:
    a = start(kcps, tmp_path / "a", etcd, "--shard-base-url=https://front:6443")
    a.wait_ready()
    b = start(
        kcps,
        tmp_path / "b",
        etcd,
        "--shard-base-url=https://other:6443",
        "--shard-external-url=https://ext:443",
    )
    b.wait_ready()
    with a.client() as c:
        spec = c.get("/clusters/root/apis/core.kcp.io/v1alpha1/shards/root").json()["spec"]
    assert spec == {
        "baseURL": "https://other:6443",
        "externalURL": "https://ext:443",
        "virtualWorkspaceURL": "https://other:6443",
    }


def test_workspace_lifecycle_without_leader_election(
    kcps: list[KcpProcess], etcd: EtcdServer, tmp_path: Path
) -> None:
    k = start(kcps, tmp_path / "root", etcd)
    k.wait_ready()
    with k.client() as c:
        body = {
            "apiVersion": "tenancy.kcp.io/v1alpha1",
            "kind": "Workspace",
            "metadata": {"name": "p"},
            "spec": {},
        }
        r = c.post(WS, json=body)
        assert r.status_code == 201 and r.json()["status"]["phase"] == "Scheduling"
        assert c.post(WS, json=body).status_code == 409
        wait_for("Ready", lambda: c.get(f"{WS}/p").json()["status"]["phase"] == "Ready")
        assert [w["metadata"]["name"] for w in c.get(WS).json()["items"]] == ["p"]
        assert c.delete(f"{WS}/p").status_code == 200
        assert c.get(f"{WS}/p").status_code == 404


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--secure-port=6444", "--experimental-bind-free-port"],
            "--secure-port=0 required if --experimental-bind-free-port is set",
        ),
        (
            ["--secure-port=0", "--experimental-bind-free-port", "--shard-name=s1"],
            "--cache-kubeconfig is required for non-root shards",
        ),
    ],
)
def test_validation_errors(etcd: EtcdServer, tmp_path: Path, args: list[str], message: str) -> None:
    r = run_cli("start", f"--root-directory={tmp_path / 'r'}", f"--etcd-servers={etcd.endpoint}", *args)
    assert r.returncode == 1
    assert message in r.stderr and '"command failed"' in r.stderr
    assert "Traceback" not in r.stderr


def test_unknown_flag_and_version() -> None:
    r = run_cli("start", "--bogus=1")
    assert r.returncode == 1 and r.stderr.strip() == "Error: unknown flag: --bogus"
    v = run_cli("version", env={"KCP_FAKE_VERSION": "v0.33.0"})
    assert v.returncode == 0 and "v0.33.0" in v.stdout


def test_non_root_shard_rules_by_version(kcps: list[KcpProcess], etcd: EtcdServer, tmp_path: Path) -> None:
    cache = tmp_path / "cache.kubeconfig"
    cache.write_text("apiVersion: v1\nkind: Config\n")
    base = [
        "--secure-port=0",
        "--experimental-bind-free-port",
        f"--etcd-servers={etcd.endpoint}",
        "--shard-name=s1",
        f"--cache-kubeconfig={cache}",
    ]
    old = run_cli("start", f"--root-directory={tmp_path / 'x'}", *base, env={"KCP_FAKE_VERSION": "v0.32.1"})
    assert (
        old.returncode == 1 and "--root-shard-kubeconfig-file is required for non-root shards" in old.stderr
    )
    # v0.32 with the flag keeps an identitycache ConfigMap; v0.33 ignores the flag (with a warning) and
    # leaves that ConfigMap behind.
    k = start(
        kcps,
        tmp_path / "s1",
        etcd,
        "--shard-name=s1",
        f"--cache-kubeconfig={cache}",
        f"--root-shard-kubeconfig-file={cache}",
        "--external-hostname=ignored.example",
    )
    k.wait_ready()
    k.stop()
    new = start(
        kcps,
        tmp_path / "s1",
        etcd,
        "--shard-name=s1",
        f"--cache-kubeconfig={cache}",
        f"--root-shard-kubeconfig-file={cache}",
        env={"KCP_FAKE_VERSION": "v0.33.0"},
    )
    new.wait_ready()
    assert "Flag --root-shard-kubeconfig-file has been deprecated" in new.log()
    with new.client() as c:
        stale = c.get("/clusters/system:shard/api/v1/namespaces/default/configmaps/identitycache")
        assert stale.status_code == 200 and stale.json()["data"]["writtenBy"] == "v0.32.1"
        marker = c.get("/clusters/system:system-crds/api/v1/namespaces/default/configmaps/system-crds").json()
        assert marker["data"]["version"] == "v0.33.0"


def test_module_entry_point_runs() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "kcpshard_testkit.fakekcp", "version"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0 and r.stdout.startswith("kcp version ")
