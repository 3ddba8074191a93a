"""The emulated API server over real HTTPS: verbs, metadata rules, finalizers, GC, pods, watch, discovery."""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kcpshard_testkit.apiserver import EmulatedApiServer
from kcpshard_testkit.apiserver.testkit import client, wait_for, watch_events

WIDGETS = Path(__file__).parent / "fixtures" / "widgets.yaml"
W = "/apis/test.kcpshard.dev/v1/namespaces/default/widgets"
PODS = "/api/v1/namespaces/default/pods"
MERGE = {"Content-Type": "application/merge-patch+json"}
JSONPATCH = {"Content-Type": "application/json-patch+json"}


@pytest.fixture
async def srv(tmp_path: Path) -> AsyncIterator[EmulatedApiServer]:
    server = EmulatedApiServer(tmp_path / "api", crd_paths=[WIDGETS], history_size=20, bookmark_interval=0.2)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def api(srv: EmulatedApiServer) -> AsyncIterator[httpx.AsyncClient]:
    async with client(srv) as c:
        yield c


def widget(name: str, size: int = 1, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "test.kcpshard.dev/v1",
        "kind": "Widget",
        "metadata": {"name": name, **meta},
        "spec": {"size": size},
    }


async def create(api: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = await api.post(path, json=body)
    assert resp.status_code == 201, resp.text
    return dict(resp.json())


async def gone(api: httpx.AsyncClient, path: str) -> bool:
    return (await api.get(path)).status_code == 404


def pod(name: str, node: str | None = "node-1", **meta: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox:1"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **meta}, "spec": spec}


async def test_files_and_401_without_token(srv: EmulatedApiServer) -> None:
    assert srv.kubeconfig_path.stat().st_mode & 0o777 == 0o600
    assert (srv.workdir / "apiserver.key").stat().st_mode & 0o777 == 0o600
    assert srv.token in srv.kubeconfig_path.read_text()
    async with client(srv, headers={"Authorization": "Bearer wrong"}) as bad:
        resp = await bad.get("/api/v1/namespaces")
        assert resp.status_code == 401
        assert resp.json() == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Unauthorized",
            "reason": "Unauthorized",
            "code": 401,
        }
        assert (await bad.get("/readyz")).text == "ok"  # health is anonymous, as on a real server


async def test_crud_metadata_and_conflict(api: httpx.AsyncClient) -> None:
    obj = await create(api, W, widget("w1"))
    meta = obj["metadata"]
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z") and meta["generation"] == 1
    assert meta["namespace"] == "default" and obj["spec"]["color"] == "red"  # defaulted from the schema
    dup = await api.post(W, json=widget("w1"))
    assert dup.status_code == 409 and dup.json()["reason"] == "AlreadyExists"
    assert dup.json()["message"] == 'widgets.test.kcpshard.dev "w1" already exists'

    obj["spec"]["size"] = 2
    updated = (await api.put(f"{W}/w1", json=obj)).json()
    assert int(updated["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
    assert updated["metadata"]["generation"] == 2
    stale = await api.put(f"{W}/w1", json=obj)  # still carries the old resourceVersion
    assert stale.status_code == 409
    assert stale.json()["message"] == (
        'Operation cannot be fulfilled on widgets.test.kcpshard.dev "w1": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    stale_patch = await api.patch(
        f"{W}/w1",
        headers=MERGE,
        json={"metadata": {"resourceVersion": meta["resourceVersion"]}, "spec": {"size": 5}},
    )
    assert stale_patch.status_code == 409

    listed = (await api.get(W)).json()
    assert listed["kind"] == "WidgetList" and listed["apiVersion"] == "test.kcpshard.dev/v1"
    assert int(listed["metadata"]["resourceVersion"]) >= int(updated["metadata"]["resourceVersion"])
    assert [i["metadata"]["name"] for i in listed["items"]] == ["w1"]

    missing = await api.get(f"{W}/nope")
    assert (
        missing.status_code == 404
        and missing.json()["message"] == 'widgets.test.kcpshard.dev "nope" not found'
    )
    generated = await create(api, W, {**widget(""), "metadata": {"generateName": "gen-"}})
    assert generated["metadata"]["name"].startswith("gen-") and len(generated["metadata"]["name"]) == 9


async def test_missing_namespace_is_404(api: httpx.AsyncClient) -> None:
    resp = await api.post("/apis/test.kcpshard.dev/v1/namespaces/nowhere/widgets", json=widget("w"))
    assert resp.status_code == 404
    assert resp.json()["message"] == 'namespaces "nowhere" not found'
    names = [n["metadata"]["name"] for n in (await api.get("/api/v1/namespaces")).json()["items"]]
    assert {"default", "kube-system", "kube-public"} <= set(names)


async def test_invalid_custom_resource_is_422_with_kube_message(api: httpx.AsyncClient) -> None:
    body = widget("bad", size=11)
    body["spec"]["color"] = "Purple"
    resp = await api.post(W, json=body)
    assert resp.status_code == 422
    status = resp.json()
    assert status["reason"] == "Invalid"
    assert status["message"] == (
        'Widget.test.kcpshard.dev "bad" is invalid: [spec.size: Invalid value: 11: spec.size in body '
        "should be "
        'less than or equal to 10, spec.color: Unsupported value: "Purple": supported values: "red", "blue"]'
    )
    assert {c["field"] for c in status["details"]["causes"]} == {"spec.size", "spec.color"}
    await create(api, W, widget("ok"))
    patched = await api.patch(f"{W}/ok", headers=MERGE, json={"spec": {"size": 0}})
    assert patched.status_code == 422
    status_patch = await api.patch(
        f"{W}/ok/status", headers=MERGE, json={"status": {"conditions": [{"type": "X"}]}}
    )
    assert status_patch.status_code == 422
    assert "status.conditions[0].status: Required value" in status_patch.json()["message"]


async def test_unknown_fields_pruned_warned_or_refused(api: httpx.AsyncClient) -> None:
    body = widget("w")
    body["spec"]["bogus"] = 1
    resp = await api.post(W, json=body)
    assert resp.status_code == 201 and "bogus" not in resp.json()["spec"]
    assert resp.headers["Warning"] == '299 - "unknown field \\"spec.bogus\\""'
    strict = await api.post(
        W, params={"fieldValidation": "Strict"}, json={**body, "metadata": {"name": "w2"}}
    )
    assert strict.status_code == 400
    assert 'strict decoding error: unknown field "spec.bogus"' in strict.json()["message"]


async def test_status_subresource_isolation_and_generation(api: httpx.AsyncClient) -> None:
    body = widget("w")
    body["status"] = {"phase": "Ignored"}
    obj = await create(api, W, body)
    assert "status" not in obj  # status is dropped on create when the subresource exists
    st = await api.patch(
        f"{W}/w/status", headers=MERGE, json={"status": {"phase": "Running"}, "spec": {"size": 9}}
    )
    assert st.status_code == 200
    assert st.json()["status"] == {"phase": "Running"} and st.json()["spec"]["size"] == 1
    assert st.json()["metadata"]["generation"] == 1  # status writes never bump generation
    main = await api.patch(
        f"{W}/w", headers=MERGE, json={"status": {"phase": "Lost"}, "metadata": {"labels": {"a": "b"}}}
    )
    assert main.json()["status"] == {"phase": "Running"}
    assert main.json()["metadata"]["generation"] == 1  # metadata-only change
    spec = await api.patch(f"{W}/w", headers=MERGE, json={"spec": {"size": 3}})
    assert spec.json()["metadata"]["generation"] == 2
    put_status = spec.json()
    put_status["status"] = {"phase": "Done"}
    put_status["spec"]["size"] = 7
    done = (await api.put(f"{W}/w/status", json=put_status)).json()
    assert done["status"] == {"phase": "Done"} and done["spec"]["size"] == 3
    rv = done["metadata"]["resourceVersion"]
    noop = (await api.patch(f"{W}/w", headers=MERGE, json={"spec": {"size": 3}})).json()
    assert noop["metadata"]["resourceVersion"] == rv  # a no-op write does not bump resourceVersion


async def test_json_patch_with_test_and_strategic_refused_for_crs(api: httpx.AsyncClient) -> None:
    obj = await create(api, W, widget("w"))
    rv = obj["metadata"]["resourceVersion"]
    ok = await api.patch(
        f"{W}/w",
        headers=JSONPATCH,
        json=[
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "replace", "path": "/spec/size", "value": 4},
        ],
    )
    assert ok.status_code == 200 and ok.json()["spec"]["size"] == 4
    failed = await api.patch(
        f"{W}/w",
        headers=JSONPATCH,
        json=[
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "replace", "path": "/spec/size", "value": 5},
        ],
    )
    assert failed.status_code == 422
    smp = await api.patch(
        f"{W}/w", headers={"Content-Type": "application/strategic-merge-patch+json"}, json={}
    )
    assert smp.status_code == 415


async def test_finalizers(api: httpx.AsyncClient) -> None:
    await create(api, W, widget("w", finalizers=["test/hold"]))
    deleted = await api.delete(f"{W}/w")
    assert deleted.status_code == 200
    meta = deleted.json()["metadata"]
    assert meta["deletionTimestamp"] and meta["deletionGracePeriodSeconds"] == 0
    assert meta["generation"] == 2  # markAsDeleting bumps generation once
    add = await api.patch(
        f"{W}/w", headers=MERGE, json={"metadata": {"finalizers": ["test/hold", "test/new"]}}
    )
    assert add.status_code == 422
    assert "no new finalizers can be added if the object is being deleted" in add.json()["message"]
    assert (await api.get(f"{W}/w")).status_code == 200
    released = await api.patch(f"{W}/w", headers=MERGE, json={"metadata": {"finalizers": None}})
    assert released.status_code == 200
    assert await gone(api, f"{W}/w")


async def test_delete_preconditions(api: httpx.AsyncClient) -> None:
    obj = await create(api, W, widget("w"))
    wrong = await api.request("DELETE", f"{W}/w", json={"preconditions": {"uid": "other"}})
    assert (
        wrong.status_code == 409
        and "the UID in the precondition (other) does not match" in wrong.json()["message"]
    )
    stale = await api.request("DELETE", f"{W}/w", json={"preconditions": {"resourceVersion": "1"}})
    assert stale.status_code == 409
    ok = await api.request("DELETE", f"{W}/w", json={"preconditions": {"uid": obj["metadata"]["uid"]}})
    assert ok.status_code == 200
    assert await gone(api, f"{W}/w")


async def test_gc_cascade_background_and_orphan(api: httpx.AsyncClient) -> None:
    owner = await create(api, W, widget("owner"))
    ref = {
        "apiVersion": "test.kcpshard.dev/v1",
        "kind": "Widget",
        "name": "owner",
        "uid": owner["metadata"]["uid"],
    }
    await create(
        api, "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "dep", "ownerReferences": [ref]}}
    )
    await create(api, W, widget("child", ownerReferences=[ref]))
    await create(api, PODS, pod("unscheduled", node=None, ownerReferences=[ref]))
    assert (
        await api.request("DELETE", f"{W}/owner", json={"propagationPolicy": "Background"})
    ).status_code == 200
    assert await gone(api, "/api/v1/namespaces/default/configmaps/dep")
    assert await gone(api, f"{W}/child")
    assert await gone(api, f"{PODS}/unscheduled")

    owner2 = await create(api, W, widget("owner2"))
    ref2 = {**ref, "name": "owner2", "uid": owner2["metadata"]["uid"]}
    await create(
        api,
        "/api/v1/namespaces/default/configmaps",
        {"metadata": {"name": "kept", "ownerReferences": [ref2]}},
    )
    assert (await api.delete(f"{W}/owner2", params={"propagationPolicy": "Orphan"})).status_code == 200
    kept = await api.get("/api/v1/namespaces/default/configmaps/kept")
    assert kept.status_code == 200 and "ownerReferences" not in kept.json()["metadata"]


async def test_jobs_orphan_pods_by_default_like_batch_v1(api: httpx.AsyncClient) -> None:
    job = await create(
        api,
        "/apis/batch/v1/namespaces/default/jobs",
        {
            "metadata": {"name": "j"},
            "spec": {
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x:1"}]}
                }
            },
        },
    )
    assert (
        job["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"] == job["metadata"]["uid"]
    )
    ref = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "j",
        "uid": job["metadata"]["uid"],
        "controller": True,
    }
    await create(api, PODS, pod("j-1", node=None, ownerReferences=[ref]))
    assert (await api.delete("/apis/batch/v1/namespaces/default/jobs/j")).status_code == 200
    left = (await api.get(f"{PODS}/j-1")).json()
    assert "ownerReferences" not in left["metadata"]


