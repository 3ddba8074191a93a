"""The host agent's check that the shard's store answers before kcp starts, as kcp's etcd client would
reach it: a TCP connection for `http`, a TLS handshake verified with the store's CA for `https`.

A TLS failure says what to set instead of ending, much later, as a ready timeout. The endpoints and the
TLS material are parsed in store_refs.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import tempfile
from pathlib import Path

from kcpshard.agent.store_refs import TLS_FIELD, StoreEndpoint, StoreTLS
from kcpshard.timeouts import within


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
        _, writer = await within(asyncio.open_connection(endpoint.host, endpoint.port, ssl=context), timeout)
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
