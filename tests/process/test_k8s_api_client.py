"""ApiClient against the real kube-apiserver over HTTPS: the session's control plane, a namespace per test."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kcpshard.k8s.api import (
    EVENTS,
    PODS,
    SERVICEACCOUNTS,
    ApiClient,
    ApiError,
    Conflict,
    Gone,
    Invalid,
    NotFound,
)
from kcpshard_testkit.devenv import DevEnvInfo
from kcpshard_testkit.kinds import CONFIGMAPS
from kcpshard_testkit.tools import tool
from kcpshard_testkit.waiting import wait_for


def cm(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def apiserver_etcd(info: DevEnvInfo) -> str:
    """The etcd endpoint of the control plane's kube-apiserver, from its command line (`--etcd-servers`):
    the API server is the one whose `--cert-dir` is the control plane's folder (that of admin.kubeconfig)."""
    cert_dir = f"--cert-dir={Path(info.kubeconfig).parent}"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            if Path(argv[0]).name == "kube-apiserver" and cert_dir in argv:
                return next(a.split("=", 1)[1] for a in argv if a.startswith("--etcd-servers="))
    raise AssertionError(f"no kube-apiserver runs with {cert_dir}")


def compact(endpoint: str, revision: str) -> None:
    """Drop the etcd history before `revision`, as kube-apiserver's own compactor does every 5 minutes."""
    done = subprocess.run(
        [str(tool("etcdctl")), f"--endpoints={endpoint}", "compact", revision],
        capture_output=True,
        text=True,
        timeout=30,
    )
    # The API server's compactor may have compacted past it already: the history is gone all the same.
    assert done.returncode == 0 or "required revision has been compacted" in done.stderr, done.stderr


async def test_crud_and_errors(api: ApiClient, namespace: str) -> None:
    ns = namespace
    created = await api.create(CONFIGMAPS, ns, cm("a", k="1"))
    assert created["metadata"]["uid"] and created["data"] == {"k": "1"}
    with pytest.raises(Conflict):
        await api.create(CONFIGMAPS, ns, cm("a"))
    got = await api.get(CONFIGMAPS, ns, "a")
    patched = await api.patch(CONFIGMAPS, ns, "a", {"data": {"k": "2"}})
    assert patched["data"]["k"] == "2"
    stale = {**got, "data": {"k": "stale"}}
    with pytest.raises(Conflict) as err:
        await api.replace(CONFIGMAPS, ns, "a", stale)
    assert "the object has been modified" in err.value.message
    fresh = await api.get(CONFIGMAPS, ns, "a")
    replaced = await api.replace(CONFIGMAPS, ns, "a", {**fresh, "data": {"k": "3"}})
    assert replaced["data"]["k"] == "3"
    jp = [
        {"op": "test", "path": "/data/k", "value": "nope"},
        {"op": "replace", "path": "/data/k", "value": "4"},
    ]
    with pytest.raises(Invalid):
        await api.patch(CONFIGMAPS, ns, "a", jp, kind="json")
    jp[0]["value"] = "3"
    assert (await api.patch(CONFIGMAPS, ns, "a", jp, kind="json"))["data"]["k"] == "4"
    listing = await api.list(CONFIGMAPS, ns)
    assert [i["metadata"]["name"] for i in listing["items"]] == ["a"]
    await api.delete(CONFIGMAPS, ns, "a")
    with pytest.raises(NotFound) as missing:
        await api.get(CONFIGMAPS, ns, "a")
    assert missing.value.status == 404 and '"a" not found' in str(missing.value)