async def test_pod_graceful_deletion_handshake(api: httpx.AsyncClient) -> None:
    await create(api, PODS, pod("p"))
    first = (await api.delete(f"{PODS}/p")).json()
    assert first["metadata"]["deletionGracePeriodSeconds"] == 30 and first["metadata"]["deletionTimestamp"]
    assert (await api.get(f"{PODS}/p")).status_code == 200  # the kubelet has to confirm
    shorter = (await api.delete(f"{PODS}/p", params={"gracePeriodSeconds": "5"})).json()
    assert shorter["metadata"]["deletionGracePeriodSeconds"] == 5
    assert (await api.delete(f"{PODS}/p", params={"gracePeriodSeconds": "0"})).status_code == 200
    assert await gone(api, f"{PODS}/p")

    await create(api, PODS, pod("pending", node=None))
    await api.delete(f"{PODS}/pending")
    assert await gone(api, f"{PODS}/pending")  # never scheduled: deleted at once

    await create(api, PODS, pod("done"))
    await api.patch(f"{PODS}/done/status", headers=MERGE, json={"status": {"phase": "Succeeded"}})
    await api.delete(f"{PODS}/done")
    assert await gone(api, f"{PODS}/done")  # terminal phase: deleted at once


async def test_pod_status_subresource_and_field_selectors(api: httpx.AsyncClient) -> None:
    await create(api, PODS, pod("a", node="n1"))
    await create(api, PODS, pod("b", node="n2"))
    await api.patch(f"{PODS}/a/status", headers=MERGE, json={"status": {"phase": "Running"}})
    on_n1 = (await api.get(PODS, params={"fieldSelector": "spec.nodeName=n1"})).json()["items"]
    assert [p["metadata"]["name"] for p in on_n1] == ["a"]
    running = (await api.get("/api/v1/pods", params={"fieldSelector": "status.phase=Running"})).json()[
        "items"
    ]
    assert [p["metadata"]["name"] for p in running] == ["a"]
    bad = await api.get(PODS, params={"fieldSelector": "spec.bogus=1"})
    assert bad.status_code == 400


