"""The emulated API server against the real one: one script of API calls and kubectl commands, run on
both development environments, must get the same answers.

Each step records what a client can rely on (status codes, reasons, messages, names, the fields a
controller reads), with what legitimately differs normalized away: uids, resourceVersion values,
timestamps, `managedFields`. The differences that remain on purpose are listed, with why, in
`kcpshard_testkit.apiserver`'s docstring; every other difference fails the test. It also prints how long
each environment takes to start.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from kcpshard.k8s.api import KCPSHARDS, NAMESPACES, PODS, ApiClient, Gone
from kcpshard.k8s.credentials import load_credentials
from kcpshard_testkit.devenv import ApiKind, dev_environment
from kcpshard_testkit.kinds import CONFIGMAPS
from kcpshard_testkit.kubectl import kubectl_binary
from kcpshard_testkit.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
NS = "diff"
AGE = re.compile(r"(\d+[smhd])+")
UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"

pytestmark = pytest.mark.timeout(400)


@dataclass
class Target:
    """One environment as the script sees it: the admin's API client, raw HTTP, and kubectl."""

    kind: str
    api: ApiClient
    http: httpx.AsyncClient
    kubeconfig: str
    home: Path
    seen: dict[str, Any] = field(default_factory=dict)

    def record(self, step: str, value: Any) -> None:
        self.seen[step] = value

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
        accept: str = "application/json",
    ) -> tuple[int, Any]:
        content = None if body is None else json.dumps(body).encode()
        resp = await self.http.request(
            method,
            path,
            content=content,
            params=params,
            headers={"Content-Type": content_type, "Accept": accept},
        )
        try:
            return resp.status_code, resp.json()
        except ValueError:
            return resp.status_code, resp.text

    async def kubectl(self, *args: str) -> tuple[int, str, str]:
        # Not subprocess.run: the emulated API server answers from this event loop, so a blocking
        # call would starve it (kubectl then sees a TLS handshake timeout).
        proc = await asyncio.create_subprocess_exec(
            kubectl_binary(),
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "KUBECONFIG": self.kubeconfig, "HOME": str(self.home)},
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
        return proc.returncode or 0, out.decode(), err.decode()


def failure(code: int, body: Any) -> dict[str, Any]:
    """What a client reads from an error: the code, the reason, the message and the causes."""
    if not isinstance(body, dict):
        return {"code": code, "body": str(body)[:200]}
    causes = sorted(
        (c.get("field", ""), c.get("reason", ""), c.get("message", ""))
        for c in (body.get("details") or {}).get("causes") or []
    )
    message = UID.sub("<uid>", str(body.get("message") or ""))  # uids differ between any two servers
    return {"code": code, "reason": body.get("reason"), "message": message, "causes": causes}


def names(listing: dict[str, Any]) -> list[str]:
    return sorted(item["metadata"]["name"] for item in listing.get("items") or [])


def cm(name: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS, **meta}}


def cm_path(name: str = "") -> str:
    return CONFIGMAPS.path(NS, name or None)


def shard_path(name: str = "", subresource: str | None = None) -> str:
    return KCPSHARDS.path(NS, name or None, subresource)


def shard(name: str, **spec: Any) -> dict[str, Any]:
    doc = yaml.safe_load((REPO / "examples" / "kcpshard.yaml").read_text())
    doc["metadata"] = {"name": name, "namespace": NS}
    doc["spec"].update(spec)
    return dict(doc)


def table_columns(text: str) -> list[list[str]]:
    """kubectl's table, without ages (they depend on when the script ran).

    Rows are split on blanks, so empty cells vanish and the AGE column has no fixed index: drop the
    header's AGE and every cell that reads as an age (`0s`, `5m3s`, `2d`).
    """
    rows = [line.split() for line in text.splitlines() if line.strip()]
    if not rows or "AGE" not in rows[0]:
        return rows
    return [[c for c in rows[0] if c != "AGE"]] + [
        [c for c in row if not AGE.fullmatch(c)] for row in rows[1:]
    ]


# --- the script ---------------------------------------------------------------------------------------


