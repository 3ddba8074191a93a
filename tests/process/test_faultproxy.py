"""FaultProxy in front of the real API server: transparent relay (verbs, errors, watches, kubectl) and
the one-shot trigger that runs an action after a committed write and drops the client unanswered.

The proxy is built as for an operator under test (`Stack.fault_proxy`): it forwards the operator's own
ServiceAccount token and serves the API server's certificate. Each test's KcpShards live in its namespace."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from kcpshard.k8s.api import KCPSHARDS, ApiClient, NotFound
from kcpshard.k8s.credentials import load_credentials
from kcpshard.k8s.status import mutate_status
from kcpshard_testkit.devenv import DevEnvInfo
from kcpshard_testkit.faultproxy import FaultProxy, request_is, status_step_is
from kcpshard_testkit.waiting import wait_for

KUBECTL = Path(sys.executable).parent / "kubectl"
SHARD = "alpha"
GROUP = "/apis/kcpshard.dev/v1alpha1"

pytestmark = pytest.mark.timeout(60)


def shards_path(namespace: str) -> str:
    return f"{GROUP}/namespaces/{namespace}/kcpshards"


def status_path(namespace: str, name: str = SHARD) -> str:
    return f"{shards_path(namespace)}/{name}/status"


@pytest.fixture
async def proxy(control_plane: DevEnvInfo, tmp_path: Path) -> AsyncIterator[FaultProxy]:
    """In front of the API server for the operator's ServiceAccount, as `Stack.fault_proxy` builds it."""
    serving = Path(control_plane.kubeconfig).parent
    async with FaultProxy(
        Path(control_plane.operator_kubeconfig),
        tmp_path / "proxy",
        cert_path=serving / "apiserver.crt",
        key_path=serving / "apiserver.key",
    ) as p:
        yield p


@pytest.fixture
async def direct(kubeconfig: Path) -> AsyncIterator[httpx.AsyncClient]:
    """Raw httpx to the API server itself, as the admin (client certificate)."""
    admin = load_credentials(kubeconfig)
    async with httpx.AsyncClient(base_url=admin.server, verify=admin.ssl_context(), timeout=10.0) as c:
        yield c


@pytest.fixture
async def via(control_plane: DevEnvInfo, proxy: FaultProxy) -> AsyncIterator[httpx.AsyncClient]:
    """Raw httpx through the proxy with the operator's token, trusting the API server's CA: the proxy
    serves the same certificate."""
    operator = load_credentials(control_plane.operator_kubeconfig)
    assert operator.authorization is not None and operator.cert_data is None  # the token is what is sent
    headers = {"Authorization": operator.authorization}
    async with httpx.AsyncClient(
        base_url=proxy.url, verify=operator.ssl_context(), headers=headers, timeout=10.0
    ) as c:
        yield c


@pytest.fixture
async def operator_api(proxy: FaultProxy) -> AsyncIterator[ApiClient]:
    """The operator's own client, configured only by the proxy's kubeconfig."""
    async with ApiClient.from_kubeconfig(proxy.kubeconfig_path) as api:
        yield api