async def test_label_selectors_and_all_namespaces(api: httpx.AsyncClient) -> None:
    await create(api, "/api/v1/namespaces", {"metadata": {"name": "other"}})
    await create(api, W, widget("a", labels={"tier": "front", "slot": "a"}))
    await create(api, W, widget("b", labels={"tier": "back"}))
    await create(
        api, "/apis/test.kcpshard.dev/v1/namespaces/other/widgets", widget("c", labels={"tier": "front"})
    )

    async def names(path: str, selector: str) -> list[str]:
        items = (await api.get(path, params={"labelSelector": selector})).json()["items"]
        return sorted(i["metadata"]["name"] for i in items)

    assert await names(W, "tier=front") == ["a"]
    assert await names("/apis/test.kcpshard.dev/v1/widgets", "tier=front") == ["a", "c"]
    assert await names("/apis/test.kcpshard.dev/v1/widgets", "tier in (front,back),!slot") == ["b", "c"]
    assert await names("/apis/test.kcpshard.dev/v1/widgets", "tier!=front") == ["b"]
    by_ns = await api.get(
        "/apis/test.kcpshard.dev/v1/widgets", params={"fieldSelector": "metadata.namespace=other"}
    )
    assert [i["metadata"]["name"] for i in by_ns.json()["items"]] == ["c"]