async def crud(t: Target) -> None:
    code, body = await t.call("POST", NAMESPACES.path(), {"metadata": {"name": NS}})
    t.record("create namespace", code)
    code, created = await t.call("POST", cm_path(), cm("a", labels={"app": "diff", "tier": "one"}))
    meta = created["metadata"]
    t.record(
        "create: server-set metadata",
        {
            "code": code,
            "kind": (created.get("kind"), created.get("apiVersion")),
            "set": sorted(k for k in ("uid", "resourceVersion", "creationTimestamp") if meta.get(k)),
            "no generation on a ConfigMap": "generation" not in meta,
        },
    )
    t.record("create again", failure(*await t.call("POST", cm_path(), cm("a"))))
    t.record("get missing", failure(*await t.call("GET", cm_path("nope"))))
    t.record("bad name", failure(*await t.call("POST", cm_path(), cm("Not_A_Name"))))
    lost = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    code, body = await t.call("POST", CONFIGMAPS.path("no-such-namespace"), lost)
    t.record("create in a missing namespace", failure(code, body))


async def selectors(t: Target) -> None:
    await t.call("POST", cm_path(), cm("b", labels={"app": "diff", "tier": "two"}))
    await t.call("POST", cm_path(), cm("c", labels={"other": "yes"}))
    for selector in (
        "app=diff",
        "tier in (two)",
        "app=diff,tier!=one",
        "!tier",
        "app",
        "tier notin (one,two)",
    ):
        _, listing = await t.call("GET", cm_path(), params={"labelSelector": selector})
        t.record(f"labelSelector {selector}", names(listing))
    _, listing = await t.call("GET", cm_path(), params={"fieldSelector": "metadata.name=b"})
    t.record("fieldSelector metadata.name=b", names(listing))
    _, listing = await t.call("GET", cm_path(), params={"fieldSelector": "metadata.name!=b"})
    t.record("fieldSelector metadata.name!=b", [n for n in names(listing) if n != "kube-root-ca.crt"])
    code, body = await t.call("GET", cm_path(), params={"fieldSelector": "data.k=v"})
    t.record("fieldSelector on an unsupported field", failure(code, body))
    code, body = await t.call("GET", cm_path(), params={"labelSelector": "a b c"})
    t.record("malformed labelSelector", {"code": code})
    _, listing = await t.call("GET", cm_path(), params={"labelSelector": "app=diff"})
    t.record(
        "list shape",
        {
            "kind": listing.get("kind"),
            "apiVersion": listing.get("apiVersion"),
            "resourceVersion set": bool((listing.get("metadata") or {}).get("resourceVersion")),
        },
    )


async def patches(t: Target) -> None:
    patch = {"metadata": {"labels": {"tier": None, "new": "x"}}, "data": {"k": "v"}}
    code, body = await t.call("PATCH", cm_path("a"), patch, content_type=MERGE)
    t.record("merge patch", {"code": code, "labels": body["metadata"]["labels"], "data": body["data"]})
    ops = [
        {"op": "test", "path": "/data/k", "value": "v"},
        {"op": "replace", "path": "/data/k", "value": "w"},
    ]
    code, body = await t.call("PATCH", cm_path("a"), ops, content_type=JSON_PATCH)
    t.record("json patch with a passing test", {"code": code, "data": body["data"]})
    ops = [
        {"op": "test", "path": "/data/k", "value": "v"},
        {"op": "replace", "path": "/data/k", "value": "z"},
    ]
    code, body = await t.call("PATCH", cm_path("a"), ops, content_type=JSON_PATCH)
    t.record("json patch with a failing test", {"code": code, "reason": body.get("reason")})
    code, body = await t.call("PATCH", cm_path("a"), {"data": {"k": 1}}, content_type=MERGE)
    t.record("merge patch of the wrong type", {"code": code, "reason": body.get("reason")})
    code, body = await t.call("PATCH", cm_path("nope"), {"data": {}}, content_type=MERGE)
    t.record("patch of a missing object", failure(code, body))


