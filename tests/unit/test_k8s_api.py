"""Pure parts of kcpshard.k8s.api and kcpshard.k8s.kubeconfig."""

from __future__ import annotations

import base64
import datetime as dt
import ssl
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kcpshard.k8s.api import (
    JOBS,
    KCPSHARDS,
    NAMESPACES,
    PODS,
    ApiError,
    Conflict,
    Gone,
    Invalid,
    NotFound,
    _relist_events,
    error_from_status,
)
from kcpshard.k8s.kubeconfig import KubeconfigError, in_cluster_config, load_kubeconfig, resolve_config


def test_paths() -> None:
    assert PODS.path("ns") == "/api/v1/namespaces/ns/pods"
    assert PODS.path(None) == "/api/v1/pods"
    assert PODS.path("ns", "p", "status") == "/api/v1/namespaces/ns/pods/p/status"
    assert JOBS.path("ns", "j") == "/apis/batch/v1/namespaces/ns/jobs/j"
    assert (
        KCPSHARDS.path("ns", "s", "status") == "/apis/kcpshard.dev/v1alpha1/namespaces/ns/kcpshards/s/status"
    )
    assert NAMESPACES.path("ignored", "n") == "/api/v1/namespaces/n"
    assert KCPSHARDS.api_version == "kcpshard.dev/v1alpha1" and PODS.api_version == "v1"


@pytest.mark.parametrize(
    ("code", "cls"), [(404, NotFound), (409, Conflict), (410, Gone), (422, Invalid), (500, ApiError)]
)
def test_error_classes(code: int, cls: type[ApiError]) -> None:
    body = {"kind": "Status", "code": code, "reason": "Why", "message": 'things "x" went wrong'}
    err = error_from_status(code, body)
    assert type(err) is cls
    assert (err.status, err.reason, err.message) == (code, "Why", 'things "x" went wrong')
    assert str(err) == f'{code} Why: things "x" went wrong'


def test_error_without_status_body() -> None:
    err = error_from_status(401, None)
    assert err.status == 401 and err.reason == "Unauthorized"
    assert "401" in str(err)


def _obj(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": rv}}


def test_relist_reports_what_changed() -> None:
    known = {("ns", "a"): _obj("a", "1"), ("ns", "b"): _obj("b", "2"), ("ns", "gone"): _obj("gone", "3")}
    events = _relist_events(known, [_obj("a", "1"), _obj("b", "9"), _obj("new", "10")])
    got = [(e["type"], e["object"]["metadata"]["name"]) for e in events]
    assert got == [("DELETED", "gone"), ("MODIFIED", "b"), ("ADDED", "new")]
    assert set(known) == {("ns", "a"), ("ns", "b"), ("ns", "new")}


def _self_signed(tmp: Path) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "client")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _write_kubeconfig(
    path: Path, cluster: dict[str, Any], user: dict[str, Any], ns: str | None = None
) -> None:
    ctx: dict[str, Any] = {"cluster": "c", "user": "u"}
    if ns:
        ctx["namespace"] = ns
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": ctx}, {"name": "other", "context": {"cluster": "c"}}],
        "current-context": "ctx",
    }
    path.write_text(yaml.safe_dump(doc))


def test_kubeconfig_token_and_ca_data(tmp_path: Path) -> None:
    cert, _key = _self_signed(tmp_path)
    path = tmp_path / "kc"
    cluster = {
        "server": "https://127.0.0.1:6443/",
        "certificate-authority-data": base64.b64encode(cert).decode(),
    }
    _write_kubeconfig(path, cluster, {"token": "tok-123"}, ns="work")
    cfg = load_kubeconfig(path)
    assert cfg.server == "https://127.0.0.1:6443"
    assert cfg.current_token() == "tok-123"
    assert cfg.namespace == "work"
    ctx = cfg.ssl_context()
    assert isinstance(ctx, ssl.SSLContext) and ctx.verify_mode == ssl.CERT_REQUIRED
    assert "tok-123" not in repr(cfg)  # tokens stay out of reprs (and so out of logs)


def test_kubeconfig_client_cert_data_and_relative_files(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    (tmp_path / "ca.crt").write_bytes(cert)
    (tmp_path / "token").write_text("from-file\n")
    path = tmp_path / "kc"
    user = {
        "client-certificate-data": base64.b64encode(cert).decode(),
        "client-key-data": base64.b64encode(key).decode(),
        "tokenFile": "token",
    }
    _write_kubeconfig(path, {"server": "https://127.0.0.1:1", "certificate-authority": "ca.crt"}, user)
    cfg = load_kubeconfig(path)
    assert cfg.ca_file == tmp_path / "ca.crt"
    assert cfg.current_token() == "from-file"
    assert isinstance(cfg.ssl_context(), ssl.SSLContext)  # the key loads from memory


def test_kubeconfig_client_cert_files_and_insecure(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    path = tmp_path / "kc"
    cluster = {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}
    _write_kubeconfig(path, cluster, {"client-certificate": "tls.crt", "client-key": "tls.key"})
    ctx = load_kubeconfig(path).ssl_context()
    assert isinstance(ctx, ssl.SSLContext) and ctx.verify_mode == ssl.CERT_NONE


def test_kubeconfig_errors_are_clear(tmp_path: Path) -> None:
    path = tmp_path / "kc"
    _write_kubeconfig(path, {"server": "https://127.0.0.1:1"}, {"token": "secret-token"})
    with pytest.raises(KubeconfigError, match="no context named 'nope'"):
        load_kubeconfig(path, "nope")
    with pytest.raises(KubeconfigError, match="cannot read kubeconfig"):
        load_kubeconfig(tmp_path / "missing")
    (tmp_path / "bad").write_text("clusters: [")
    with pytest.raises(KubeconfigError, match="not valid YAML"):
        load_kubeconfig(tmp_path / "bad")


def test_kubeconfig_from_env_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "kc"
    _write_kubeconfig(path, {"server": "https://127.0.0.1:2"}, {"token": "t"})
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'absent'}:{path}")
    assert resolve_config().server == "https://127.0.0.1:2"
    assert resolve_config(path, "other").current_token() is None


def test_in_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "namespace").write_text("kcp-system")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    cfg = in_cluster_config(tmp_path)
    assert cfg.server == "https://[::1]:443"
    assert cfg.current_token() == "sa-token"
    assert cfg.namespace == "kcp-system"
    assert cfg.ca_file == tmp_path / "ca.crt"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    with pytest.raises(KubeconfigError, match="not running in a cluster"):
        in_cluster_config(tmp_path)
