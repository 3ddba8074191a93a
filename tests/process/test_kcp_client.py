"""KcpClient against real stand-in kcp processes on a real etcd.

Slot arguments come from the flag table (`kcp_start_args`), credentials from the slot's admin.kubeconfig,
so this also checks that the table and the kubeconfig reader fit the stand-in.
"""

import asyncio
import os
import re
import shutil
import signal
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from kcpshard.api.models import KcpShardSpec
from kcpshard.kcp import readyz
from kcpshard.kcp.client import KcpClient
from kcpshard.kcp.errors import KcpError
from kcpshard.kcp.flags import SlotPaths, kcp_start_args
from kcpshard.kcp.kubeconfig import ShardAdmin, shard_admin
from kcpshard_testkit.etcd import EtcdServer
from kcpshard_testkit.fakekcp import binary_path
from kcpshard_testkit.fakekcp.rootfiles import ensure_serving_cert

pytestmark = pytest.mark.timeout(90)

SERVING = re.compile(r"Serving securely on 127\.0\.0\.1:(\d+)")
ROOT_MATERIAL = ("apiserver.crt", "apiserver.key", "sa.key", ".admin-token-store", "admin.kubeconfig")
FAST = {
    "KCP_FAKE_RSA_BITS": "2048",
    "KCP_FAKE_STARTUP_SECONDS": "0.5",
    "KCP_FAKE_RETRY_PERIOD_SECONDS": "0.3",
    "KCP_FAKE_RENEW_DEADLINE_SECONDS": "1",
    "KCP_FAKE_LEASE_DURATION_SECONDS": "30",  # long: a handover must come from deleting the lease
    "KCP_FAKE_CONTROLLER_PERIOD_SECONDS": "0.1",
}


def wait_until(what: str, check: Callable[[], Any], timeout: float = 20.0, poll: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(poll)


@dataclass
class Slot:
    root: Path
    proc: subprocess.Popen[bytes]
    log: Path
    port: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def admin(self) -> ShardAdmin:
        return shard_admin((self.root / "admin.kubeconfig").read_bytes())

    def client(self, token: str | None = None) -> KcpClient:
        creds = self.admin()
        return KcpClient(f"https://127.0.0.1:{self.port}", creds.ca_pem, token or creds.token)

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)


@pytest.fixture
def start_slot(tmp_path: Path, etcd: EtcdServer) -> Iterator[Callable[..., Slot]]:
    slots: list[Slot] = []
    spec = KcpShardSpec.model_validate(
        {
            "kcp": {"version": "v0.32.1"},
            "node": "local",
            "store": {"etcd": {"endpoints": [etcd.endpoint]}},
            "front": {"address": "127.0.0.1", "port": 6443},
            "shutdownDelaySeconds": 0,
        }
    )

    def start(name: str, seed_from: Slot | None = None, **env: str) -> Slot:
        root = tmp_path / name
        if seed_from is not None:  # a later slot gets the shard's root material before kcp starts
            root.mkdir(mode=0o700)
            for f in ROOT_MATERIAL:
                shutil.copy2(seed_from.root / f, root / f)
        log = tmp_path / f"{name}.log"
        args = [binary_path(), "start", *kcp_start_args(spec, SlotPaths(root_dir=str(root)))]
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                args,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **FAST, **env},
            )
        slot = Slot(root, proc, log)
        slots.append(slot)

        def bound() -> int | None:
            if proc.poll() is not None:
                raise AssertionError(f"slot {name} exited {proc.returncode}:\n{log.read_text()[-2000:]}")
            m = SERVING.search(log.read_text(errors="replace"))
            return int(m.group(1)) if m else None

        slot.port = wait_until(f"slot {name} to serve", bound)
        return slot

    yield start
    for slot in slots:
        slot.stop(signal.SIGKILL)