async def conflicts(t: Target) -> None:
    _, current = await t.call("GET", cm_path("a"))
    stale = copy.deepcopy(current)
    current["data"] = {"k": "first"}
    code, updated = await t.call("PUT", cm_path("a"), current)
    t.record(
        "update with the current resourceVersion",
        {
            "code": code,
            "rv moved": updated["metadata"]["resourceVersion"] != stale["metadata"]["resourceVersion"],
        },
    )
    stale["data"] = {"k": "second"}
    t.record("update with a stale resourceVersion", failure(*await t.call("PUT", cm_path("a"), stale)))
    stale["metadata"].pop("resourceVersion")
    code, _ = await t.call("PUT", cm_path("a"), stale)
    t.record("update without a resourceVersion", code)
    patch = {"metadata": {"resourceVersion": "1"}, "data": {"k": "third"}}
    t.record(
        "merge patch naming an old resourceVersion",
        failure(*await t.call("PATCH", cm_path("a"), patch, content_type=MERGE)),
    )
    options = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "not-the-uid"}}
    t.record("delete with a wrong uid precondition", failure(*await t.call("DELETE", cm_path("a"), options)))


async def status_subresource(t: Target) -> None:
    code, created = await t.call("POST", shard_path(), shard("s1"))
    spec = created["spec"]
    t.record(
        "custom resource created with schema defaults",
        {
            "code": code,
            "generation": created["metadata"].get("generation"),
            "shape": spec.get("shape"),
            "readyTimeoutSeconds": (spec.get("roll") or {}).get("readyTimeoutSeconds"),
            "status": created.get("status"),
        },
    )
    status = {"status": {"activeSlot": "a", "observedGeneration": 1}}
    code, body = await t.call("PATCH", shard_path("s1", "status"), status, content_type=MERGE)
    t.record(
        "status patch",
        {"code": code, "status": body.get("status"), "generation": body["metadata"]["generation"]},
    )
    both = {"spec": {"shutdownDelaySeconds": 3}, "status": {"activeSlot": "b"}}
    code, body = await t.call("PATCH", shard_path("s1"), both, content_type=MERGE)
    t.record(
        "main resource patch ignores status",
        {
            "code": code,
            "activeSlot": body["status"].get("activeSlot"),
            "generation": body["metadata"]["generation"],
        },
    )
    code, body = await t.call(
        "PATCH",
        shard_path("s1", "status"),
        {"spec": {"shutdownDelaySeconds": 9}, "status": {"activeSlot": "b"}},
        content_type=MERGE,
    )
    t.record(
        "status patch ignores spec",
        {
            "code": code,
            "shutdownDelaySeconds": body["spec"]["shutdownDelaySeconds"],
            "activeSlot": body["status"]["activeSlot"],
            "generation": body["metadata"]["generation"],
        },
    )
    labels = {"metadata": {"labels": {"x": "y"}}}
    code, body = await t.call("PATCH", shard_path("s1"), labels, content_type=MERGE)
    t.record("metadata change keeps the generation", body["metadata"]["generation"])
    code, body = await t.call(
        "PATCH", shard_path("s1"), {"spec": {}}, content_type="application/strategic-merge-patch+json"
    )
    t.record(
        "strategic merge patch of a custom resource",
        {"code": code, "reason": body.get("reason") if isinstance(body, dict) else None},
    )


async def validation(t: Target) -> None:
    cases = {
        "enum": shard("bad1", shape="Purple"),
        "maximum": shard("bad2", front={"address": "127.0.0.1", "port": 70000}),
        "required": {
            **shard("bad3"),
            "spec": {k: v for k, v in shard("bad3")["spec"].items() if k != "node"},
        },
        "type": shard("bad4", shutdownDelaySeconds="two"),
    }
    for case, body in cases.items():
        t.record(f"invalid custom resource: {case}", failure(*await t.call("POST", shard_path(), body)))
    unknown = shard("extra")
    unknown["spec"]["notAField"] = 1
    code, body = await t.call("POST", shard_path(), unknown)
    t.record("unknown field pruned", {"code": code, "kept": "notAField" in (body.get("spec") or {})})
    code, body = await t.call("POST", shard_path(), unknown, params={"fieldValidation": "Strict"})
    t.record("unknown field with Strict validation", failure(code, body))
    path = t.home / "bad.yaml"
    path.write_text(yaml.safe_dump(shard("bad5", shape="Purple")))
    code, _, err = await t.kubectl("apply", "-f", str(path))
    t.record("kubectl apply of an invalid custom resource", {"code": code, "stderr": err.strip()})


