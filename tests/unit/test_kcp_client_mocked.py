"""KcpClient against a mocked transport: status handling, error messages without the token, polling."""

import datetime
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kcpshard.kcp.client import LEASE_PATH, OWNER_ANNOTATION, WORKSPACES_PATH, KcpClient
from kcpshard.kcp.errors import KcpError, KcpTimeout

TOKEN = "very-secret-shard-admin-token"


def _ca_pem() -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


CA = _ca_pem()
Handler = Callable[[httpx.Request], httpx.Response]


def client(handler: Handler) -> KcpClient:
    return KcpClient("https://127.0.0.1:6443", CA, TOKEN, transport=httpx.MockTransport(handler))


def status(code: int, reason: str, message: str) -> httpx.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": reason,
        "message": message,
        "code": code,
    }
    return httpx.Response(code, json=body)


async def test_lease_get_and_delete() -> None:
    lease = {"kind": "Lease", "spec": {"holderIdentity": "host_1"}}
    calls: list[tuple[str, str]] = []

    def handler(req: httpx.Request) -> httpx.Response:
        calls.append((req.method, req.url.path))
        assert req.headers["authorization"] == f"Bearer {TOKEN}"
        if req.method == "GET":
            return httpx.Response(200, json=lease)
        return status(404, "NotFound", 'leases.coordination.k8s.io "kcp-controllers" not found')

    async with client(handler) as c:
        assert await c.get_lease() == lease
        assert await c.delete_lease() is False
    assert calls == [("GET", LEASE_PATH), ("DELETE", LEASE_PATH)]


async def test_401_error_names_the_request_not_the_token() -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        return status(401, "Unauthorized", "Unauthorized")

    async with client(handler) as c:
        with pytest.raises(KcpError) as info:
            await c.get_lease()
    assert info.value.status == 401
    assert "HTTP 401" in str(info.value) and "kcp-controllers" in str(info.value)
    assert TOKEN not in str(info.value) and TOKEN not in repr(c)


async def test_a_server_echoing_the_token_is_redacted() -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        return status(400, "BadRequest", f"bad header {req.headers['authorization']}")

    async with client(handler) as c:
        with pytest.raises(KcpError) as info:
            await c.get_workspace("x")
    assert TOKEN not in str(info.value) and "<redacted>" in str(info.value)


async def test_wait_for_holder_skips_old_holder_and_retries_errors() -> None:
    answers = iter(
        [
            httpx.Response(200, json={"spec": {"holderIdentity": "old_1"}}),
            status(503, "ServiceUnavailable", "etcd down"),
            status(404, "NotFound", "gone"),
            httpx.Response(200, json={"spec": {}}),
            httpx.Response(200, json={"spec": {"holderIdentity": "new_2"}}),
        ]
    )

    async with client(lambda req: next(answers)) as c:
        assert await c.wait_for_holder("old_1", timeout=5, poll=0.001) == "new_2"


async def test_wait_for_holder_timeout_says_what_it_saw() -> None:
    async with client(lambda req: httpx.Response(200, json={"spec": {"holderIdentity": "old_1"}})) as c:
        with pytest.raises(KcpTimeout) as info:
            await c.wait_for_holder("old_1", timeout=0.05, poll=0.01)
    assert "new controller leader" in str(info.value) and "holder old_1" in str(info.value)
    assert info.value.last_state == "holder old_1"