async def collect(events: AsyncIterator[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    out = []
    async with asyncio.timeout(10):
        async for event in events:
            if event["type"] != "BOOKMARK":
                out.append(event)
            if len(out) == count:
                break
    return out


async def test_watch_initial_state_then_changes(api: httpx.AsyncClient) -> None:
    await create(api, W, widget("before"))
    events = watch_events(api, W)
    first = await collect(events, 1)
    assert first[0]["type"] == "ADDED" and first[0]["object"]["metadata"]["name"] == "before"
    await create(api, W, widget("after"))
    await api.patch(f"{W}/after", headers=MERGE, json={"spec": {"size": 2}})
    await api.delete(f"{W}/after")
    rest = await collect(events, 3)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in rest] == [
        ("ADDED", "after"),
        ("MODIFIED", "after"),
        ("DELETED", "after"),
    ]
    assert rest[1]["object"]["spec"]["size"] == 2
    await events.aclose()


async def test_watch_resumes_from_resource_version(api: httpx.AsyncClient) -> None:
    start = (await api.get(W)).json()["metadata"]["resourceVersion"]
    await create(api, W, widget("x"))
    await api.patch(f"{W}/x", headers=MERGE, json={"spec": {"size": 3}})
    events = watch_events(api, W, resourceVersion=start)
    got = await collect(events, 2)
    assert [e["type"] for e in got] == ["ADDED", "MODIFIED"]
    assert got[0]["object"]["spec"]["size"] == 1  # the state at that event, not the current one
    await events.aclose()


async def test_watch_too_old_resource_version_is_410(api: httpx.AsyncClient) -> None:
    start = (await api.get(W)).json()["metadata"]["resourceVersion"]
    for i in range(25):  # the fixture keeps 20 events
        await create(api, "/api/v1/namespaces/default/configmaps", {"metadata": {"name": f"cm{i}"}})
    events = watch_events(api, W, resourceVersion=start)
    got = await collect(events, 1)
    assert got[0]["type"] == "ERROR"
    assert got[0]["object"]["code"] == 410 and got[0]["object"]["reason"] == "Expired"
    assert got[0]["object"]["message"].startswith(f"too old resource version: {start} (")


async def test_watch_label_selector_translates_events(api: httpx.AsyncClient) -> None:
    await create(api, W, widget("w", labels={"team": "a"}))
    start = (await api.get(W)).json()["metadata"]["resourceVersion"]
    events = watch_events(api, W, labelSelector="team=b", resourceVersion=start)
    await api.patch(f"{W}/w", headers=MERGE, json={"metadata": {"labels": {"team": "b"}}})
    await api.patch(f"{W}/w", headers=MERGE, json={"spec": {"size": 2}})
    await api.patch(f"{W}/w", headers=MERGE, json={"metadata": {"labels": {"team": "c"}}})
    await create(api, W, widget("other", labels={"team": "a"}))
    await create(api, W, widget("match", labels={"team": "b"}))
    got = await collect(events, 4)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in got] == [
        ("ADDED", "w"),
        ("MODIFIED", "w"),
        ("DELETED", "w"),
        ("ADDED", "match"),
    ]
    await events.aclose()


