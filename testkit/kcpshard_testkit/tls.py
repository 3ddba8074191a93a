"""Self-signed CA, serving certificate for 127.0.0.1/localhost, bearer token and kubeconfig files.

What `kind`/`kubeadm` write for a cluster, reduced to one user: a kubeconfig with the CA data inline,
the server URL and a token (files holding secrets are mode 0600).
"""

from __future__ import annotations

import base64
import secrets
import ssl
from pathlib import Path
from typing import Any

import yaml

from kcpshard_testkit.pki import CertificateAuthority, write_private

__all__ = [
    "kubeconfig_document",
    "make_certificates",
    "namespaced_kubeconfig",
    "new_token",
    "server_context",
    "write_kubeconfig",
    "write_private",
]

CONTEXT = "kcpshard-dev"


def make_certificates(workdir: Path) -> tuple[Path, Path, Path]:
    """Create ca.crt, apiserver.crt and apiserver.key (0600) in `workdir`; returns their paths."""
    ca = CertificateAuthority()
    ca_path = workdir / "ca.crt"
    ca_path.write_bytes(ca.cert_pem)
    cert_path, key_path = ca.serving().write(workdir / "apiserver.crt", workdir / "apiserver.key")
    return ca_path, cert_path, key_path


def server_context(cert_path: Path, key_path: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(cert_path), str(key_path))
    return ctx


def new_token() -> str:
    return secrets.token_urlsafe(32)


def write_kubeconfig(
    path: Path,
    url: str,
    ca_path: Path,
    token: str | None = None,
    namespace: str = "default",
    *,
    user: dict[str, Any] | None = None,
) -> None:
    """A one-context kubeconfig (mode 0600): the CA inline, and `token` or the kubeconfig `user` fields
    (`client-certificate-data`/`client-key-data`, `tokenFile`)."""
    credentials = dict(user or {})
    if token is not None:
        credentials["token"] = token
    write_private(path, kubeconfig_document(url, ca_path.read_bytes(), credentials, namespace=namespace))


def kubeconfig_document(
    server: str,
    ca_pem: bytes,
    user: dict[str, Any],
    *,
    context: str = CONTEXT,
    namespace: str | None = None,
    server_name: str | None = None,
) -> bytes:
    """A one-context kubeconfig with everything inline (for a file, or a Secret that carries it)."""
    cluster: dict[str, Any] = {
        "server": server,
        "certificate-authority-data": base64.b64encode(ca_pem).decode(),
    }
    if server_name:
        cluster["tls-server-name"] = server_name
    names: dict[str, Any] = {"cluster": context, "user": context}
    if namespace is not None:
        names["namespace"] = namespace
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": cluster}],
        "users": [{"name": context, "user": user}],
        "contexts": [{"name": context, "context": names}],
        "current-context": context,
        "preferences": {},
    }
    return yaml.safe_dump(config, sort_keys=False).encode()


def namespaced_kubeconfig(source: Path, namespace: str, path: Path) -> Path:
    """A copy of the kubeconfig `source` whose contexts name `namespace` (mode 0600), so kubectl and
    the plugin default to it."""
    config = yaml.safe_load(source.read_text())
    for context in config["contexts"]:
        context["context"]["namespace"] = namespace
    write_private(path, yaml.safe_dump(config).encode())
    return path
