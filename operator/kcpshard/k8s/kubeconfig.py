"""Connection settings from a kubeconfig file or the in-cluster service account.

Imitates the subset of client-go's ``tools/clientcmd`` (``loader.go``, ``client_config.go``) and
``rest.InClusterConfig`` (``rest/config.go``) that the operator and its agents need: one kubeconfig file
(the first existing entry of ``$KUBECONFIG``; files are not merged), a context, bearer tokens (inline or
``tokenFile``), client certificates and CA bundles (inline data or files) and ``insecure-skip-tls-verify``.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeconfigError(Exception):
    """The connection settings cannot be loaded (message names the file and the field, never a secret)."""


@dataclass
class ConnectionConfig:
    """Everything needed to reach one API server."""

    server: str
    token: str | None = field(default=None, repr=False)
    token_file: Path | None = None  # re-read on every request: projected tokens rotate
    ca_data: str | None = field(default=None, repr=False)
    ca_file: Path | None = None
    cert_data: bytes | None = field(default=None, repr=False)
    key_data: bytes | None = field(default=None, repr=False)
    cert_file: Path | None = None
    key_file: Path | None = None
    insecure: bool = False
    namespace: str = "default"

    def ssl_context(self) -> ssl.SSLContext | bool:
        """The TLS settings for httpx (``False`` only for ``insecure-skip-tls-verify``)."""
        if not self.server.startswith("https://"):
            return False
        ctx = ssl.create_default_context()
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif self.ca_data is not None:
            ctx = ssl.create_default_context(cadata=self.ca_data)
        elif self.ca_file is not None:
            ctx = ssl.create_default_context(cafile=str(self.ca_file))
        if self.cert_file is not None and self.key_file is not None:
            ctx.load_cert_chain(str(self.cert_file), str(self.key_file))
        elif (self.cert_file or self.cert_data) and (self.key_file or self.key_data):
            cert = self.cert_data if self.cert_data is not None else _read(self.cert_file)
            key = self.key_data if self.key_data is not None else _read(self.key_file)
            _load_cert_chain_from_memory(ctx, cert, key)
        return ctx

    def current_token(self) -> str | None:
        if self.token_file is not None:
            try:
                return self.token_file.read_text().strip()
            except OSError as exc:
                raise KubeconfigError(f"cannot read token file {self.token_file}: {exc.strerror}") from None
        return self.token


def _read(path: Path | None) -> bytes:
    assert path is not None
    try:
        return path.read_bytes()
    except OSError as exc:
        raise KubeconfigError(f"cannot read {path}: {exc.strerror}") from None


def _load_cert_chain_from_memory(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    # ssl can only load a key from a file: use a private 0700 directory and remove it at once.
    with tempfile.TemporaryDirectory(prefix="kcpshard-tls-") as tmp:
        cert_path, key_path = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
        for path, data in ((cert_path, cert), (key_path, key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
        ctx.load_cert_chain(str(cert_path), str(key_path))


def _b64(value: str, what: str, source: Path) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise KubeconfigError(f"{source}: {what} is not valid base64") from None


def _named(items: Any, name: str, kind: str, source: Path) -> dict[str, Any]:
    for item in items or []:
        if isinstance(item, dict) and item.get("name") == name:
            body = item.get(kind)
            return body if isinstance(body, dict) else {}
    raise KubeconfigError(f"{source}: no {kind} named {name!r}")


def _relative(base: Path, value: str) -> Path:
    # clientcmd resolves relative file references against the kubeconfig's own folder.
    path = Path(value).expanduser()
    return path if path.is_absolute() else base.parent / path


def load_kubeconfig(path: Path, context: str | None = None) -> ConnectionConfig:
    """Read one kubeconfig file and resolve ``context`` (default: ``current-context``)."""
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise KubeconfigError(f"cannot read kubeconfig {path}: {exc.strerror}") from None
    except yaml.YAMLError:
        raise KubeconfigError(f"kubeconfig {path} is not valid YAML") from None
    if not isinstance(doc, dict):
        raise KubeconfigError(f"kubeconfig {path} is empty or not a mapping")
    ctx_name = context or doc.get("current-context")
    if not ctx_name:
        raise KubeconfigError(f"{path}: no context given and no current-context set")
    ctx = _named(doc.get("contexts"), ctx_name, "context", path)
    cluster = _named(doc.get("clusters"), str(ctx.get("cluster", "")), "cluster", path)
    user = _named(doc.get("users"), str(ctx.get("user", "")), "user", path) if ctx.get("user") else {}
    server = cluster.get("server")
    if not server:
        raise KubeconfigError(f"{path}: cluster of context {ctx_name!r} has no server")
    cfg = ConnectionConfig(server=str(server).rstrip("/"), namespace=str(ctx.get("namespace") or "default"))
    cfg.insecure = bool(cluster.get("insecure-skip-tls-verify", False))
    if cluster.get("certificate-authority-data"):
        cfg.ca_data = _b64(cluster["certificate-authority-data"], "certificate-authority-data", path).decode()
    elif cluster.get("certificate-authority"):
        cfg.ca_file = _relative(path, cluster["certificate-authority"])
    if user.get("token"):
        cfg.token = str(user["token"])
    elif user.get("tokenFile"):
        cfg.token_file = _relative(path, user["tokenFile"])
    if user.get("client-certificate-data"):
        cfg.cert_data = _b64(user["client-certificate-data"], "client-certificate-data", path)
    elif user.get("client-certificate"):
        cfg.cert_file = _relative(path, user["client-certificate"])
    if user.get("client-key-data"):
        cfg.key_data = _b64(user["client-key-data"], "client-key-data", path)
    elif user.get("client-key"):
        cfg.key_file = _relative(path, user["client-key"])
    for unsupported in ("exec", "auth-provider"):
        if unsupported in user:
            raise KubeconfigError(f"{path}: user {unsupported!r} credentials are not supported")
    return cfg


def in_cluster_config(sa_dir: Path = SERVICE_ACCOUNT_DIR) -> ConnectionConfig:
    """``rest.InClusterConfig``: the pod's service account and ``KUBERNETES_SERVICE_HOST/PORT``."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise KubeconfigError(
            "no kubeconfig given, $KUBECONFIG is unset and not running in a cluster "
            "(KUBERNETES_SERVICE_HOST/PORT unset)"
        )
    token_path = sa_dir / "token"
    if not token_path.exists():
        raise KubeconfigError(f"in-cluster token {token_path} does not exist")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    ns_path = sa_dir / "namespace"
    return ConnectionConfig(
        server=f"https://{host}:{port}",
        token_file=token_path,
        ca_file=sa_dir / "ca.crt",
        namespace=ns_path.read_text().strip() if ns_path.exists() else "default",
    )


def resolve_config(path: str | Path | None = None, context: str | None = None) -> ConnectionConfig:
    """``path`` if given, else the first existing file of ``$KUBECONFIG``, else in-cluster."""
    if path is not None:
        return load_kubeconfig(Path(path).expanduser(), context)
    env = os.environ.get("KUBECONFIG", "")
    for entry in filter(None, env.split(os.pathsep)):
        candidate = Path(entry).expanduser()
        if candidate.exists():
            return load_kubeconfig(candidate, context)
    if env:
        raise KubeconfigError(f"no file of $KUBECONFIG exists: {env}")
    return in_cluster_config()