@pytest.fixture
def victim() -> Iterator[subprocess.Popen[bytes]]:
    """A throwaway child in its own process group, standing in for the operator."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def shard(namespace: str, name: str = SHARD) -> dict[str, Any]:
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "KcpShard",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "kcp": {"version": "v0.32.1"},
            "node": "local",
            "store": {"etcd": {"endpoints": ["http://127.0.0.1:2379"]}},
            "front": {"port": 6443},
        },
    }


def rollout(step: str, started: str = "2025-01-01T00:00:00Z") -> dict[str, Any]:
    return {
        "step": step,
        "toSlot": "b",
        "targetRevision": "r2",
        "startedAt": "2025-01-01T00:00:00Z",
        "stepStartedAt": started,
    }


async def set_step(
    api: ApiClient, namespace: str, step: str, name: str = SHARD, **extra: Any
) -> dict[str, Any]:
    """What the operator does: GET, change the status, resourceVersion-guarded PUT of /status."""

    def change(status: dict[str, Any]) -> dict[str, Any]:
        return {**status, "rollout": rollout(step, **extra)}

    return await mutate_status(api, KCPSHARDS, namespace, name, change)


async def step_of(direct: httpx.AsyncClient, namespace: str, name: str = SHARD) -> str:
    resp = await direct.get(f"{shards_path(namespace)}/{name}")
    return str(resp.json()["status"]["rollout"]["step"])


async def create_shard(direct: httpx.AsyncClient, namespace: str, name: str = SHARD) -> None:
    resp = await direct.post(shards_path(namespace), json=shard(namespace, name))
    assert resp.status_code == 201, resp.text


async def next_event(lines: AsyncIterator[str]) -> dict[str, Any]:
    async for line in lines:
        if line.strip():
            return dict(json.loads(line))
    raise AssertionError("the watch ended without an event")


# --- relay ---


async def test_kubeconfig_copy_points_at_proxy(control_plane: DevEnvInfo, proxy: FaultProxy) -> None:
    text = proxy.kubeconfig_path.read_text()
    assert proxy.kubeconfig_path.stat().st_mode & 0o777 == 0o600
    upstream = load_credentials(control_plane.operator_kubeconfig)
    assert proxy.url in text and upstream.server not in text
    copied = load_credentials(proxy.kubeconfig_path)
    assert copied.server == proxy.url != upstream.server
    assert copied.token == upstream.token and copied.token  # the operator's own credential
    assert copied.ca_data == upstream.ca_data  # the API server's CA verifies the proxy
    original = yaml.safe_load(Path(control_plane.operator_kubeconfig).read_text())
    assert yaml.safe_load(text)["users"] == original["users"]


async def test_get_list_post_and_errors_equal_direct(
    namespace: str, direct: httpx.AsyncClient, via: httpx.AsyncClient
) -> None:
    shards = shards_path(namespace)
    await create_shard(direct, namespace)
    paths = (
        shards,
        f"{shards}/{SHARD}",
        f"{shards}/nope",
        f"/api/v1/namespaces/{namespace}",
        "/api/v1/namespaces/nope",
        "/version",
    )
    for path in paths:
        a, b = await direct.get(path), await via.get(path)
        assert (b.status_code, b.json()) == (a.status_code, a.json()), path
        assert b.headers["content-type"] == a.headers["content-type"]
    assert (await via.get(f"{shards}/{SHARD}")).json()["metadata"]["name"] == SHARD
    assert (await via.get("/api/v1/namespaces/nope")).json()["reason"] == "NotFound"

    created = await via.post(shards, json=shard(namespace, "one"))
    assert created.status_code == 201
    assert created.json() == (await direct.get(f"{shards}/one")).json()

    dup_direct = await direct.post(shards, json=shard(namespace, "one"))
    dup_via = await via.post(shards, json=shard(namespace, "one"))
    assert dup_via.status_code == 409
    assert dup_via.json() == dup_direct.json()

    # The Authorization header is what the proxy forwards: without it the API server refuses.
    bare = await via.get(shards, headers={"Authorization": "Bearer wrong"})
    assert bare.status_code == 401 and bare.json()["reason"] == "Unauthorized"

    merge = {"Content-Type": "application/merge-patch+json"}
    patched = await via.patch(f"{shards}/one", content=b'{"metadata":{"labels":{"a":"b"}}}', headers=merge)
    assert patched.status_code == 200
    assert (await direct.get(f"{shards}/one")).json()["metadata"]["labels"]["a"] == "b"
    deleted = await via.delete(f"{shards}/one")
    assert deleted.status_code == 200
    assert (await direct.get(f"{shards}/one")).status_code == 404


def connections_to(port: int) -> int:
    """This process's established TCP connections to `port` (the proxy runs in it), from /proc: the
    sockets among its open files, matched in the kernel's connection table."""
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote, state, inode = fields[2], fields[3], fields[9]
            count += state == "01" and int(remote.rsplit(":", 1)[1], 16) == port and inode in inodes
    return count