async def finalizers(t: Target) -> None:
    await t.call("POST", cm_path(), cm("held", finalizers=["kcpshard.dev/hold"]))
    code, body = await t.call("DELETE", cm_path("held"))
    t.record(
        "delete of an object with a finalizer",
        {
            "code": code,
            "kind": body.get("kind"),
            "deletionTimestamp set": bool(body["metadata"].get("deletionTimestamp")),
            "finalizers": body["metadata"].get("finalizers"),
        },
    )
    code, body = await t.call("GET", cm_path("held"))
    t.record(
        "still there while the finalizer holds",
        {"code": code, "deleting": bool(body["metadata"].get("deletionTimestamp"))},
    )
    code, body = await t.call(
        "PATCH", cm_path("held"), {"metadata": {"labels": {"new": "x"}}}, content_type=MERGE
    )
    t.record("a terminating object can still be changed", code)
    code, body = await t.call(
        "PATCH", cm_path("held"), {"metadata": {"finalizers": ["kcpshard.dev/more"]}}, content_type=MERGE
    )
    t.record("no new finalizer on a terminating object", failure(code, body))
    code, body = await t.call(
        "PATCH", cm_path("held"), {"metadata": {"finalizers": None}}, content_type=MERGE
    )
    t.record("finalizer removed", {"code": code, "gone": (await t.call("GET", cm_path("held")))[0]})


async def garbage_collection(t: Target) -> None:
    owners = {}
    for name in ("owner-bg", "owner-orphan", "owner-fg"):
        _, owners[name] = await t.call("POST", cm_path(), cm(name))
    for owner, obj in owners.items():
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": owner, "uid": obj["metadata"]["uid"]}
        await t.call("POST", cm_path(), cm(f"{owner}-dep", ownerReferences=[ref]))
    for owner, policy in (("owner-bg", "Background"), ("owner-orphan", "Orphan"), ("owner-fg", "Foreground")):
        options = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": policy}
        code, _ = await t.call("DELETE", cm_path(owner), options)
        t.record(f"delete owner ({policy})", code)

    async def gone(name: str) -> bool:
        return (await t.call("GET", cm_path(name)))[0] == 404

    for name in ("owner-bg-dep", "owner-fg-dep", "owner-fg"):
        await wait_for(f"{name} to be collected ({t.kind})", lambda name=name: gone(name), timeout=60)
    t.record("owned objects collected", True)

    async def orphaned() -> dict[str, Any] | None:
        code, body = await t.call("GET", cm_path("owner-orphan-dep"))
        return body if code == 200 and not body["metadata"].get("ownerReferences") else None

    kept = await wait_for(f"the orphan to lose its owner reference ({t.kind})", orphaned, timeout=60)
    t.record("orphaned dependent kept", kept["metadata"]["name"])


async def watches(t: Target) -> None:
    _, listing = await t.call("GET", cm_path())
    since = listing["metadata"]["resourceVersion"]
    await t.call("POST", cm_path(), cm("w", labels={"watched": "yes"}))
    await t.call("PATCH", cm_path("w"), {"data": {"k": "v"}}, content_type=MERGE)
    await t.call("PATCH", cm_path("w"), {"metadata": {"labels": {"watched": "no"}}}, content_type=MERGE)
    await t.call("DELETE", cm_path("w"))

    async def events(**query: str) -> list[tuple[str, str]]:
        seen: list[tuple[str, str]] = []
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                async for event in t.api.watch(CONFIGMAPS, NS, resource_version=since, **query):
                    obj = event["object"]
                    seen.append((event["type"], obj["metadata"]["name"]))
                    if len(seen) == 4 or (query and len(seen) == 3):
                        break
        return seen

    t.record("watch resumed from a list's resourceVersion", await events())
    t.record("watch with a label selector", await events(label_selector="watched=yes"))
    try:
        async for _ in t.api.watch(CONFIGMAPS, NS, resource_version="1", timeout_seconds=2):
            break
        t.record("watch from a resourceVersion too old", "no error")
    except Gone as exc:
        t.record(
            "watch from a resourceVersion too old", {"code": exc.status, "message": exc.message.split(":")[0]}
        )


