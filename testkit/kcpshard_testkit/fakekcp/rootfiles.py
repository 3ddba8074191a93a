"""The files kcp keeps in its root directory: serving cert, service-account key, token store, kubeconfig.

Imitates:
- `cmd/kcp/options/generic.go` (`mkdirRoot`: the root directory is created 0700),
- `k8s.io/apiserver/pkg/server/options/serving.go` `MaybeDefaultWithSelfSignedCerts` and
  `k8s.io/client-go/util/cert.GenerateSelfSignedCertKey` (`apiserver.crt` = serving cert then its CA,
  `apiserver.key`; reused when present),
- `pkg/server/options/controllers.go` (`sa.key`: RSA 4096, PKCS#1 PEM, generated when absent),
- `pkg/server/options/authentication.go` (`.admin-token-store`: the 32-byte SHA-256 of the shard-admin
  token; `admin.kubeconfig` with users kcp-admin (new token every start) and shard-admin (persistent),
  clusters root/base/system:admin, contexts root/base -> kcp-admin, system:admin/shard-base -> shard-admin,
  current context root; the exact error strings when the token store and the kubeconfig disagree).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import ipaddress
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

SHARD_ADMIN = "shard-admin"
KCP_ADMIN = "kcp-admin"
USER = "user"


class RootFilesError(Exception):
    """Startup must stop: the message is kcp's."""


def mkdir_root(path: Path) -> None:
    if path.exists():
        if not path.is_dir():
            raise RootFilesError(f'"{path}" is a file, please delete or select another location')
        return
    path.mkdir(parents=True, mode=0o755)
    # The leaf is private: it holds private keys.
    path.chmod(0o700)


def write_private(path: Path, data: bytes) -> None:
    """Write a file that holds secret material: created 0600, replaced atomically."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def _rsa_pem(bits: int) -> tuple[rsa.RSAPrivateKey, bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    return key, pem


def _host_sans(hosts: list[str]) -> list[x509.GeneralName]:
    sans: list[x509.GeneralName] = []
    seen: set[str] = set()
    for h in hosts:
        if not h or h in seen:
            continue
        seen.add(h)
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    return sans


def ensure_serving_cert(root: Path, hosts: list[str]) -> tuple[Path, Path]:
    """`apiserver.crt` (cert + CA) and `apiserver.key`; generated with SANs `hosts` when either is missing."""
    crt, key_path = root / "apiserver.crt", root / "apiserver.key"
    if crt.is_file() and key_path.is_file():
        return crt, key_path
    host = hosts[0] if hosts else "localhost"
    now = dt.datetime.now(dt.UTC)
    stamp = int(now.timestamp())
    ca_key, _ = _rsa_pem(2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}-ca@{stamp}")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, True, False, False, True, False, False, False), critical=True
        )
        .sign(ca_key, hashes.SHA256())
    )
    key, key_pem = _rsa_pem(2048)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}@{stamp}")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True
        )
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(_host_sans(hosts)), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM) + ca_cert.public_bytes(serialization.Encoding.PEM)
    crt.write_bytes(pem)
    crt.chmod(0o644)
    write_private(key_path, key_pem)
    return crt, key_path


def ensure_sa_key(root: Path, bits: int) -> Path:
    path = root / "sa.key"
    if not path.exists():
        _, pem = _rsa_pem(bits)
        write_private(path, pem)
    return path


@dataclass
class Tokens:
    """Tokens of this start. Never log them."""

    shard_admin_hash: bytes
    kcp_admin: str
    user: str
    shard_admin: str = ""  # empty when it must be read back from the existing kubeconfig

    def authenticate(self, token: str) -> str | None:
        """The user name a bearer token authenticates as, or None."""
        if hmac.compare_digest(hashlib.sha256(token.encode()).digest(), self.shard_admin_hash):
            return SHARD_ADMIN
        if hmac.compare_digest(token.encode(), self.kcp_admin.encode()):
            return KCP_ADMIN
        if self.user and hmac.compare_digest(token.encode(), self.user.encode()):
            return USER
        return None


def apply_admin_authentication(token_store: Path) -> Tokens:
    """`AdminAuthentication.ApplyTo`: reuse the stored hash, or create a shard-admin token and its hash."""
    if token_store.exists():
        shard_hash = token_store.read_bytes()
        shard_token = ""
    else:
        shard_token = str(uuid.uuid4())
        shard_hash = hashlib.sha256(shard_token.encode()).digest()
        write_private(token_store, shard_hash)
    return Tokens(
        shard_admin_hash=shard_hash,
        kcp_admin=str(uuid.uuid4()),
        user=str(uuid.uuid4()),
        shard_admin=shard_token,
    )


def write_kubeconfig(
    kubeconfig: Path, token_store: Path, tokens: Tokens, server: str, ca_pem: bytes, with_user: bool
) -> None:
    """`AdminAuthentication.WriteKubeConfig`; refuses (kcp's wording) without a known shard-admin token."""
    if not tokens.shard_admin:
        try:
            existing = yaml.safe_load(kubeconfig.read_text()) if kubeconfig.exists() else None
        except (OSError, yaml.YAMLError) as e:
            raise RootFilesError(f"error loading {kubeconfig}: {type(e).__name__}") from None
        for entry in (existing or {}).get("users") or []:
            if entry.get("name") == SHARD_ADMIN:
                token = str((entry.get("user") or {}).get("token", ""))
                if not hmac.compare_digest(hashlib.sha256(token.encode()).digest(), tokens.shard_admin_hash):
                    raise RootFilesError(
                        f'admin token in file "{kubeconfig}" is not valid anymore. '
                        f'Remove file "{token_store}" and restart KCP'
                    )
                tokens.shard_admin = token
    if not tokens.shard_admin:
        raise RootFilesError(
            f"cannot create the 'admin.kubeconfig' file with an empty token for the {SHARD_ADMIN} user"
        )
    write_private(kubeconfig, render_kubeconfig(tokens, server, ca_pem, with_user).encode())


def render_kubeconfig(tokens: Tokens, server: str, ca_pem: bytes, with_user: bool) -> str:
    import base64

    ca = base64.b64encode(ca_pem).decode()

    def cluster(name: str, url: str) -> dict[str, object]:
        return {"name": name, "cluster": {"server": url, "certificate-authority-data": ca}}

    users = [
        {"name": KCP_ADMIN, "user": {"token": tokens.kcp_admin}},
        {"name": SHARD_ADMIN, "user": {"token": tokens.shard_admin}},
    ]
    contexts = [
        {"name": "base", "context": {"cluster": "base", "user": KCP_ADMIN}},
        {"name": "root", "context": {"cluster": "root", "user": KCP_ADMIN}},
        {"name": "shard-base", "context": {"cluster": "base", "user": SHARD_ADMIN}},
        {"name": "system:admin", "context": {"cluster": "system:admin", "user": SHARD_ADMIN}},
    ]
    if with_user:
        users.append({"name": USER, "user": {"token": tokens.user}})
        contexts.append({"name": USER, "context": {"cluster": "root", "user": USER}})
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            cluster("base", server),
            cluster("root", f"{server}/clusters/root"),
            cluster("system:admin", f"{server}/clusters/system:admin"),
        ],
        "contexts": contexts,
        "current-context": "root",
        "preferences": {},
        "users": users,
    }
    return yaml.safe_dump(doc, sort_keys=False)