async def test_watches_stream_concurrently_without_buffering(
    namespace: str, direct: httpx.AsyncClient, via: httpx.AsyncClient
) -> None:
    shards = shards_path(namespace)
    api_port = int(str(direct.base_url).rstrip("/").rsplit(":", 1)[1])
    rv = (await direct.get(shards)).json()["metadata"]["resourceVersion"]
    params = {"watch": "true", "resourceVersion": rv}
    async with contextlib.AsyncExitStack() as stack:
        # Several open watches (as kopf keeps) must not hold up each other or plain requests.
        streams = [
            await stack.enter_async_context(via.stream("GET", shards, params=params, timeout=None))
            for _ in range(3)
        ]
        assert all(s.status_code == 200 for s in streams)
        assert (await via.get(f"/api/v1/namespaces/{namespace}")).status_code == 200
        await create_shard(direct, namespace, "late")
        for s in streams:
            # The upstream keeps the watch open: the event must arrive before any end of stream.
            event = await asyncio.wait_for(next_event(s.aiter_lines()), 10)
            assert event["type"] == "ADDED" and event["object"]["metadata"]["name"] == "late"
        # each watch holds a connection of its own to the API server while it is open
        during = connections_to(api_port)
        assert during >= 3

    # The clients left: the proxy closed its upstream watches too (nothing leaks on the API server).
    async def no_upstream_watches() -> bool:
        return connections_to(api_port) <= during - 3

    await wait_for("the proxy's upstream watches closed", no_upstream_watches, timeout=10)


async def test_watch_ends_when_upstream_ends_it(
    namespace: str, direct: httpx.AsyncClient, via: httpx.AsyncClient
) -> None:
    await create_shard(direct, namespace)
    params = {"watch": "true", "timeoutSeconds": "1"}
    async with via.stream("GET", shards_path(namespace), params=params, timeout=None) as s:
        # Ends (rather than hanging) once the API server closes the watch after its timeout.
        lines = await asyncio.wait_for(_all_lines(s), 10)
    events = [json.loads(line) for line in lines if line.strip()]
    # the initial state, relayed whole
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", SHARD)]


async def _all_lines(s: httpx.Response) -> list[str]:
    return [line async for line in s.aiter_lines()]


@pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl is not installed in the venv")
async def test_real_kubectl_through_proxy(
    namespace: str, proxy: FaultProxy, direct: httpx.AsyncClient, tmp_path: Path
) -> None:
    (tmp_path / "home").mkdir()
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    env.pop("KUBECONFIG", None)

    async def kubectl(*args: str) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            str(KUBECTL),
            "--kubeconfig",
            str(proxy.kubeconfig_path),
            *args,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        return proc.returncode or 0, out.decode(), err.decode()

    code, out, err = await kubectl("get", "namespaces")
    assert code == 0, err
    assert namespace in out and "NAME" in out
    manifest = tmp_path / "shard.json"
    manifest.write_text(json.dumps(shard(namespace, "from-kubectl")))
    code, out, err = await kubectl("create", "-f", str(manifest))
    assert code == 0, err
    assert (await direct.get(f"{shards_path(namespace)}/from-kubectl")).status_code == 200


# --- the trigger ---


async def test_status_step_kills_after_commit_and_drops_the_answer(
    namespace: str,
    proxy: FaultProxy,
    direct: httpx.AsyncClient,
    operator_api: ApiClient,
    victim: subprocess.Popen[bytes],
) -> None:
    await create_shard(direct, namespace)
    calls: list[int] = []

    def kill() -> None:
        calls.append(victim.pid)
        os.killpg(victim.pid, signal.SIGKILL)

    proxy.arm(status_step_is(SHARD, "Flipping"), kill)
    assert proxy.armed
    await set_step(operator_api, namespace, "Preparing")  # another step passes untouched
    assert not proxy.fired.is_set() and victim.poll() is None

    with pytest.raises(httpx.TransportError):
        await set_step(operator_api, namespace, "Flipping")

    assert proxy.fired.is_set() and calls == [victim.pid]
    assert proxy.fired_on is not None
    method, path, body = proxy.fired_on
    assert (method, path) == ("PUT", status_path(namespace))
    assert body is not None and body["status"]["rollout"]["step"] == "Flipping"
    assert await step_of(direct, namespace) == "Flipping"  # committed before the client was dropped

    async def victim_gone() -> bool:
        return victim.poll() is not None

    await wait_for("the victim killed", victim_gone, timeout=10)
    assert victim.returncode == -signal.SIGKILL

    # One-shot: the next write entering another step passes, and so does re-entering Flipping.
    assert not proxy.armed
    assert (await set_step(operator_api, namespace, "Stopping"))["status"]["rollout"]["step"] == "Stopping"
    assert (await set_step(operator_api, namespace, "Flipping"))["status"]["rollout"]["step"] == "Flipping"
    assert calls == [victim.pid]


