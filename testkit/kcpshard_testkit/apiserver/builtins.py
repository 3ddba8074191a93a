"""Per-kind behavior of the built-in kinds: defaults on create, a few validations, Event conversion.

Imitates the registry strategies in k8s.io/kubernetes/pkg/registry/* (PrepareForCreate, Validate) and the
defaulters in k8s.io/kubernetes/pkg/apis/*/v1/defaults.go, only as far as operators notice them.
The events.k8s.io/v1 <-> core/v1 mapping imitates k8s.io/kubernetes/pkg/apis/events/v1/conversion.go.
"""

from __future__ import annotations

import base64
from typing import Any

from .errors import Cause, invalid
from .registry import ResourceType

# events.k8s.io/v1 field -> core/v1 field
_EVENT_FIELDS = {
    "regarding": "involvedObject",
    "note": "message",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
    "reportingController": "reportingComponent",
}
EVENT_FIELD_ALIASES = {
    f"regarding.{k}": f"involvedObject.{k}"
    for k in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
}
EVENT_FIELD_ALIASES["reportingController"] = "reportingComponent"


def to_storage(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """Convert a request body of `rt` into the stored (core/v1 for events) form."""
    if rt.group == "events.k8s.io":
        out = {_EVENT_FIELDS.get(k, k): v for k, v in obj.items()}
        out["apiVersion"] = "v1"
        return out
    return obj


def from_storage(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """Present a stored object as `rt` (another version of a CR, or an events.k8s.io Event)."""
    if rt.group == "events.k8s.io":
        back = {v: k for k, v in _EVENT_FIELDS.items()}
        out = {back.get(k, k): v for k, v in obj.items()}
        out["apiVersion"] = rt.api_version
        return out
    if obj.get("apiVersion") != rt.api_version:
        obj = dict(obj)
        obj["apiVersion"] = rt.api_version
    return obj


def _required(rt: ResourceType, obj: dict[str, Any], path: str, message: str = "Required value") -> Cause:
    return Cause("FieldValueRequired", message, path)


def _raise(rt: ResourceType, obj: dict[str, Any], causes: list[Cause]) -> None:
    if causes:
        raise invalid(rt.kind, rt.group, obj.get("metadata", {}).get("name", ""), causes)


def _encode_string_data(obj: dict[str, Any]) -> None:
    string_data = obj.pop("stringData", None) or {}
    if string_data:
        data = dict(obj.get("data") or {})
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        obj["data"] = data


def _default_pod_spec(spec: dict[str, Any], restart_policy: str = "Always") -> None:
    spec.setdefault("restartPolicy", restart_policy)
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    for container in spec.get("containers") or []:
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        image = str(container.get("image", ""))
        latest = ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")
        container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
        container.setdefault("resources", {})


def _validate_pod_spec(spec: dict[str, Any], path: str) -> list[Cause]:
    causes = []
    containers = spec.get("containers")
    if not containers:
        causes.append(Cause("FieldValueRequired", "Required value", f"{path}.containers"))
    for i, container in enumerate(containers or []):
        if not container.get("name"):
            causes.append(Cause("FieldValueRequired", "Required value", f"{path}.containers[{i}].name"))
    return causes


def admit_create(rt: ResourceType, obj: dict[str, Any]) -> None:
    """Defaults and validation of a new built-in object (metadata already set, uid included)."""
    meta = obj["metadata"]
    key = (rt.group, rt.plural)
    if key == ("", "namespaces"):
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
    elif key == ("", "secrets"):
        obj.setdefault("type", "Opaque")
        _encode_string_data(obj)
    elif key == ("", "pods"):
        spec = obj.setdefault("spec", {})
        _raise(rt, obj, _validate_pod_spec(spec, "spec"))
        _default_pod_spec(spec)
        obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    elif key == ("batch", "jobs"):
        _admit_job(rt, obj)
    elif key == ("apps", "deployments"):
        _admit_deployment(rt, obj)


def admit_update(rt: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> None:
    key = (rt.group, rt.plural)
    if key == ("", "secrets"):
        _encode_string_data(new)
    elif key == ("", "namespaces"):
        new["spec"] = old.get("spec", {})
        new["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = new["metadata"]["name"]


def _admit_job(rt: ResourceType, obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    template = spec.setdefault("template", {})
    pod_spec = template.setdefault("spec", {})
    causes = _validate_pod_spec(pod_spec, "spec.template.spec")
    if pod_spec.get("restartPolicy") not in ("OnFailure", "Never"):
        causes.append(
            Cause(
                "FieldValueRequired",
                'Required value: valid values: "OnFailure", "Never"',
                "spec.template.spec.restartPolicy",
            )
        )
    _raise(rt, obj, causes)
    uid, name = obj["metadata"]["uid"], obj["metadata"]["name"]
    labels = {
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": name,
        "controller-uid": uid,
        "job-name": name,
    }
    if not spec.get("manualSelector"):
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        template.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    spec.setdefault("parallelism", 1)
    spec.setdefault("completions", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    obj["metadata"].setdefault("labels", {}).update(
        {
            k: v
            for k, v in labels.items()
            if k
            in (
                "batch.kubernetes.io/controller-uid",
                "batch.kubernetes.io/job-name",
                "controller-uid",
                "job-name",
            )
        }
    )
    _default_pod_spec(pod_spec, pod_spec.get("restartPolicy", "Never"))
    obj["status"] = {}


def _admit_deployment(rt: ResourceType, obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    template = spec.setdefault("template", {})
    causes = _validate_pod_spec(template.setdefault("spec", {}), "spec.template.spec")
    selector = spec.get("selector")
    if not selector:
        causes.append(Cause("FieldValueRequired", "Required value", "spec.selector"))
    else:
        from .selectors import LabelSelector

        labels = (template.get("metadata") or {}).get("labels") or {}
        if not LabelSelector.from_match(selector).matches(labels):
            causes.append(
                Cause(
                    "FieldValueInvalid",
                    f"Invalid value: {labels!r}: `selector` does not match template `labels`",
                    "spec.template.metadata.labels",
                )
            )
    _raise(rt, obj, causes)
    spec.setdefault("replicas", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    spec.setdefault(
        "strategy", {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}
    )
    _default_pod_spec(template["spec"])
    obj["status"] = {}


def default_propagation(rt: ResourceType) -> str:
    """What DELETE does to dependents when the request names no propagationPolicy.

    batch/v1 Jobs still orphan their Pods by default (registry/batch/job/strategy.go
    DefaultGarbageCollectionPolicy); everything else here deletes them in the background.
    """
    return "Orphan" if (rt.group, rt.plural) == ("batch", "jobs") else "Background"


# Groups whose registry strategies set metadata.generation (PrepareForCreate/Update); ConfigMaps,
# Secrets, Leases, Events, Services, Nodes and Namespaces carry none (checked against kube-apiserver
# v1.37 by tests/process/test_apiserver_differential.py).
_GENERATION_GROUPS = frozenset({"apps", "batch", "policy", "networking.k8s.io", "apiextensions.k8s.io"})


def tracks_generation(rt: ResourceType) -> bool:
    """Whether objects of this type carry metadata.generation (custom resources always do)."""
    return rt.custom or rt.group in _GENERATION_GROUPS or (rt.group, rt.plural) == ("", "pods")


# map[string]string fields of the built-in kinds here: a non-string value cannot be decoded into the
# typed object, so kube-apiserver refuses it (a patch with 422 Invalid, from its patcher's decode).
_STRING_MAPS: dict[tuple[str, str], tuple[tuple[str, str], ...]] = {
    ("", "configmaps"): (("data", "ConfigMap.data"),),
    ("", "secrets"): (("stringData", "Secret.stringData"),),
}


def decode_error(rt: ResourceType, obj: dict[str, Any]) -> str | None:
    """The Go decoder's complaint about a value of the wrong type in a string map, or None."""
    meta = obj.get("metadata") or {}
    fields = [(meta.get("labels"), "ObjectMeta.labels"), (meta.get("annotations"), "ObjectMeta.annotations")]
    fields += [(obj.get(key), go_name) for key, go_name in _STRING_MAPS.get((rt.group, rt.plural), ())]
    for value, go_name in fields:
        for item in (value or {}).values() if isinstance(value, dict) else ():
            if item is not None and not isinstance(item, str):
                found = "number" if isinstance(item, int | float) else type(item).__name__
                return f"json: cannot unmarshal {found} into Go struct field {go_name} of type string"
    return None
