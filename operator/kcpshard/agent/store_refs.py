"""The shard's store as the agents name it: an etcd client URL, and the client TLS from its Secret.
Parsed, never dialled here (storecheck.py checks that the store answers).

The schemes come from `kcpshard.api.basics.STORE_SCHEMES`, the same list the CRD's pattern is made of, so
the schema admits exactly the endpoints the agents can parse.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from kcpshard.api.basics import STORE_SCHEMES
from kcpshard.kcp.flags import ETCD_TLS_DIR, ETCD_TLS_FILES

ETCD_CLIENT_PORT = 2379
TLS_FIELD = "spec.store.etcd.tlsSecretRef"


class EndpointError(ValueError):
    """An endpoint that does not parse; the message never holds userinfo."""


@dataclass(frozen=True)
class StoreEndpoint:
    url: str  # as shown in messages: no userinfo, query or fragment
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.url.startswith("https://")


@dataclass(frozen=True)
class StoreTLS:
    """The store's client TLS from its Secret: the CA to verify it with and an optional client pair."""

    secret: str  # namespace/name, for messages
    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None

    def files(self) -> dict[str, bytes]:
        """Root-relative paths (where kcp's --etcd-cafile/certfile/keyfile point) -> content."""
        contents = {"ca": self.ca, "cert": self.cert, "key": self.key}
        return {f"{ETCD_TLS_DIR}/{ETCD_TLS_FILES[k]}": v for k, v in contents.items() if v is not None}


def store_endpoint(url: str) -> StoreEndpoint:
    """An etcd client URL (`http://127.0.0.1:2379`, `https://host`): where to try a connection."""
    shown = url.strip().rpartition("@")[2]  # never show userinfo, even of a URL that does not parse
    parts = urlsplit(url.strip())
    try:
        port = parts.port
    except ValueError:
        raise EndpointError(f"{shown}: the port is not a number from 0 to 65535") from None
    if parts.scheme not in STORE_SCHEMES or not parts.hostname:
        schemes = " or ".join(STORE_SCHEMES)
        raise EndpointError(f"{shown} is not a URL like http://127.0.0.1:2379 (schemes: {schemes})")
    host_port = parts.netloc.rpartition("@")[2]
    return StoreEndpoint(
        f"{parts.scheme}://{host_port}{parts.path}", parts.hostname, port or ETCD_CLIENT_PORT
    )


def store_tls(secret: str, data: Mapping[str, bytes]) -> StoreTLS:
    """The TLS of a Secret's decoded data (`ca.crt`, `tls.crt`, `tls.key`); ValueError saying what lacks."""
    ca, cert, key = (data.get(ETCD_TLS_FILES[k]) or None for k in ("ca", "cert", "key"))
    if ca is None and cert is None and key is None:
        raise ValueError(f"Secret {secret} has none of ca.crt, tls.crt, tls.key")
    if (cert is None) != (key is None):
        have, lacks = ("tls.crt", "tls.key") if cert is not None else ("tls.key", "tls.crt")
        raise ValueError(f"Secret {secret} has {have} but no {lacks}")
    return StoreTLS(secret, ca, cert, key)