async def test_keeping_a_step_does_not_fire_entering_it_does(
    namespace: str,
    kubeconfig: Path,
    proxy: FaultProxy,
    direct: httpx.AsyncClient,
    via: httpx.AsyncClient,
    operator_api: ApiClient,
) -> None:
    await create_shard(direct, namespace)
    await create_shard(direct, namespace, "beta")
    await set_step(operator_api, namespace, "Flipping")
    assert proxy.last_step(namespace, SHARD) == "Flipping"
    calls: list[str] = []
    proxy.arm(status_step_is(SHARD, "Flipping"), lambda: calls.append("fired"))

    # A later write that keeps the step (new stepStartedAt) is not the write that enters it.
    kept = await set_step(operator_api, namespace, "Flipping", started="2025-01-01T00:00:05Z")
    assert kept["status"]["rollout"]["stepStartedAt"] == "2025-01-01T00:00:05Z"
    # The same step on another shard is no match.
    await set_step(operator_api, namespace, "Stopping", name="beta")
    await set_step(operator_api, namespace, "Flipping", name="beta")
    await set_step(operator_api, namespace, "Draining")
    assert calls == [] and proxy.armed

    # The proxy also learns steps from what it relays in lists (a restarted operator starts by listing).
    await create_shard(direct, namespace, "gamma")
    async with ApiClient.from_kubeconfig(kubeconfig) as around_the_proxy:
        await set_step(around_the_proxy, namespace, "Stopping", name="gamma")
    assert proxy.last_step(namespace, "gamma") is None
    await operator_api.list(KCPSHARDS, namespace)
    assert proxy.last_step(namespace, "gamma") == "Stopping"

    # A matching write the API server refuses (stale resourceVersion) was not committed: stays armed.
    status = status_path(namespace)
    current = (await via.get(status.removesuffix("/status"))).json()
    stale = {**current, "status": {"rollout": rollout("Flipping")}}
    stale["metadata"] = {**current["metadata"], "resourceVersion": "1"}
    refused = await via.put(status, json=stale)
    assert refused.status_code == 409 and refused.json()["reason"] == "Conflict"
    assert calls == [] and proxy.armed and await step_of(direct, namespace) == "Draining"

    # A merge patch entering the step fires.
    merge = {"Content-Type": "application/merge-patch+json"}
    patch = {"status": {"rollout": {"step": "Flipping"}}}
    with pytest.raises(httpx.TransportError):
        await via.patch(status, content=json.dumps(patch).encode(), headers=merge)
    assert calls == ["fired"]
    assert proxy.fired_on == ("PATCH", status, patch)
    assert await step_of(direct, namespace) == "Flipping"


async def test_request_is_and_a_raising_predicate(
    namespace: str, proxy: FaultProxy, direct: httpx.AsyncClient, via: httpx.AsyncClient
) -> None:
    shards = shards_path(namespace)

    def broken(method: str, path: str, body: dict[str, Any] | None) -> bool:
        raise RuntimeError("bug in a test's predicate")

    proxy.arm(broken, lambda: None)
    assert (await via.post(shards, json=shard(namespace, "a"))).status_code == 201
    assert not proxy.fired.is_set()

    calls: list[str] = []
    proxy.arm(request_is("POST", "/kcpshards"), lambda: calls.append("fired"))
    assert (await via.get(shards)).status_code == 200  # a GET never matches
    assert (await via.post(shards, json=shard(namespace, "a"))).status_code == 409  # not committed
    assert calls == []
    with pytest.raises(httpx.TransportError):
        await via.post(shards, json=shard(namespace, "b"))
    assert calls == ["fired"]
    assert proxy.fired_on == ("POST", shards, shard(namespace, "b"))
    assert (await direct.get(f"{shards}/b")).status_code == 200
    # The proxy itself keeps serving after dropping a client.
    assert (await via.get(f"{shards}/b")).status_code == 200