async def wait_ready(client: KcpClient, seconds: float = 20.0) -> None:
    """Until kcp answers an authenticated request through `client` (it serves once it is ready)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            await client.list_workspaces()
            return
        except KcpError as exc:
            assert time.monotonic() < deadline, f"not serving: {exc}"
        await asyncio.sleep(0.05)


async def test_slot_readyz_false_then_true(start_slot: Callable[..., Slot]) -> None:
    slot = start_slot("a", KCP_FAKE_STARTUP_SECONDS="3")
    async with readyz.client_for(slot.admin().ca_pem) as client:
        result = await readyz.probe(client, slot.port)
        assert not result.ok and result.detail.startswith("[-]")
        deadline = time.monotonic() + 20
        while not result.ok:
            assert time.monotonic() < deadline, result.detail
            await asyncio.sleep(0.05)
            result = await readyz.probe(client, slot.port)
    assert result.detail == "ok"


async def test_slot_readyz_trusts_only_the_shard_ca(start_slot: Callable[..., Slot]) -> None:
    slot = start_slot("a")
    other = start_slot("other")  # a fresh root: another self-signed CA
    async with readyz.client_for(other.admin().ca_pem) as client:
        result = await readyz.probe(client, slot.port)
    assert not result.ok and "CERTIFICATE_VERIFY_FAILED" in result.detail
    # Through KcpClient the hostname is checked too: the slot cert names 127.0.0.1 (the loopback the front
    # reaches), and the slot's own CA verifies it.
    async with slot.client() as c:
        await wait_ready(c)


@pytest.fixture
async def front_named_readyz(tmp_path: Path) -> AsyncIterator[tuple[int, bytes]]:
    """A TLS `/readyz` on 127.0.0.1 whose cert names only `front.example`, as a real kcp's names the front.

    Yields the port and the CA.
    """
    crt, key = ensure_serving_cert(tmp_path, ["front.example"])
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(crt, key)

    async def ok(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/readyz", ok)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    try:
        port = runner.addresses[0][1]
        yield port, readyz_ca(crt.read_bytes())
    finally:
        await runner.cleanup()


def readyz_ca(bundle: bytes) -> bytes:
    return bundle[bundle.rindex(b"-----BEGIN CERTIFICATE-----") :]


async def test_slot_readyz_does_not_check_the_hostname(front_named_readyz: tuple[int, bytes]) -> None:
    port, ca = front_named_readyz
    async with readyz.client_for(ca) as client:
        assert await readyz.probe(client, port) == readyz.Readyz(True, "ok")
    # The same server through a hostname-checking client fails: the cert does not name 127.0.0.1.
    async with KcpClient(f"https://127.0.0.1:{port}", ca, "unused") as c:
        with pytest.raises(KcpError, match="CERTIFICATE_VERIFY_FAILED"):
            await c.get_lease()


async def test_lease_handover_between_two_processes(start_slot: Callable[..., Slot]) -> None:
    old = start_slot("a")
    async with old.client() as c:
        await wait_ready(c)
        old_holder = await c.wait_for_holder(None, timeout=20)
    new = start_slot("b", seed_from=old)
    async with new.client() as c:
        await wait_ready(c)
        # Both run: the lease (30 s) stays with the old slot.
        lease = await c.get_lease()
        assert lease is not None and lease["spec"]["holderIdentity"] == old_holder
        old.stop()  # kcp does not release the lease on exit
        assert await c.delete_lease() is True
        new_holder = await c.wait_for_holder(old_holder, timeout=20)
        assert new_holder != old_holder
        lease = await c.get_lease()
        assert lease is not None and lease["spec"]["holderIdentity"] == new_holder


async def test_probe_on_the_leader(start_slot: Callable[..., Slot]) -> None:
    slot = start_slot("a")
    async with slot.client() as c:
        await wait_ready(c)
        await c.wait_for_holder(None, timeout=20)
        result = await c.probe("kcpshard-probe", timeout=30)
        assert result.phases[-1] == "Ready"
        assert result.deleted
        # the delete was accepted: the workspace is gone or going (kcp's finalizers)
        ws = await c.get_workspace(result.name)
        assert ws is None or ws["metadata"].get("deletionTimestamp"), ws


async def test_wrong_token_gives_401_without_the_token(start_slot: Callable[..., Slot]) -> None:
    slot = start_slot("a")
    wrong = "wrong-token-0f1e2d3c4b5a69788796a5b4"
    async with slot.client(token=wrong) as c:
        with pytest.raises(KcpError) as info:
            await c.get_lease()
    assert info.value.status == 401
    assert wrong not in str(info.value) and wrong not in repr(info.value)
    assert slot.admin().token not in str(info.value)