async def test_wait_stops_at_once_on_401() -> None:
    calls = 0

    def handler(req: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return status(401, "Unauthorized", "Unauthorized")

    async with client(handler) as c:
        with pytest.raises(KcpError) as info:
            await c.wait_for_holder(None, timeout=5, poll=0.001)
    assert not isinstance(info.value, KcpTimeout) and calls == 1


class FakeWorkspaces:
    """Workspaces that move one phase per GET; deletion takes one more GET to finish (finalizers)."""

    PHASES = ["Scheduling", "Initializing", "Ready"]

    def __init__(self, never_ready: bool = False) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        self.deleting: set[str] = set()
        self.never_ready = never_ready
        self.owners: dict[str, Any] = {}

    def __call__(self, req: httpx.Request) -> httpx.Response:
        path = req.url.path
        if req.method == "POST" and path == WORKSPACES_PATH:
            meta = json.loads(req.content)["metadata"]
            name = meta["name"]
            self.owners[name] = json.loads(meta.get("annotations", {}).get(OWNER_ANNOTATION, "null"))
            if name in self.items:
                return status(409, "AlreadyExists", f"workspaces {name} already exists")
            self.items[name] = {"metadata": {"name": name}, "status": {}}
            return httpx.Response(201, json=self.items[name])
        name = path.rsplit("/", 1)[1]
        if name not in self.items:
            return status(404, "NotFound", f"workspaces {name} not found")
        if req.method == "DELETE":
            self.deleting.add(name)
            return httpx.Response(200, json=self.items[name])
        if name in self.deleting:
            del self.items[name]
            return httpx.Response(200, json={"metadata": {"name": name}})
        ws = self.items[name]
        phase = ws["status"].get("phase")
        idx = -1 if phase is None else self.PHASES.index(phase)
        if not (self.never_ready and idx == 1):
            ws["status"]["phase"] = self.PHASES[min(idx + 1, 2)]
        return httpx.Response(200, json=ws)


async def test_probe_creates_waits_deletes_and_reports() -> None:
    ws = FakeWorkspaces()
    async with client(ws) as c:
        result = await c.probe("kcpshard-probe", timeout=5, poll=0.001)
    assert result.name.startswith("kcpshard-probe-") and len(result.name) == len("kcpshard-probe-") + 6
    assert result.phases == ("Scheduling", "Initializing", "Ready")
    # deleted, and not waited for: the finalizers' part is kcp's (seconds on real kcp)
    assert result.deleted and ws.deleting == {result.name} and result.name in ws.items
    assert result.created_at <= result.ready_at <= result.deleted_at
    assert result.total_seconds >= result.ready_seconds >= 0


async def test_a_failed_delete_after_ready_does_not_fail_the_probe() -> None:
    # Ready proved kcp's controllers work; the workspace is left to the next probe's clean-up.
    ws = FakeWorkspaces()

    def handler(req: httpx.Request) -> httpx.Response:
        if req.method == "DELETE":
            return status(503, "ServiceUnavailable", "the server is shutting down")
        return ws(req)

    async with client(handler) as c:
        result = await c.probe("kcpshard-probe", timeout=5, poll=0.001)
    assert result.phases[-1] == "Ready" and not result.deleted
    assert list(ws.items) == [result.name] and not ws.deleting


async def test_probe_timeout_still_deletes_the_workspace() -> None:
    ws = FakeWorkspaces(never_ready=True)
    async with client(ws) as c:
        with pytest.raises(KcpTimeout) as info:
            await c.probe("p", timeout=0.05, poll=0.005)
    assert "phase Initializing" in str(info.value)
    assert ws.deleting  # delete was sent


async def test_create_workspace_is_idempotent() -> None:
    ws = FakeWorkspaces()
    async with client(ws) as c:
        first = await c.create_workspace("w1")
        again = await c.create_workspace("w1")
    assert first["metadata"]["name"] == again["metadata"]["name"] == "w1"


async def test_the_probe_workspace_names_its_owner() -> None:
    # kcp records no owner for system:masters (the shard-admin), and a workspace without one never
    # leaves Initializing on real kcp: the probe names the owner itself.
    ws = FakeWorkspaces()
    async with client(ws) as c:
        await c.create_workspace("w1")
    assert ws.owners["w1"] == {"username": "shard-admin", "groups": ["system:masters"]}


async def test_delete_configmap_path_keeps_cluster_colon() -> None:
    paths: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        paths.append(req.url.raw_path.decode())
        return httpx.Response(200, json={"kind": "Status", "status": "Success"})

    async with client(handler) as c:
        assert await c.delete_configmap("system:shard", "default", "identitycache") is True
    assert paths == ["/clusters/system:shard/api/v1/namespaces/default/configmaps/identitycache"]


def test_bad_ca_is_a_clear_error() -> None:
    with pytest.raises(KcpError, match="CA bundle"):
        KcpClient("https://127.0.0.1:1", b"not a pem", TOKEN)