async def pods_and_tables(t: Target) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": NS, "labels": {"app": "diff"}},
        "spec": {"nodeName": "elsewhere", "containers": [{"name": "c", "image": "x", "command": ["true"]}]},
    }
    code, created = await t.call("POST", PODS.path(NS), pod)
    spec = created["spec"]
    t.record(
        "pod defaults",
        {
            "code": code,
            "restartPolicy": spec.get("restartPolicy"),
            "terminationGracePeriodSeconds": spec.get("terminationGracePeriodSeconds"),
            "dnsPolicy": spec.get("dnsPolicy"),
            "phase": (created.get("status") or {}).get("phase"),
            "qosClass": (created.get("status") or {}).get("qosClass"),
            "generation": created["metadata"].get("generation"),
        },
    )
    _, listing = await t.call("GET", PODS.path(NS), params={"fieldSelector": "spec.nodeName=elsewhere"})
    t.record("pods by spec.nodeName", names(listing))
    status = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    code, body = await t.call("PATCH", PODS.path(NS, "p", "status"), status, content_type=MERGE)
    t.record("pod status write", {"code": code, "phase": body["status"]["phase"]})
    _, listing = await t.call("GET", PODS.path(NS), params={"fieldSelector": "status.phase=Running"})
    t.record("pods by status.phase", names(listing))
    code, body = await t.call("DELETE", PODS.path(NS, "p"))
    t.record(
        "graceful delete of a bound pod",
        {"code": code, "deletionGracePeriodSeconds": body["metadata"].get("deletionGracePeriodSeconds")},
    )
    options = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
    code, _ = await t.call("DELETE", PODS.path(NS, "p"), options)
    t.record(
        "delete with grace 0 ends it", {"code": code, "gone": (await t.call("GET", PODS.path(NS, "p")))[0]}
    )

    code, table = await t.call("GET", shard_path(), accept=TABLE)
    columns = [(c["name"], c["type"], c.get("priority", 0)) for c in table.get("columnDefinitions") or []]
    t.record("Table of kcpshards: columns", {"code": code, "kind": table.get("kind"), "columns": columns})
    t.record("kubectl get kcpshards", table_columns((await t.kubectl("get", "kcpshards", "-n", NS))[1]))
    t.record(
        "kubectl get kshard -o wide",
        table_columns((await t.kubectl("get", "kshard", "-n", NS, "-o", "wide"))[1]),
    )
    t.record(
        "kubectl get configmaps -l app=diff",
        table_columns((await t.kubectl("get", "cm", "-n", NS, "-l", "app=diff"))[1]),
    )
    code, out, err = await t.kubectl("get", "kcpshards", "-n", NS, "nope")
    t.record("kubectl get of a missing object", {"code": code, "stderr": err.strip()})
    code, out, err = await t.kubectl("get", "kslot", "-n", NS)
    t.record("kubectl get of an empty list", {"code": code, "out": out, "stderr": err.strip()})


SCRIPT: list[Callable[[Target], Awaitable[None]]] = [
    crud,
    selectors,
    patches,
    conflicts,
    status_subresource,
    validation,
    finalizers,
    garbage_collection,
    watches,
    pods_and_tables,
]


@contextlib.asynccontextmanager
async def target(kind: ApiKind, directory: Path) -> AsyncIterator[tuple[Target, float]]:
    started = time.monotonic()
    async with dev_environment(directory, api=kind) as info:
        seconds = time.monotonic() - started
        config = load_credentials(info.kubeconfig)
        headers = {"Authorization": config.authorization} if config.authorization else {}
        home = directory / "home"
        home.mkdir(exist_ok=True)
        async with (
            ApiClient(config) as api,
            httpx.AsyncClient(
                base_url=config.server, verify=config.ssl_context(), headers=headers, timeout=30
            ) as http,
        ):
            yield Target(kind, api, http, info.kubeconfig, home), seconds


async def test_emulated_and_real_api_servers_answer_alike(tmp_path: Path) -> None:
    seen: dict[str, dict[str, Any]] = {}
    for kind in ("emulated", "real"):
        async with target(kind, tmp_path / kind) as (t, seconds):
            print(f"{kind} environment started in {seconds:.1f} s")
            for step in SCRIPT:
                await step(t)
            seen[kind] = t.seen
    emulated, real = seen["emulated"], seen["real"]
    assert list(emulated) == list(real)
    differences = [
        f"{step}:\n    emulated: {emulated[step]!r}\n    real:     {real[step]!r}"
        for step in real
        if emulated[step] != real[step]
    ]
    print(f"{len(real)} steps compared")
    assert not differences, "the emulated API server answers differently:\n" + "\n".join(differences)
