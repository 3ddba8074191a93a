"""FaultProxy in front of a real EmulatedApiServer: transparent relay (verbs, errors, watches, kubectl) and
the one-shot trigger that runs an action after a committed write and drops the client unanswered."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kcpshard.k8s.api import KCPSHARDS, ApiClient
from kcpshard.k8s.status import mutate_status
from kcpshard_testkit.apiserver import EmulatedApiServer
from kcpshard_testkit.apiserver.testkit import client, wait_for
from kcpshard_testkit.faultproxy import FaultProxy, request_is, status_step_is

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = Path(sys.executable).parent / "kubectl"
NS = "default"
SHARD = "alpha"
SHARD_STATUS = f"/apis/kcpshard.dev/v1alpha1/namespaces/{NS}/kcpshards/{SHARD}/status"

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def srv(tmp_path: Path) -> AsyncIterator[EmulatedApiServer]:
    server = EmulatedApiServer(tmp_path / "api", crd_paths=[ROOT / "crds"])
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def proxy(srv: EmulatedApiServer, tmp_path: Path) -> AsyncIterator[FaultProxy]:
    async with FaultProxy(srv.kubeconfig_path, tmp_path / "proxy") as p:
        yield p


@pytest.fixture
async def direct(srv: EmulatedApiServer) -> AsyncIterator[httpx.AsyncClient]:
    async with client(srv) as c:
        yield c


@pytest.fixture
async def via(srv: EmulatedApiServer, proxy: FaultProxy) -> AsyncIterator[httpx.AsyncClient]:
    """Raw httpx through the proxy, trusting the API server's CA: the proxy serves the same certificate."""
    ctx = ssl.create_default_context(cafile=str(srv.ca_path))
    headers = {"Authorization": f"Bearer {srv.token}"}
    async with httpx.AsyncClient(base_url=proxy.url, verify=ctx, headers=headers, timeout=10.0) as c:
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


def shard(name: str = SHARD) -> dict[str, Any]:
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "KcpShard",
        "metadata": {"name": name, "namespace": NS},
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


async def set_step(api: ApiClient, step: str, name: str = SHARD, **extra: Any) -> dict[str, Any]:
    """What the operator does: GET, change the status, resourceVersion-guarded PUT of /status."""

    def change(status: dict[str, Any]) -> dict[str, Any]:
        return {**status, "rollout": rollout(step, **extra)}

    return await mutate_status(api, KCPSHARDS, NS, name, change)


async def step_of(direct: httpx.AsyncClient, name: str = SHARD) -> str:
    resp = await direct.get(f"/apis/kcpshard.dev/v1alpha1/namespaces/{NS}/kcpshards/{name}")
    return str(resp.json()["status"]["rollout"]["step"])


async def create_shard(direct: httpx.AsyncClient, name: str = SHARD) -> None:
    resp = await direct.post(f"/apis/kcpshard.dev/v1alpha1/namespaces/{NS}/kcpshards", json=shard(name))
    assert resp.status_code == 201, resp.text


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


async def next_event(lines: AsyncIterator[str]) -> dict[str, Any]:
    async for line in lines:
        if line.strip():
            return dict(json.loads(line))
    raise AssertionError("the watch ended without an event")


# --- relay ---


async def test_kubeconfig_copy_points_at_proxy(srv: EmulatedApiServer, proxy: FaultProxy) -> None:
    text = proxy.kubeconfig_path.read_text()
    assert proxy.kubeconfig_path.stat().st_mode & 0o777 == 0o600
    assert proxy.url in text and srv.url not in text
    assert srv.token in text
    assert proxy.url != srv.url