async def test_action_error_is_kept_and_the_client_still_dropped(
    namespace: str, proxy: FaultProxy, direct: httpx.AsyncClient, via: httpx.AsyncClient
) -> None:
    def failing() -> None:
        raise OSError("no such process")

    proxy.arm(request_is("POST", "/kcpshards"), failing)
    with pytest.raises(httpx.TransportError):
        await via.post(shards_path(namespace), json=shard(namespace, "c"))
    assert isinstance(proxy.action_error, OSError)
    assert proxy.fired.is_set()
    assert (await direct.get(f"{shards_path(namespace)}/c")).status_code == 200  # committed all the same


def test_status_step_is_without_a_proxy_reads_only_the_request() -> None:
    path = status_path("default")
    match = status_step_is(SHARD, "Flipping")
    body = {"status": {"rollout": {"step": "Flipping"}}}
    assert match("PUT", path, body)
    assert match("PATCH", path.replace("/default/", "/other/"), body)
    assert not match("POST", path, body)
    assert not match("PUT", path.removesuffix("/status"), body)  # the main resource, not /status
    assert not match("PUT", path.replace(SHARD, "alphabet"), body)
    assert not match("PUT", path, {"status": {"rollout": {"step": "Stopping"}}})
    assert not match("PUT", path, {"status": {"rollout": None}})
    assert not match("PUT", path, None)
    assert request_is("post", "/jobs")("POST", "/apis/batch/v1/namespaces/x/jobs", None)
    assert not request_is("POST", "/jobs")("PUT", "/apis/batch/v1/namespaces/x/jobs", None)


# --- with the real kopf (aiohttp client, several watches) ---


@pytest.fixture
async def kopf_through_proxy(
    namespace: str, api: ApiClient, proxy: FaultProxy, tmp_path: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    log = tmp_path / "kopf.log"
    with log.open("wb") as sink:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "kopf",
            "run",
            "--standalone",
            "--namespace",
            namespace,
            str(Path(__file__).parent / "kopf_kcpshard_probe.py"),
            env={**os.environ, "KUBECONFIG": str(proxy.kubeconfig_path), "HOME": str(tmp_path)},
            stdout=sink,
            stderr=sink,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        # kopf's finalizer would keep the shard, and so the namespace, from being deleted after the test.
        with contextlib.suppress(NotFound):
            await api.patch(KCPSHARDS, namespace, SHARD, {"metadata": {"finalizers": None}})


async def test_kopf_operator_through_proxy_is_killed_after_its_status_write(
    namespace: str,
    proxy: FaultProxy,
    direct: httpx.AsyncClient,
    kopf_through_proxy: asyncio.subprocess.Process,
) -> None:
    kopf = kopf_through_proxy

    def status_write(method: str, path: str, body: dict[str, Any] | None) -> bool:
        status = (body or {}).get("status") or {}
        return method == "PATCH" and f"/kcpshards/{SHARD}" in path and "activeRevision" in status

    proxy.arm(status_write, lambda: os.killpg(kopf.pid, signal.SIGKILL))
    await create_shard(direct, namespace)
    await asyncio.wait_for(proxy.fired.wait(), 30)

    async def killed() -> bool:
        return kopf.returncode is not None

    await wait_for("kopf killed", killed, timeout=10)
    assert kopf.returncode == -signal.SIGKILL
    assert proxy.fired_on is not None and proxy.fired_on[1].startswith(shards_path(namespace))
    obj = (await direct.get(f"{shards_path(namespace)}/{SHARD}")).json()
    assert obj["status"]["activeRevision"] == "create:v0.32.1"  # committed, though kopf never heard back
