"""`meta.k8s.io/v1 Table` output, as `kubectl get` asks for it.

Custom resources imitate k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor
(Name, then additionalPrinterColumns, or Age when there are none; `date` cells humanized).
Built-ins imitate a few printers of k8s.io/kubernetes/pkg/printers/internalversion/printers.go.
Ages use the rounding of k8s.io/apimachinery/pkg/util/duration.HumanDuration.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from kcpshard.k8s.duration import human_duration

from . import jsonpath
from .registry import ResourceType

NAME_DESCRIPTION = (
    "Name must be unique within a namespace. Is required when creating resources, although some "
    "resources may allow a client to request the generation of an appropriate name automatically. "
    "Name is primarily intended for creation idempotence and configuration definition. Cannot be "
    "updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
AGE_DESCRIPTION = (
    "CreationTimestamp is a timestamp representing the server time when this object was created."
)

Column = dict[str, Any]
Cells = Callable[[dict[str, Any]], list[Any]]


def age(timestamp: Any) -> str:
    if not isinstance(timestamp, str):
        return "<unknown>"
    try:
        moment = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "<invalid>"
    return human_duration((datetime.datetime.now(datetime.UTC) - moment).total_seconds())


def column(
    name: str, type_: str = "string", priority: int = 0, fmt: str = "", description: str = ""
) -> Column:
    return {
        "name": name,
        "type": type_,
        "format": fmt,
        "description": description or name,
        "priority": priority,
    }


NAME = column("Name", fmt="name", description=NAME_DESCRIPTION)
AGE = column("Age", description=AGE_DESCRIPTION)


def _custom_columns(rt: ResourceType) -> tuple[list[Column], Cells]:
    specs = rt.printer_columns or [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]
    columns = [NAME] + [
        column(
            c["name"],
            c.get("type", "string"),
            int(c.get("priority", 0)),
            c.get("format", ""),
            c.get("description", ""),
        )
        for c in specs
    ]

    def cells(obj: dict[str, Any]) -> list[Any]:
        row: list[Any] = [obj["metadata"]["name"]]
        for spec in specs:
            try:
                found = jsonpath.find(obj, spec["jsonPath"])
            except jsonpath.JSONPathError:
                found = []
            value = found[0] if found else None
            row.append(_cell(spec.get("type", "string"), value))
        return row

    return columns, cells


def _cell(type_: str, value: Any) -> Any:
    if value is None:
        return None
    if type_ == "string":
        return jsonpath.to_text(value)
    if type_ == "integer" and isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    if type_ == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return value
    if type_ == "boolean" and isinstance(value, bool):
        return value
    if type_ == "date" and isinstance(value, str):
        return age(value)
    return None


def _pod_cells(obj: dict[str, Any]) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount", 0)) for c in statuses)
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for c in statuses:
        state = c.get("state") or {}
        if state.get("waiting", {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif state.get("terminated", {}).get("reason"):
            reason = state["terminated"]["reason"]
    if obj["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    return [
        obj["metadata"]["name"],
        f"{ready}/{len(spec.get('containers') or [])}",
        reason,
        str(restarts),
        age(obj["metadata"].get("creationTimestamp")),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        "<none>",
    ]


def _job_status(status: dict[str, Any], spec: dict[str, Any]) -> str:
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    for kind in ("Complete", "Failed", "FailureTarget", "SuccessCriteriaMet", "Suspended"):
        if conditions.get(kind) == "True":
            return {"FailureTarget": "FailureTarget", "SuccessCriteriaMet": "SuccessCriteriaMet"}.get(
                kind, kind
            )
    if spec.get("suspend"):
        return "Suspended"
    return "Running"


def _containers(template: dict[str, Any]) -> tuple[str, str]:
    containers = (template.get("spec") or {}).get("containers") or []
    return ",".join(c.get("name", "") for c in containers), ",".join(c.get("image", "") for c in containers)


def _selector(spec: dict[str, Any]) -> str:
    labels = (spec.get("selector") or {}).get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in labels.items()) or "<none>"


def _job_cells(obj: dict[str, Any]) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    names, images = _containers(spec.get("template") or {})
    duration = ""
    if status.get("startTime"):
        start = datetime.datetime.fromisoformat(status["startTime"].replace("Z", "+00:00"))
        end_raw = status.get("completionTime")
        end = (
            datetime.datetime.fromisoformat(end_raw.replace("Z", "+00:00"))
            if end_raw
            else datetime.datetime.now(datetime.UTC)
        )
        duration = human_duration((end - start).total_seconds())
    return [
        obj["metadata"]["name"],
        _job_status(status, spec),
        f"{status.get('succeeded', 0)}/{spec.get('completions', 1)}",
        duration,
        age(obj["metadata"].get("creationTimestamp")),
        names,
        images,
        _selector(spec),
    ]


def _deployment_cells(obj: dict[str, Any]) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    names, images = _containers(spec.get("template") or {})
    return [
        obj["metadata"]["name"],
        f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 1)}",
        int(status.get("updatedReplicas", 0)),
        int(status.get("availableReplicas", 0)),
        age(obj["metadata"].get("creationTimestamp")),
        names,
        images,
        _selector(spec),
    ]


def _event_cells(obj: dict[str, Any]) -> list[Any]:
    involved = obj.get("involvedObject") or {}
    last = obj.get("lastTimestamp") or obj.get("eventTime") or obj["metadata"].get("creationTimestamp")
    source = obj.get("source") or {}
    return [
        age(last),
        obj.get("type", ""),
        obj.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        involved.get("fieldPath", ""),
        source.get("component") or obj.get("reportingComponent", ""),
        obj.get("message", ""),
        age(obj.get("firstTimestamp") or last),
        int(obj.get("count") or 1),
        obj["metadata"]["name"],
    ]


def _simple(*extra: tuple[Column, Callable[[dict[str, Any]], Any]]) -> tuple[list[Column], Cells]:
    columns = [NAME] + [c for c, _ in extra] + [AGE]

    def cells(obj: dict[str, Any]) -> list[Any]:
        return (
            [obj["metadata"]["name"]]
            + [f(obj) for _, f in extra]
            + [age(obj["metadata"].get("creationTimestamp"))]
        )

    return columns, cells


def _builtin_columns(rt: ResourceType) -> tuple[list[Column], Cells]:
    key = (rt.group, rt.plural)
    if key == ("", "pods"):
        cols = [
            NAME,
            column("Ready"),
            column("Status"),
            column("Restarts"),
            AGE,
            column("IP", priority=1),
            column("Node", priority=1),
            column("Nominated Node", priority=1),
            column("Readiness Gates", priority=1),
        ]
        return cols, _pod_cells
    if key == ("batch", "jobs"):
        cols = [
            NAME,
            column("Status"),
            column("Completions"),
            column("Duration"),
            AGE,
            column("Containers", priority=1),
            column("Images", priority=1),
            column("Selector", priority=1),
        ]
        return cols, _job_cells
    if key == ("apps", "deployments"):
        cols = [
            NAME,
            column("Ready"),
            column("Up-to-date", "integer"),
            column("Available", "integer"),
            AGE,
            column("Containers", priority=1),
            column("Images", priority=1),
            column("Selector", priority=1),
        ]
        return cols, _deployment_cells
    if rt.plural == "events":
        cols = [
            column("Last Seen"),
            column("Type"),
            column("Reason"),
            column("Object"),
            column("Subobject", priority=1),
            column("Source", priority=1),
            column("Message"),
            column("First Seen", priority=1),
            column("Count", "integer", priority=1),
            column("Name", priority=1),
        ]
        return cols, _event_cells
    if key == ("", "namespaces"):
        return _simple((column("Status"), lambda o: (o.get("status") or {}).get("phase", "")))
    if key == ("", "secrets"):
        return _simple(
            (column("Type"), lambda o: o.get("type", "")),
            (column("Data", "integer"), lambda o: len(o.get("data") or {})),
        )
    if key == ("", "configmaps"):
        return _simple(
            (column("Data", "integer"), lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {}))
        )
    if key == ("coordination.k8s.io", "leases"):
        return _simple((column("Holder"), lambda o: (o.get("spec") or {}).get("holderIdentity", "")))
    if key == ("apiextensions.k8s.io", "customresourcedefinitions"):
        return [NAME, column("Created At", "date")], lambda o: [
            o["metadata"]["name"],
            o["metadata"].get("creationTimestamp"),
        ]
    return _simple()


def columns_for(rt: ResourceType) -> tuple[list[Column], Cells]:
    return _custom_columns(rt) if rt.custom else _builtin_columns(rt)


def _row_object(obj: dict[str, Any], include: str) -> dict[str, Any] | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata", {}),
    }


def table(
    rt: ResourceType,
    objs: list[dict[str, Any]],
    resource_version: str,
    include: str = "Metadata",
    no_headers: bool = False,
) -> dict[str, Any]:
    columns, cells = columns_for(rt)
    rows = []
    for obj in objs:
        row: dict[str, Any] = {"cells": cells(obj)}
        embedded = _row_object(obj, include)
        if embedded is not None:
            row["object"] = embedded
        rows.append(row)
    result: dict[str, Any] = {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "rows": rows,
    }
    result["columnDefinitions"] = [] if no_headers else columns
    return result
