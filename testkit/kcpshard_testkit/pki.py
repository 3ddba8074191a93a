"""A small certificate authority for the local servers: serving and client certificates, PEM files.

What kubeadm and envtest generate for a cluster, reduced to what the test stack needs: one CA, a serving
certificate for 127.0.0.1/localhost, client certificates whose subject is the Kubernetes user (CN) and
its groups (O), and an RSA key pair for signing service account tokens. Private keys are written with
mode 0600 from the first byte (`write_private`).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)
LOOPBACK_NAMES = ("localhost",)
LOOPBACK_IPS = ("127.0.0.1",)


def write_private(path: Path, data: bytes) -> None:
    """Write a secret file that is never readable by others, not even for an instant."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in orgs]
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key, as PEM."""

    cert: bytes
    key: bytes

    def write(self, cert_path: Path, key_path: Path) -> tuple[Path, Path]:
        cert_path.write_bytes(self.cert)
        write_private(key_path, self.key)
        return cert_path, key_path


class CertificateAuthority:
    """A self-signed CA (EC P-256) that issues leaf certificates."""

    def __init__(self, cn: str = "kcpshard-dev-ca") -> None:
        now = datetime.datetime.now(datetime.UTC)
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(_name(cn))
            .issuer_name(_name(cn))
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )

    @property
    def cert_pem(self) -> bytes:
        return cert_pem(self._cert)

    def _issue(
        self,
        subject: x509.Name,
        usages: list[x509.ObjectIdentifier],
        sans: x509.SubjectAlternativeName | None,
    ) -> Issued:
        now = datetime.datetime.now(datetime.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        if sans is not None:
            builder = builder.add_extension(sans, critical=False)
        return Issued(cert_pem(builder.sign(self._key, hashes.SHA256())), key_pem(key))

    def serving(
        self, cn: str = "kube-apiserver", *, ips: tuple[str, ...] = (), names: tuple[str, ...] = ()
    ) -> Issued:
        """A serving certificate for localhost and 127.0.0.1, and `ips` and `names` (e.g. a service IP)."""
        sans = x509.SubjectAlternativeName(
            [
                *(x509.DNSName(n) for n in (*LOOPBACK_NAMES, *names)),
                *(x509.IPAddress(ipaddress.ip_address(ip)) for ip in (*LOOPBACK_IPS, *ips)),
            ]
        )
        return self._issue(_name(cn), [ExtendedKeyUsageOID.SERVER_AUTH], sans)

    def client(self, user: str, *groups: str) -> Issued:
        """A client certificate: the API server reads the user from CN and the groups from O."""
        return self._issue(_name(user, groups), [ExtendedKeyUsageOID.CLIENT_AUTH], None)


def service_account_key() -> bytes:
    """An RSA private key (PEM) for signing service account tokens (kube-apiserver wants RSA or EC)."""
    return key_pem(rsa.generate_private_key(public_exponent=65537, key_size=2048))