async def test_unauthorized_error_has_no_token(kubeconfig: Path, namespace: str, tmp_path: Path) -> None:
    # The admin's server, CA and context, but as a user with a bearer token the server does not know (and
    # no client certificate, which the server would take before the token).
    config = yaml.safe_load(kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": "wrong-token-value"}
    path = tmp_path / "bogus.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    client = ApiClient.from_kubeconfig(path)
    try:
        assert client.credentials.token == "wrong-token-value" and client.credentials.cert_data is None
        with pytest.raises(ApiError) as err:
            await client.get(CONFIGMAPS, namespace, "x")
        assert err.value.status == 401
        assert "wrong-token-value" not in str(err.value)
        assert "wrong-token-value" not in repr(err.value.args) + str(err.value.details)
    finally:
        await client.aclose()


async def test_label_selector(api: ApiClient, namespace: str) -> None:
    body = cm("labelled")
    body["metadata"]["labels"] = {"app": "x"}
    target = await api.create(CONFIGMAPS, namespace, body)
    await api.create(CONFIGMAPS, namespace, cm("other"))
    items = (await api.list(CONFIGMAPS, namespace, label_selector="app=x"))["items"]
    assert [i["metadata"]["name"] for i in items] == ["labelled"]
    assert target["metadata"]["labels"] == {"app": "x"}


async def test_watch_from_resource_version(api: ApiClient, namespace: str) -> None:
    ns = namespace
    first = await api.create(CONFIGMAPS, ns, cm("w1"))
    rv = first["metadata"]["resourceVersion"]
    await api.create(CONFIGMAPS, ns, cm("w2"))
    await api.patch(CONFIGMAPS, ns, "w2", {"data": {"x": "y"}})
    await api.delete(CONFIGMAPS, ns, "w1")
    seen: list[tuple[str, str]] = []
    async for event in api.watch(CONFIGMAPS, ns, resource_version=rv, timeout_seconds=5):
        seen.append((event["type"], event["object"]["metadata"]["name"]))
        if len(seen) == 3:
            break
    assert seen == [("ADDED", "w2"), ("MODIFIED", "w2"), ("DELETED", "w1")]


async def test_watch_too_old_raises_gone(api: ApiClient, namespace: str, control_plane: DevEnvInfo) -> None:
    # Events: kube-apiserver keeps no watch cache for them (its default), so their watches are served from
    # etcd, whose history is compacted here. (A watch of a cached kind is served from the cache's window.)
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "old"},
        "involvedObject": {"kind": "ConfigMap", "name": "x", "namespace": namespace},
        "reason": "Test",
        "message": "first",
    }
    first = await api.create(EVENTS, namespace, event)
    for i in range(3):
        last = await api.patch(EVENTS, namespace, "old", {"message": f"then {i}", "count": i + 2})
    # Before the compaction the watch from the first version sees the three changes.
    seen = []
    since = first["metadata"]["resourceVersion"]
    async for change in api.watch(EVENTS, namespace, resource_version=since, timeout_seconds=10):
        seen.append((change["type"], change["object"]["message"]))
        if len(seen) == 3:
            break
    assert seen == [("MODIFIED", "then 0"), ("MODIFIED", "then 1"), ("MODIFIED", "then 2")]
    compact(apiserver_etcd(control_plane), last["metadata"]["resourceVersion"])
    with pytest.raises(Gone) as err:
        # timeoutSeconds: were the watch served, it would end and fail the test rather than hang.
        async for _ in api.watch(EVENTS, namespace, resource_version=since, timeout_seconds=10):
            pass
    assert err.value.status == 410 and "too old" in err.value.message


async def test_watch_forever_lists_then_follows(api: ApiClient, namespace: str) -> None:
    ns = namespace
    await api.create(CONFIGMAPS, ns, cm("pre"))
    synced = asyncio.Event()
    seen: list[tuple[str, str]] = []

    async def consume() -> None:
        async for event in api.watch_forever(CONFIGMAPS, ns, synced=synced):
            seen.append((event["type"], event["object"]["metadata"]["name"]))

    task = asyncio.create_task(consume())
    try:
        await asyncio.wait_for(synced.wait(), 10)
        await api.create(CONFIGMAPS, ns, cm("post"))
        await api.delete(CONFIGMAPS, ns, "pre")

        async def pre_deleted() -> bool:
            assert not task.done(), seen  # the informer must not end by itself
            return ("DELETED", "pre") in seen

        await wait_for("the DELETED event of pre", pre_deleted, timeout=10, interval=0.05)
        assert seen == [("ADDED", "pre"), ("ADDED", "post"), ("DELETED", "pre")]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_pod_delete_handshake(api: ApiClient, namespace: str) -> None:
    ns = namespace

    # The ServiceAccount admission gives the pod the namespace's `default` account: it must exist first.
    async def default_account() -> dict[str, Any]:
        return await api.get(SERVICEACCOUNTS, ns, "default")

    await wait_for(f"ServiceAccount {ns}/default", default_account, timeout=30)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        # Bound to a node: its deletion is graceful, and no kubelet here ever confirms it.
        "spec": {"nodeName": "nowhere", "containers": [{"name": "c", "image": "x"}]},
    }
    await api.create(PODS, ns, pod)
    marked = await api.delete(PODS, ns, "p", grace_period_seconds=7)
    assert marked is not None and marked["metadata"]["deletionTimestamp"]
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 7
    # Terminating, not gone: the server keeps the pod until its kubelet (or someone) deletes it with grace 0.
    kept = await api.get(PODS, ns, "p")
    assert kept["metadata"]["deletionGracePeriodSeconds"] == 7
    assert kept["metadata"]["deletionTimestamp"] == marked["metadata"]["deletionTimestamp"]
    assert kept["metadata"]["uid"] == marked["metadata"]["uid"]
    # The second half: grace 0 removes it at once. kube-apiserver answers a pod's deletion with the pod's
    # last state (not a Status), here with grace 0.
    last = await api.delete(PODS, ns, "p", grace_period_seconds=0)
    assert last is not None and last["metadata"]["uid"] == kept["metadata"]["uid"]
    assert last["metadata"]["deletionGracePeriodSeconds"] == 0
    with pytest.raises(NotFound):
        await api.get(PODS, ns, "p")
    with pytest.raises(NotFound):
        await api.delete(PODS, ns, "p")
