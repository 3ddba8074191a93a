"""Discovery documents (legacy and aggregated v2) and OpenAPI v3 documents.

Legacy discovery follows the layout of KMock's `KubernetesScaffold` (`/api`, `/apis`, `/apis/<g>`,
`/apis/<g>/<v>`), extended with status subresources and the fields client-go reads. The aggregated
format imitates k8s.io/apiserver/pkg/endpoints/discovery/aggregated (apidiscovery.k8s.io/v2). OpenAPI v3
imitates k8s.io/kube-openapi/pkg/handler3 and the CRD builder in
k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder: one document per group-version, whose
PATCH operations declare `fieldValidation` so kubectl leaves field validation to the server.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from .registry import Registry, ResourceType

AGGREGATED_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
VERSION = {
    "major": "1",
    "minor": "33",
    "emulationMajor": "1",
    "emulationMinor": "33",
    "minCompatibilityMajor": "1",
    "minCompatibilityMinor": "32",
    "gitVersion": "v1.33.0-kcpshard-emulated",
    "gitCommit": "emulated",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "python",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def _gv(group: str, version: str) -> str:
    return f"{group}/{version}" if group else version


def _group_entry(name: str, versions: list[str]) -> dict[str, Any]:
    vs = [{"groupVersion": _gv(name, v), "version": v} for v in versions]
    return {"name": name, "versions": vs, "preferredVersion": vs[0]}


def api_versions(address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    }


def api_group_list(registry: Registry) -> dict[str, Any]:
    groups = [_group_entry(g, vs) for g, vs in registry.groups().items() if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: Registry, group: str) -> dict[str, Any] | None:
    versions = registry.groups().get(group)
    if not group or not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_entry(group, versions)}


def resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = [t for t in registry if t.group == group and t.version == version]
    if not types:
        return None
    resources: list[dict[str, Any]] = []
    for t in sorted(types, key=lambda t: t.plural):
        info = t.info
        entry: dict[str, Any] = {
            "name": t.plural,
            "singularName": info.singular,
            "namespaced": info.namespaced,
            "kind": info.kind,
            "verbs": sorted(info.verbs),
        }
        if info.shortnames:
            entry["shortNames"] = sorted(info.shortnames)
        if info.categories:
            entry["categories"] = sorted(info.categories)
        resources.append(entry)
        for sub in sorted(info.subresources):
            resources.append(
                {
                    "name": f"{t.plural}/{sub}",
                    "singularName": "",
                    "namespaced": info.namespaced,
                    "kind": info.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": _gv(group, version),
        "resources": resources,
    }


def _aggregated_resource(t: ResourceType) -> dict[str, Any]:
    kind = {"group": t.group, "version": t.version, "kind": t.kind}
    entry: dict[str, Any] = {
        "resource": t.plural,
        "responseKind": kind,
        "scope": "Namespaced" if t.namespaced else "Cluster",
        "singularResource": t.singular,
        "verbs": sorted(t.verbs),
    }
    if t.short_names:
        entry["shortNames"] = list(t.short_names)
    if t.categories:
        entry["categories"] = list(t.categories)
    if t.status_subresource:
        entry["subresources"] = [
            {"subresource": "status", "responseKind": kind, "verbs": ["get", "patch", "update"]}
        ]
    return entry


def aggregated(registry: Registry, core: bool) -> dict[str, Any]:
    """apidiscovery.k8s.io/v2 APIGroupDiscoveryList for `/api` (core) or `/apis` (all named groups)."""
    items = []
    for group, versions in registry.groups().items():
        if bool(group) == core:
            continue
        items.append(
            {
                "metadata": {"name": group} if group else {},
                "versions": [
                    {
                        "version": v,
                        "freshness": "Current",
                        "resources": [
                            _aggregated_resource(t)
                            for t in sorted(registry, key=lambda t: t.plural)
                            if t.group == group and t.version == v
                        ],
                    }
                    for v in versions
                ],
            }
        )
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    }


def wants_aggregated(accept: str) -> bool:
    for part in accept.split(","):
        params = {
            p.split("=", 1)[0].strip(): p.split("=", 1)[1].strip() for p in part.split(";")[1:] if "=" in p
        }
        if (
            params.get("g") == "apidiscovery.k8s.io"
            and params.get("v") == "v2"
            and params.get("as") == "APIGroupDiscoveryList"
        ):
            return True
    return False


# ----- OpenAPI v3 -----


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _schema_name(t: ResourceType) -> str:
    if t.custom:
        return ".".join(reversed(t.group.split("."))) + f".{t.version}.{t.kind}"
    pkg = {
        "": "core",
        "apps": "apps",
        "batch": "batch",
        "coordination.k8s.io": "coordination",
        "events.k8s.io": "events",
        "apiextensions.k8s.io": "apiextensions",
    }.get(t.group, t.group)
    prefix = "io.k8s.apiextensions-apiserver.pkg.apis" if pkg == "apiextensions" else "io.k8s.api"
    return f"{prefix}.{pkg}.{t.version}.{t.kind}"


def _object_meta() -> dict[str, Any]:
    fields = (
        "annotations",
        "creationTimestamp",
        "deletionGracePeriodSeconds",
        "deletionTimestamp",
        "finalizers",
        "generateName",
        "generation",
        "labels",
        "managedFields",
        "name",
        "namespace",
        "ownerReferences",
        "resourceVersion",
        "selfLink",
        "uid",
    )
    return {
        "description": "ObjectMeta is metadata that all persisted resources must have.",
        "type": "object",
        "properties": {f: {"x-kubernetes-preserve-unknown-fields": True} for f in fields},
    }


def _kind_schema(t: ResourceType) -> dict[str, Any]:
    if t.custom and t.schema:
        body = copy.deepcopy(t.schema)
    else:
        body = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    props = body.setdefault("properties", {})
    props["apiVersion"] = {
        "type": "string",
        "description": "APIVersion defines the versioned schema of this representation of an object.",
    }
    props["kind"] = {
        "type": "string",
        "description": "Kind is a string value representing the REST resource this object represents.",
    }
    props["metadata"] = {
        "allOf": [{"$ref": f"#/components/schemas/{OBJECT_META}"}],
        "description": "Standard object's metadata.",
    }
    body["x-kubernetes-group-version-kind"] = [{"group": t.group, "version": t.version, "kind": t.kind}]
    return body


def _operation(t: ResourceType, action: str, op_id: str) -> dict[str, Any]:
    params = [
        {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
        {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
    ]
    if action in ("patch", "put", "post"):
        params.append(
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}}
        )
    ref = {"$ref": f"#/components/schemas/{_schema_name(t)}"}
    return {
        "operationId": op_id,
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": t.group, "version": t.version, "kind": t.kind},
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}},
    }


def openapi_document(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = [t for t in registry if t.group == group and t.version == version]
    if not types:
        return None
    schemas: dict[str, Any] = {OBJECT_META: _object_meta()}
    paths: dict[str, Any] = {}
    base = "/" + _gv_path(group, version)
    for t in types:
        schemas[_schema_name(t)] = _kind_schema(t)
        schemas[_schema_name(t) + "List"] = {
            "type": "object",
            "properties": {
                "items": {"type": "array", "items": {"$ref": f"#/components/schemas/{_schema_name(t)}"}}
            },
            "x-kubernetes-group-version-kind": [
                {"group": t.group, "version": t.version, "kind": t.list_kind}
            ],
        }
        collection = f"{base}/namespaces/{{namespace}}/{t.plural}" if t.namespaced else f"{base}/{t.plural}"
        item = f"{collection}/{{name}}"
        op = f"{t.kind}{t.version}"
        paths[collection] = {
            "get": _operation(t, "list", f"list{op}"),
            "post": _operation(t, "post", f"create{op}"),
        }
        paths[item] = {
            "get": _operation(t, "get", f"read{op}"),
            "put": _operation(t, "put", f"replace{op}"),
            "patch": _operation(t, "patch", f"patch{op}"),
            "delete": _operation(t, "delete", f"delete{op}"),
        }
        if t.status_subresource:
            paths[f"{item}/status"] = {
                "get": _operation(t, "get", f"read{op}Status"),
                "put": _operation(t, "put", f"replace{op}Status"),
                "patch": _operation(t, "patch", f"patch{op}Status"),
            }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": VERSION["gitVersion"]},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def openapi_root(registry: Registry) -> dict[str, Any]:
    paths = {}
    for group, versions in registry.groups().items():
        for version in versions:
            doc = openapi_document(registry, group, version)
            digest = hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32].upper()
            path = _gv_path(group, version)
            paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": paths}
