"""The host agent's check that the shard's store answers before kcp starts, as kcp's etcd client would
reach it: a TCP connection for `http`, a TLS handshake verified with the store's CA for `https`.

The schemes come from `kcpshard.api.basics.STORE_SCHEMES`, the same list the CRD's pattern is made of, so
the schema admits exactly the endpoints this check can parse. A TLS failure says what to set instead of
ending, much later, as a ready timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
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


def client_context(tls: StoreTLS | None) -> ssl.SSLContext:
    """Verify the store as kcp does: with the Secret's CA, else the system's roots."""
    context = ssl.create_default_context(cadata=tls.ca.decode() if tls and tls.ca else None)
    if tls is not None and tls.cert is not None and tls.key is not None:
        # load_cert_chain reads files only: a private folder that lives for this call.
        with tempfile.TemporaryDirectory(prefix="kcpshard-store-tls-") as folder:
            cert, key = Path(folder) / "tls.crt", Path(folder) / "tls.key"
            for path, content in ((cert, tls.cert), (key, tls.key)):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(content)
            context.load_cert_chain(cert, key)
    return context


def _tls_problem(exc: ssl.SSLError, tls: StoreTLS | None) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        if tls is None or tls.ca is None:
            return (
                f"TLS: certificate signed by unknown authority: set {TLS_FIELD} to a Secret with the store's "
                "ca.crt"
            )
        return (
            f"TLS: certificate signed by unknown authority ({exc.verify_message}): the ca.crt of Secret "
            f"{tls.secret} ({TLS_FIELD}) did not sign the store's certificate"
        )
    return f"TLS handshake failed: {exc.reason or exc}"


async def connect_problem(
    endpoint: StoreEndpoint,
    timeout: float,
    tls: StoreTLS | None = None,
    context: ssl.SSLContext | None = None,
) -> str | None:
    """None when the endpoint accepts a connection (a verified TLS handshake for https), else why not.

    `context`: `client_context(tls)` made once by a caller that checks again and again.
    """
    if endpoint.tls and context is None:
        context = client_context(tls)
    elif not endpoint.tls:
        context = None
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(endpoint.host, endpoint.port, ssl=context), timeout
        )
    except TimeoutError:
        return f"no answer within {timeout:g}s"
    except socket.gaierror as exc:
        return f"cannot resolve {endpoint.host}: {exc.strerror}"
    except ssl.SSLError as exc:
        return _tls_problem(exc, tls)
    except OSError as exc:
        # asyncio words a refusal as "Connect call failed (addr)": the errno says it plainly.
        return os.strerror(exc.errno).lower() if exc.errno else str(exc) or type(exc).__name__
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError):
        await writer.wait_closed()
    return None
