"""ApiClient against the emulated API server over HTTPS."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kcpshard.k8s.api import (
    PODS,
    ApiClient,
    ApiError,
    Conflict,
    Gone,
    Invalid,
    NotFound,
)
from kcpshard.k8s.credentials import load_credentials
from kcpshard_testkit.apiserver import EmulatedApiServer
from kcpshard_testkit.kinds import CONFIGMAPS

NS = "default"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[EmulatedApiServer]:
    srv = EmulatedApiServer(tmp_path / "api", history_size=20)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


@pytest.fixture
async def api(server: EmulatedApiServer) -> AsyncIterator[ApiClient]:
    client = ApiClient.from_kubeconfig(server.kubeconfig_path)
    try:
        yield client
    finally:
        await client.aclose()


def cm(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


async def test_crud_and_errors(api: ApiClient) -> None:
    created = await api.create(CONFIGMAPS, NS, cm("a", k="1"))
    assert created["metadata"]["uid"] and created["data"] == {"k": "1"}
    with pytest.raises(Conflict):
        await api.create(CONFIGMAPS, NS, cm("a"))
    got = await api.get(CONFIGMAPS, NS, "a")
    patched = await api.patch(CONFIGMAPS, NS, "a", {"data": {"k": "2"}})
    assert patched["data"]["k"] == "2"
    stale = {**got, "data": {"k": "stale"}}
    with pytest.raises(Conflict) as err:
        await api.replace(CONFIGMAPS, NS, "a", stale)
    assert "the object has been modified" in err.value.message
    fresh = await api.get(CONFIGMAPS, NS, "a")
    replaced = await api.replace(CONFIGMAPS, NS, "a", {**fresh, "data": {"k": "3"}})
    assert replaced["data"]["k"] == "3"
    jp = [
        {"op": "test", "path": "/data/k", "value": "nope"},
        {"op": "replace", "path": "/data/k", "value": "4"},
    ]
    with pytest.raises(Invalid):
        await api.patch(CONFIGMAPS, NS, "a", jp, kind="json")
    jp[0]["value"] = "3"
    assert (await api.patch(CONFIGMAPS, NS, "a", jp, kind="json"))["data"]["k"] == "4"
    listing = await api.list(CONFIGMAPS, NS)
    assert [i["metadata"]["name"] for i in listing["items"]] == ["a"]
    await api.delete(CONFIGMAPS, NS, "a")
    with pytest.raises(NotFound) as missing:
        await api.get(CONFIGMAPS, NS, "a")
    assert missing.value.status == 404 and '"a" not found' in str(missing.value)


async def test_unauthorized_error_has_no_token(server: EmulatedApiServer, tmp_path: Path) -> None:
    good = load_credentials(server.kubeconfig_path)
    client = ApiClient(dataclasses.replace(good, token="wrong-token-value", reload=None))
    try:
        with pytest.raises(ApiError) as err:
            await client.get(CONFIGMAPS, NS, "x")
        assert err.value.status == 401
        assert "wrong-token-value" not in str(err.value)
    finally:
        await client.aclose()


async def test_label_selector(api: ApiClient) -> None:
    body = cm("labelled")
    body["metadata"]["labels"] = {"app": "x"}
    target = await api.create(CONFIGMAPS, NS, body)
    await api.create(CONFIGMAPS, NS, cm("other"))
    items = (await api.list(CONFIGMAPS, NS, label_selector="app=x"))["items"]
    assert [i["metadata"]["name"] for i in items] == ["labelled"]
    assert target["metadata"]["labels"] == {"app": "x"}


async def test_watch_from_resource_version(api: ApiClient) -> None:
    first = await api.create(CONFIGMAPS, NS, cm("w1"))
    rv = first["metadata"]["resourceVersion"]
    await api.create(CONFIGMAPS, NS, cm("w2"))
    await api.patch(CONFIGMAPS, NS, "w2", {"data": {"x": "y"}})
    await api.delete(CONFIGMAPS, NS, "w1")
    seen: list[tuple[str, str]] = []
    async for event in api.watch(CONFIGMAPS, NS, resource_version=rv, timeout_seconds=5):
        seen.append((event["type"], event["object"]["metadata"]["name"]))
        if len(seen) == 3:
            break
    assert seen == [("ADDED", "w2"), ("MODIFIED", "w2"), ("DELETED", "w1")]


async def test_watch_too_old_raises_gone(api: ApiClient) -> None:
    first = await api.create(CONFIGMAPS, NS, cm("old"))
    for i in range(30):  # more than the server's history_size=20
        await api.patch(CONFIGMAPS, NS, "old", {"data": {"i": str(i)}})
    with pytest.raises(Gone):
        async for _ in api.watch(CONFIGMAPS, NS, resource_version=first["metadata"]["resourceVersion"]):
            pass


async def test_watch_forever_lists_then_follows(api: ApiClient) -> None:
    await api.create(CONFIGMAPS, NS, cm("pre"))
    synced = asyncio.Event()
    seen: list[tuple[str, str]] = []

    async def consume() -> None:
        async for event in api.watch_forever(CONFIGMAPS, NS, synced=synced):
            seen.append((event["type"], event["object"]["metadata"]["name"]))

    task = asyncio.create_task(consume())
    try:
        await asyncio.wait_for(synced.wait(), 10)
        await api.create(CONFIGMAPS, NS, cm("post"))
        await api.delete(CONFIGMAPS, NS, "pre")
        deadline = time.monotonic() + 10
        while ("DELETED", "pre") not in seen:
            assert time.monotonic() < deadline, seen
            await asyncio.sleep(0.05)
        assert seen == [("ADDED", "pre"), ("ADDED", "post"), ("DELETED", "pre")]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_pod_delete_handshake(api: ApiClient) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"nodeName": "nowhere", "containers": [{"name": "c", "image": "x"}]},
    }
    await api.create(PODS, NS, pod)
    marked = await api.delete(PODS, NS, "p", grace_period_seconds=7)
    assert marked is not None and marked["metadata"]["deletionTimestamp"]
    assert (await api.get(PODS, NS, "p"))["metadata"]["deletionGracePeriodSeconds"] == 7
    await api.delete(PODS, NS, "p", grace_period_seconds=0)
    with pytest.raises(NotFound):
        await api.get(PODS, NS, "p")
    with pytest.raises(NotFound):
        await api.delete(PODS, NS, "p")
