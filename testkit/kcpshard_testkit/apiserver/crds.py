"""CustomResourceDefinition admission: the checks and status of the apiextensions controllers.

Imitates k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation (name, versions) and the status
that the naming, establishing and finalizer controllers (pkg/controller/status, establish, finalizer) write:
NamesAccepted, Established, acceptedNames, storedVersions, and the `customresourcecleanup` finalizer.
"""

from __future__ import annotations

import datetime
from typing import Any

from .errors import Cause, invalid
from .registry import ResourceType, storage_version

FINALIZER = "customresourcecleanup.apiextensions.k8s.io"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def admit(rt: ResourceType, obj: dict[str, Any], keep_status: Any = None) -> None:
    """Validate a CRD, add the cleanup finalizer, and set the status the real controllers would."""
    spec = obj.get("spec") or {}
    names = spec.get("names") or {}
    name = obj["metadata"]["name"]
    causes = []
    for path, value in (
        ("spec.group", spec.get("group")),
        ("spec.names.plural", names.get("plural")),
        ("spec.names.kind", names.get("kind")),
        ("spec.versions", spec.get("versions")),
    ):
        if not value:
            causes.append(Cause("FieldValueRequired", "Required value", path))
    if not causes and name != f"{names['plural']}.{spec['group']}":
        causes.append(
            Cause(
                "FieldValueInvalid",
                f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group',
                "metadata.name",
            )
        )
    if not causes and sum(bool(v.get("storage")) for v in spec["versions"]) != 1:
        causes.append(
            Cause(
                "FieldValueInvalid",
                "Invalid value: []apiextensions.CustomResourceDefinitionVersion"
                "{...}: must have exactly one version marked as storage version",
                "spec.versions",
            )
        )
    if causes:
        raise invalid(rt.kind, rt.group, name, causes)
    if FINALIZER not in obj["metadata"].setdefault("finalizers", []) and not obj["metadata"].get(
        "deletionTimestamp"
    ):
        obj["metadata"]["finalizers"].append(FINALIZER)
    accepted = {
        **names,
        "listKind": names.get("listKind") or f"{names['kind']}List",
        "singular": names.get("singular") or names["kind"].lower(),
    }
    stamp = _now()
    if keep_status:
        old = keep_status.get("conditions") or []
        stamp = next((c.get("lastTransitionTime") for c in old if c.get("type") == "Established"), stamp)
    obj["status"] = {
        "acceptedNames": accepted,
        "storedVersions": [storage_version(obj)],
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
                "lastTransitionTime": stamp,
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
                "lastTransitionTime": stamp,
            },
        ],
    }
