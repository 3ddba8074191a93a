"""The host agent's store check against real sockets: a plain TCP listener for http, and a TLS server
that, as etcd with client-cert auth does, asks for a client certificate signed by its CA. A store whose
certificate the agent cannot verify gets a message that says what to set, not a timeout."""

from __future__ import annotations

import asyncio
import ssl
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from kcpshard.agent import seed
from kcpshard.agent.store_refs import StoreTLS, store_endpoint, store_tls
from kcpshard.agent.storecheck import connect_problem
from kcpshard.kcp.flags import etcd_tls_paths
from kcpshard_testkit.pki import CertificateAuthority
from kcpshard_testkit.tcp import free_port

CA = CertificateAuthority("store-ca")
OTHER_CA = CertificateAuthority("another-ca")
CLIENT = CA.client("kcp")


async def _hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.close()


@asynccontextmanager
async def _server(tls: bool, tmp_path: Path) -> AsyncIterator[int]:
    context = None
    if tls:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(*CA.serving("etcd").write(tmp_path / "s.crt", tmp_path / "s.key"))
        context.load_verify_locations(cadata=CA.cert_pem.decode())
        context.verify_mode = ssl.CERT_REQUIRED
    server = await asyncio.start_server(_hold, "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


async def test_http_needs_a_listener_only(tmp_path: Path) -> None:
    async with _server(False, tmp_path) as port:
        assert await connect_problem(store_endpoint(f"http://127.0.0.1:{port}"), 2) is None
    assert await connect_problem(store_endpoint(f"http://127.0.0.1:{free_port()}"), 2) == "connection refused"


async def test_https_without_the_stores_ca_says_which_field_to_set(tmp_path: Path) -> None:
    async with _server(True, tmp_path) as port:
        problem = await connect_problem(store_endpoint(f"https://127.0.0.1:{port}"), 2)
    assert problem is not None
    assert problem.startswith(
        "TLS: certificate signed by unknown authority: set spec.store.etcd.tlsSecretRef"
    )


async def test_https_with_the_stores_ca_and_a_client_pair_answers(tmp_path: Path) -> None:
    tls = StoreTLS("default/etcd-client", CA.cert_pem, CLIENT.cert, CLIENT.key)
    async with _server(True, tmp_path) as port:
        assert await connect_problem(store_endpoint(f"https://127.0.0.1:{port}"), 2, tls) is None


async def test_https_with_another_ca_names_the_secret(tmp_path: Path) -> None:
    tls = StoreTLS("default/etcd-client", OTHER_CA.cert_pem, CLIENT.cert, CLIENT.key)
    async with _server(True, tmp_path) as port:
        problem = await connect_problem(store_endpoint(f"https://127.0.0.1:{port}"), 2, tls)
    assert problem is not None and "certificate signed by unknown authority" in problem
    assert "the ca.crt of Secret default/etcd-client (spec.store.etcd.tlsSecretRef) did not sign" in problem
    assert "BEGIN" not in problem  # no key or certificate material in a message


def test_the_tls_files_land_where_kcps_flags_point_mode_0600(tmp_path: Path) -> None:
    root = tmp_path / "root"
    seed.wipe_root(root)
    tls = store_tls(
        "default/etcd-client", {"ca.crt": CA.cert_pem, "tls.crt": CLIENT.cert, "tls.key": CLIENT.key}
    )
    for name, content in tls.files().items():
        seed.write_private_file(root, name, content)
    paths = etcd_tls_paths(str(root))
    for flag_path in paths.values():
        path = Path(flag_path)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert Path(paths["key"]).read_bytes() == CLIENT.key


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({}, "has none of ca.crt, tls.crt, tls.key"),
        ({"tls.crt": b"x"}, "has tls.crt but no tls.key"),
        ({"tls.key": b"x"}, "has tls.key but no tls.crt"),
    ],
)
def test_a_secret_without_usable_tls_is_named(data: dict[str, bytes], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        store_tls("default/etcd-client", data)