async def test_get_list_post_and_errors_equal_direct(
    direct: httpx.AsyncClient, via: httpx.AsyncClient
) -> None:
    for path in ("/api/v1/namespaces", "/api/v1/namespaces/default", "/api/v1/namespaces/nope", "/version"):
        a, b = await direct.get(path), await via.get(path)
        assert (b.status_code, b.json()) == (a.status_code, a.json()), path
        assert b.headers["content-type"] == a.headers["content-type"]
    assert (await via.get("/api/v1/namespaces/nope")).json()["reason"] == "NotFound"

    created = await via.post("/api/v1/namespaces", json=namespace("one"))
    assert created.status_code == 201
    assert created.json() == (await direct.get("/api/v1/namespaces/one")).json()

    dup_direct = await direct.post("/api/v1/namespaces", json=namespace("one"))
    dup_via = await via.post("/api/v1/namespaces", json=namespace("one"))
    assert dup_via.status_code == 409
    assert dup_via.json() == dup_direct.json()

    # The Authorization header is what the proxy forwards: without it the API server refuses.
    bare = await via.get("/api/v1/namespaces", headers={"Authorization": "Bearer wrong"})
    assert bare.status_code == 401 and bare.json()["reason"] == "Unauthorized"

    deleted = await via.delete("/api/v1/namespaces/one")
    assert deleted.status_code == 200
    merge = {"Content-Type": "application/merge-patch+json"}
    patched = await via.patch(
        "/api/v1/namespaces/default", content=b'{"metadata":{"labels":{"a":"b"}}}', headers=merge
    )
    assert patched.status_code == 200
    assert (await direct.get("/api/v1/namespaces/default")).json()["metadata"]["labels"]["a"] == "b"


async def test_watches_stream_concurrently_without_buffering(
    srv: EmulatedApiServer, direct: httpx.AsyncClient, via: httpx.AsyncClient
) -> None:
    rv = (await direct.get("/api/v1/namespaces")).json()["metadata"]["resourceVersion"]
    params = {"watch": "true", "resourceVersion": rv}
    async with contextlib.AsyncExitStack() as stack:
        # Several open watches (as kopf keeps) must not hold up each other or plain requests.
        streams = [
            await stack.enter_async_context(
                via.stream("GET", "/api/v1/namespaces", params=params, timeout=None)
            )
            for _ in range(3)
        ]
        assert all(s.status_code == 200 for s in streams)
        assert (await via.get("/api/v1/namespaces/default")).status_code == 200
        assert (await direct.post("/api/v1/namespaces", json=namespace("late"))).status_code == 201
        for s in streams:
            # The upstream keeps the watch open: the event must arrive before any end of stream.
            event = await asyncio.wait_for(next_event(s.aiter_lines()), 10)
            assert event["type"] == "ADDED" and event["object"]["metadata"]["name"] == "late"

    # The clients left: the proxy closed its upstream watches too (nothing leaks on the API server).
    async def no_upstream_watches() -> bool:
        assert srv._app is not None
        return not srv._app.watches

    await wait_for(no_upstream_watches)


async def test_watch_ends_when_upstream_ends_it(via: httpx.AsyncClient) -> None:
    params = {"watch": "true", "timeoutSeconds": "1"}
    async with via.stream("GET", "/api/v1/namespaces", params=params, timeout=None) as s:
        # Ends (rather than hanging) once the API server closes the watch after its timeout.
        lines = await asyncio.wait_for(_all_lines(s), 10)
    events = [json.loads(line) for line in lines if line.strip()]
    assert events and {e["type"] for e in events} == {"ADDED"}  # the initial state, relayed whole


async def _all_lines(s: httpx.Response) -> list[str]:
    return [line async for line in s.aiter_lines()]


@pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl is not installed in the venv")
async def test_real_kubectl_through_proxy(
    proxy: FaultProxy, direct: httpx.AsyncClient, tmp_path: Path
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
    assert "default" in out and "NAME" in out
    code, out, err = await kubectl("create", "namespace", "from-kubectl")
    assert code == 0, err
    assert (await direct.get("/api/v1/namespaces/from-kubectl")).status_code == 200


# --- the trigger ---


async def test_status_step_kills_after_commit_and_drops_the_answer(
    proxy: FaultProxy,
    direct: httpx.AsyncClient,
    operator_api: ApiClient,
    victim: subprocess.Popen[bytes],
) -> None:
    await create_shard(direct)
    calls: list[int] = []

    def kill() -> None:
        calls.append(victim.pid)
        os.killpg(victim.pid, signal.SIGKILL)

    proxy.arm(status_step_is(SHARD, "Flipping"), kill)
    assert proxy.armed
    await set_step(operator_api, "Preparing")  # another step passes untouched
    assert not proxy.fired.is_set() and victim.poll() is None

    with pytest.raises(httpx.TransportError):
        await set_step(operator_api, "Flipping")

    assert proxy.fired.is_set() and calls == [victim.pid]
    assert proxy.fired_on is not None
    method, path, body = proxy.fired_on
    assert (method, path) == ("PUT", SHARD_STATUS)
    assert body is not None and body["status"]["rollout"]["step"] == "Flipping"
    assert await step_of(direct) == "Flipping"  # committed before the client was dropped

    async def victim_gone() -> bool:
        return victim.poll() is not None

    await wait_for(victim_gone)
    assert victim.returncode == -signal.SIGKILL

    # One-shot: the next write entering another step passes, and so does re-entering Flipping.
    assert not proxy.armed
    assert (await set_step(operator_api, "Stopping"))["status"]["rollout"]["step"] == "Stopping"
    assert (await set_step(operator_api, "Flipping"))["status"]["rollout"]["step"] == "Flipping"
    assert calls == [victim.pid]


async def test_keeping_a_step_does_not_fire_entering_it_does(
    srv: EmulatedApiServer,
    proxy: FaultProxy,
    direct: httpx.AsyncClient,
    via: httpx.AsyncClient,
    operator_api: ApiClient,
) -> None:
    await create_shard(direct)
    await create_shard(direct, "beta")
    await set_step(operator_api, "Flipping")
    assert proxy.last_step(NS, SHARD) == "Flipping"
    calls: list[str] = []
    proxy.arm(status_step_is(SHARD, "Flipping"), lambda: calls.append("fired"))

    # A later write that keeps the step (new stepStartedAt) is not the write that enters it.
    kept = await set_step(operator_api, "Flipping", started="2025-01-01T00:00:05Z")
    assert kept["status"]["rollout"]["stepStartedAt"] == "2025-01-01T00:00:05Z"
    # The same step on another shard is no match.
    await set_step(operator_api, "Stopping", name="beta")
    await set_step(operator_api, "Flipping", name="beta")
    await set_step(operator_api, "Draining")
    assert calls == [] and proxy.armed

    # The proxy also learns steps from what it relays in lists (a restarted operator starts by listing).
    await create_shard(direct, "gamma")
    async with ApiClient.from_kubeconfig(srv.kubeconfig_path) as around_the_proxy:
        await set_step(around_the_proxy, "Stopping", name="gamma")
    assert proxy.last_step(NS, "gamma") is None
    await operator_api.list(KCPSHARDS, NS)
    assert proxy.last_step(NS, "gamma") == "Stopping"

    # A matching write the API server refuses (stale resourceVersion) was not committed: stays armed.
    current = (await via.get(SHARD_STATUS.removesuffix("/status"))).json()
    stale = {**current, "status": {"rollout": rollout("Flipping")}}
    stale["metadata"] = {**current["metadata"], "resourceVersion": "1"}
    refused = await via.put(SHARD_STATUS, json=stale)
    assert refused.status_code == 409 and refused.json()["reason"] == "Conflict"
    assert calls == [] and proxy.armed and await step_of(direct) == "Draining"

    # A merge patch entering the step fires.
    merge = {"Content-Type": "application/merge-patch+json"}
    patch = {"status": {"rollout": {"step": "Flipping"}}}
    with pytest.raises(httpx.TransportError):
        await via.patch(SHARD_STATUS, content=json.dumps(patch).encode(), headers=merge)
    assert calls == ["fired"]
    assert proxy.fired_on == ("PATCH", SHARD_STATUS, patch)
    assert await step_of(direct) == "Flipping"


async def test_request_is_and_a_raising_predicate(
    proxy: FaultProxy, direct: httpx.AsyncClient, via: httpx.AsyncClient
) -> None:
    def broken(method: str, path: str, body: dict[str, Any] | None) -> bool:
        raise RuntimeError("bug in a test's predicate")

    proxy.arm(broken, lambda: None)
    assert (await via.post("/api/v1/namespaces", json=namespace("a"))).status_code == 201
    assert not proxy.fired.is_set()

    calls: list[str] = []
    proxy.arm(request_is("POST", "/namespaces"), lambda: calls.append("fired"))
    assert (await via.get("/api/v1/namespaces")).status_code == 200  # a GET never matches
    assert (await via.post("/api/v1/namespaces", json=namespace("a"))).status_code == 409  # not committed
    assert calls == []
    with pytest.raises(httpx.TransportError):
        await via.post("/api/v1/namespaces", json=namespace("b"))
    assert calls == ["fired"]
    assert proxy.fired_on == ("POST", "/api/v1/namespaces", namespace("b"))
    assert (await direct.get("/api/v1/namespaces/b")).status_code == 200
    # The proxy itself keeps serving after dropping a client.
    assert (await via.get("/api/v1/namespaces/b")).status_code == 200


async def test_action_error_is_kept_and_the_client_still_dropped(
    proxy: FaultProxy, via: httpx.AsyncClient
) -> None:
    def failing() -> None:
        raise OSError("no such process")

    proxy.arm(request_is("POST", "/namespaces"), failing)
    with pytest.raises(httpx.TransportError):
        await via.post("/api/v1/namespaces", json=namespace("c"))
    assert isinstance(proxy.action_error, OSError)
    assert proxy.fired.is_set()


def test_status_step_is_without_a_proxy_reads_only_the_request() -> None:
    match = status_step_is(SHARD, "Flipping")
    body = {"status": {"rollout": {"step": "Flipping"}}}
    assert match("PUT", SHARD_STATUS, body)
    assert match("PATCH", SHARD_STATUS.replace("/default/", "/other/"), body)
    assert not match("POST", SHARD_STATUS, body)
    assert not match("PUT", SHARD_STATUS.removesuffix("/status"), body)  # the main resource, not /status
    assert not match("PUT", SHARD_STATUS.replace(SHARD, "alphabet"), body)
    assert not match("PUT", SHARD_STATUS, {"status": {"rollout": {"step": "Stopping"}}})
    assert not match("PUT", SHARD_STATUS, {"status": {"rollout": None}})
    assert not match("PUT", SHARD_STATUS, None)
    assert request_is("post", "/jobs")("POST", "/apis/batch/v1/namespaces/x/jobs", None)
    assert not request_is("POST", "/jobs")("PUT", "/apis/batch/v1/namespaces/x/jobs", None)


# --- with the real kopf (aiohttp client, several watches) ---


@pytest.fixture
async def kopf_through_proxy(proxy: FaultProxy, tmp_path: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    log = tmp_path / "kopf.log"
    with log.open("wb") as sink:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "kopf",
            "run",
            "--standalone",
            "--all-namespaces",
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


async def test_kopf_operator_through_proxy_is_killed_after_its_status_write(
    proxy: FaultProxy, direct: httpx.AsyncClient, kopf_through_proxy: asyncio.subprocess.Process
) -> None:
    kopf = kopf_through_proxy

    def status_write(method: str, path: str, body: dict[str, Any] | None) -> bool:
        status = (body or {}).get("status") or {}
        return method == "PATCH" and f"/kcpshards/{SHARD}" in path and "activeRevision" in status

    proxy.arm(status_write, lambda: os.killpg(kopf.pid, signal.SIGKILL))
    await create_shard(direct)
    await asyncio.wait_for(proxy.fired.wait(), 30)

    async def killed() -> bool:
        return kopf.returncode is not None

    await wait_for(killed)
    assert kopf.returncode == -signal.SIGKILL
    obj = (await direct.get(f"/apis/kcpshard.dev/v1alpha1/namespaces/{NS}/kcpshards/{SHARD}")).json()
    assert obj["status"]["activeRevision"] == "create:v0.32.1"  # committed, though kopf never heard back