async def test_watch_bookmarks_and_timeout(api: httpx.AsyncClient) -> None:
    seen = []
    async with asyncio.timeout(10):
        async for event in watch_events(api, W, allowWatchBookmarks="true", timeoutSeconds="1"):
            seen.append(event)
    bookmarks = [e for e in seen if e["type"] == "BOOKMARK"]
    assert bookmarks and bookmarks[0]["object"]["kind"] == "Widget"
    assert int(bookmarks[0]["object"]["metadata"]["resourceVersion"]) > 0


async def test_watch_send_initial_events_ends_with_annotated_bookmark(api: httpx.AsyncClient) -> None:
    await create(api, W, widget("w"))
    events = watch_events(
        api, W, sendInitialEvents="true", resourceVersionMatch="NotOlderThan", allowWatchBookmarks="true"
    )
    async with asyncio.timeout(10):
        first = await events.__anext__()
        second = await events.__anext__()
    assert first["type"] == "ADDED"
    assert second["type"] == "BOOKMARK"
    assert second["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    await events.aclose()


async def test_watch_disconnect_is_cleaned_up_and_stop_closes_watches(
    srv: EmulatedApiServer, api: httpx.AsyncClient
) -> None:
    assert srv.store is not None
    events = watch_events(api, W)
    await create(api, W, widget("w"))
    await collect(events, 1)
    assert len(srv.store.subscribers) == 1
    await events.aclose()
    await wait_for(lambda: asyncio.sleep(0, result=not srv.store.subscribers))  # type: ignore[union-attr]

    events = watch_events(api, W)
    await collect(events, 1)
    ended = asyncio.ensure_future(collect(events, 99))
    await srv.stop()
    async with asyncio.timeout(10):  # the open watch ends (or breaks) once the server stops
        with contextlib.suppress(httpx.HTTPError):
            await ended
    assert ended.done() and not srv.store.subscribers


async def test_concurrent_updates_one_wins(api: httpx.AsyncClient) -> None:
    obj = await create(api, W, widget("w"))
    results = await asyncio.gather(
        *[api.put(f"{W}/w", json={**obj, "spec": {"size": i + 2}}) for i in range(8)]
    )
    codes = sorted(r.status_code for r in results)
    assert codes.count(200) == 1 and codes.count(409) == 7


async def test_crd_created_through_the_api_appears_in_discovery(api: httpx.AsyncClient) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.dev"},
        "spec": {
            "group": "example.dev",
            "scope": "Cluster",
            "names": {"plural": "gadgets", "kind": "Gadget", "shortNames": ["gd"]},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }
    created = await create(api, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    established = {c["type"]: c["status"] for c in created["status"]["conditions"]}
    assert established["Established"] == "True"
    resources = (await api.get("/apis/example.dev/v1")).json()["resources"]
    assert resources[0]["name"] == "gadgets" and resources[0]["namespaced"] is False
    assert resources[0]["shortNames"] == ["gd"] and resources[0]["singularName"] == "gadget"
    groups = [g["name"] for g in (await api.get("/apis")).json()["groups"]]
    assert "example.dev" in groups
    await create(
        api,
        "/apis/example.dev/v1/gadgets",
        {"apiVersion": "example.dev/v1", "kind": "Gadget", "metadata": {"name": "g"}, "anything": {"x": 1}},
    )
    assert (await api.get("/apis/example.dev/v1/gadgets/g")).json()["anything"] == {"x": 1}
    await api.delete("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.example.dev")
    assert await gone(api, "/apis/example.dev/v1/gadgets")
    assert await gone(api, "/apis/example.dev/v1")


async def test_discovery_documents(api: httpx.AsyncClient) -> None:
    core = (await api.get("/api/v1")).json()
    by_name = {r["name"]: r for r in core["resources"]}
    assert by_name["pods"]["kind"] == "Pod" and "pods/status" in by_name
    assert by_name["namespaces"]["namespaced"] is False
    widgets = {r["name"]: r for r in (await api.get("/apis/test.kcpshard.dev/v1")).json()["resources"]}
    assert widgets["widgets"]["categories"] == ["testing"] and "widgets/status" in widgets
    assert set(widgets["widgets"]["verbs"]) >= {"get", "list", "watch", "create", "update", "patch", "delete"}
    group = (await api.get("/apis/test.kcpshard.dev")).json()
    assert group["preferredVersion"] == {"groupVersion": "test.kcpshard.dev/v1", "version": "v1"}
    agg = await api.get(
        "/apis",
        headers={
            "Accept": "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
        },
    )
    assert agg.headers["Content-Type"].startswith("application/json;g=apidiscovery.k8s.io;v=v2")
    item = next(i for i in agg.json()["items"] if i["metadata"]["name"] == "test.kcpshard.dev")
    assert item["versions"][0]["resources"][0]["subresources"][0]["subresource"] == "status"
    assert (await api.get("/version")).json()["major"] == "1"
    root = (await api.get("/openapi/v3")).json()["paths"]
    doc = (await api.get(root["apis/test.kcpshard.dev/v1"]["serverRelativeURL"])).json()
    assert doc["components"]["schemas"]["dev.kcpshard.test.v1.Widget"]["properties"]["spec"]["required"] == [
        "size"
    ]


async def test_table_output(api: httpx.AsyncClient) -> None:
    await create(api, W, widget("w", size=4))
    await api.patch(
        f"{W}/w/status", headers=MERGE, json={"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    )
    table = (
        await api.get(W, headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"})
    ).json()
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Ready", "Size", "Color", "Age"]
    assert table["rows"][0]["cells"][:4] == ["w", "True", 4, "red"]


async def test_events_core_and_events_k8s_io(api: httpx.AsyncClient) -> None:
    involved = {"kind": "Widget", "name": "w", "namespace": "default", "apiVersion": "test.kcpshard.dev/v1"}
    await create(
        api,
        "/api/v1/namespaces/default/events",
        {
            "metadata": {"name": "w.1"},
            "involvedObject": involved,
            "reason": "Rolled",
            "message": "done",
            "type": "Normal",
            "source": {"component": "kopf"},
        },
    )
    await create(
        api,
        "/api/v1/namespaces/default/events",
        {
            "metadata": {"name": "x.1"},
            "involvedObject": {**involved, "name": "x"},
            "reason": "Other",
            "message": "m",
        },
    )
    found = (
        await api.get(
            "/api/v1/namespaces/default/events",
            params={"fieldSelector": "involvedObject.name=w,involvedObject.kind=Widget"},
        )
    ).json()
    assert [e["reason"] for e in found["items"]] == ["Rolled"]
    new_api = (await api.get("/apis/events.k8s.io/v1/namespaces/default/events/w.1")).json()
    assert new_api["apiVersion"] == "events.k8s.io/v1" and new_api["note"] == "done"
    assert new_api["regarding"]["name"] == "w"


async def test_python_kubernetes_client(srv: EmulatedApiServer) -> None:
    import kubernetes

    def run() -> tuple[Any, list[Any]]:
        api_client = kubernetes.config.new_client_from_config(config_file=str(srv.kubeconfig_path))
        try:
            custom = kubernetes.client.CustomObjectsApi(api_client)
            custom.create_namespaced_custom_object(
                "test.kcpshard.dev", "v1", "default", "widgets", widget("py")
            )
            got: Any = custom.get_namespaced_custom_object(
                "test.kcpshard.dev", "v1", "default", "widgets", "py"
            )
            core = kubernetes.client.CoreV1Api(api_client)
            names = [n.metadata.name for n in core.list_namespace().items if n.metadata]
            return got["spec"]["color"], names
        finally:
            api_client.close()

    color, names = await asyncio.to_thread(run)
    assert color == "red" and "kube-system" in names


async def test_deployment_lease_and_dry_run(api: httpx.AsyncClient) -> None:
    deploys = "/apis/apps/v1/namespaces/default/deployments"
    template = {
        "metadata": {"labels": {"app": "front"}},
        "spec": {"containers": [{"name": "c", "image": "x:1"}]},
    }
    bad = await api.post(
        deploys,
        json={
            "metadata": {"name": "d"},
            "spec": {"selector": {"matchLabels": {"app": "other"}}, "template": template},
        },
    )
    assert bad.status_code == 422
    made = await create(
        api,
        deploys,
        {
            "metadata": {"name": "d"},
            "spec": {"selector": {"matchLabels": {"app": "front"}}, "template": template},
        },
    )
    assert made["spec"]["replicas"] == 1 and made["status"] == {}
    st = (await api.patch(f"{deploys}/d/status", headers=MERGE, json={"status": {"readyReplicas": 1}})).json()
    assert st["status"] == {"readyReplicas": 1} and st["metadata"]["generation"] == 1
    scaled = (await api.patch(f"{deploys}/d", headers=MERGE, json={"spec": {"replicas": 2}})).json()
    assert scaled["metadata"]["generation"] == 2

    leases = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
    lease = await create(
        api,
        leases,
        {
            "metadata": {"name": "kcp-controllers"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 60},
        },
    )
    lease["spec"]["holderIdentity"] = "b"
    assert (await api.put(f"{leases}/kcp-controllers", json=lease)).json()["spec"]["holderIdentity"] == "b"
    assert (await api.put(f"{leases}/kcp-controllers", json=lease)).status_code == 409  # stale now

    dry = await api.post(W, params={"dryRun": "All"}, json=widget("dry"))
    assert dry.status_code == 201 and dry.json()["spec"]["color"] == "red"
    assert await gone(api, f"{W}/dry")
