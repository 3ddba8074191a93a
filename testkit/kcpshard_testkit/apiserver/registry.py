"""The served resource types: built-in kinds and the ones CustomResourceDefinitions add.

Each type carries its discovery facts as a KMock `ResourceInfo` keyed by a KMock `resource`
(group, version, plural): KMock's own discovery model, extended here with what KMock lacks
(status subresource flag, OpenAPI schema, printer columns, field selectors, storage sharing).
The CRD -> type mapping imitates
k8s.io/apiextensions-apiserver/pkg/apiserver/customresource_discovery_controller.go.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import kmock

VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
STATUS_VERBS = ("get", "patch", "update")
COMMON_FIELDS = ("metadata.name", "metadata.namespace")

StorageKey = tuple[str, str]  # (group, plural): versions of one resource share one store


@dataclass
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = VERBS
    status_subresource: bool = False
    schema: dict[str, Any] | None = None  # openAPIV3Schema of a custom resource
    printer_columns: list[dict[str, Any]] | None = None  # additionalPrinterColumns of a custom resource
    field_selectors: tuple[str, ...] = COMMON_FIELDS
    storage: StorageKey | None = None  # another resource whose store this one shares (events)
    custom: bool = False
    preserve_unknown: bool = False  # whole-object x-kubernetes-preserve-unknown-fields

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def storage_key(self) -> StorageKey:
        return self.storage or (self.group, self.plural)

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def ref(self) -> kmock.resource:
        return kmock.resource(self.group, self.version, self.plural)

    @property
    def info(self) -> kmock.ResourceInfo:
        return kmock.ResourceInfo(
            namespaced=self.namespaced,
            kind=self.kind,
            singular=self.singular,
            verbs=set(self.verbs),
            shortnames=set(self.short_names),
            categories=set(self.categories),
            subresources={"status"} if self.status_subresource else set(),
        )


def _builtin(
    group: str, version: str, plural: str, kind: str, namespaced: bool = True, **kwargs: Any
) -> ResourceType:
    return ResourceType(
        group=group,
        version=version,
        plural=plural,
        kind=kind,
        singular=kind.lower(),
        namespaced=namespaced,
        **kwargs,
    )


_INVOLVED = ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
EVENT_FIELDS = (
    *COMMON_FIELDS,
    *(f"involvedObject.{f}" for f in _INVOLVED),
    "reason",
    "reportingComponent",
    "source",
    "type",
)

POD_FIELDS = (
    *COMMON_FIELDS,
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)


def builtin_types() -> list[ResourceType]:
    """The built-in kinds this emulator serves (a small subset of a real cluster)."""
    return [
        _builtin(
            "",
            "v1",
            "namespaces",
            "Namespace",
            namespaced=False,
            short_names=("ns",),
            field_selectors=("metadata.name", "status.phase"),
        ),
        _builtin("", "v1", "secrets", "Secret", field_selectors=(*COMMON_FIELDS, "type")),
        _builtin("", "v1", "configmaps", "ConfigMap", short_names=("cm",)),
        _builtin("", "v1", "events", "Event", short_names=("ev",), field_selectors=EVENT_FIELDS),
        _builtin(
            "",
            "v1",
            "pods",
            "Pod",
            short_names=("po",),
            categories=("all",),
            status_subresource=True,
            field_selectors=POD_FIELDS,
        ),
        _builtin("", "v1", "serviceaccounts", "ServiceAccount", short_names=("sa",)),
        _builtin(
            "events.k8s.io",
            "v1",
            "events",
            "Event",
            short_names=("ev",),
            storage=("", "events"),
            field_selectors=EVENT_FIELDS,
        ),
        _builtin(
            "batch",
            "v1",
            "jobs",
            "Job",
            categories=("all",),
            status_subresource=True,
            field_selectors=(*COMMON_FIELDS, "status.successful"),
        ),
        _builtin(
            "apps",
            "v1",
            "deployments",
            "Deployment",
            short_names=("deploy",),
            categories=("all",),
            status_subresource=True,
        ),
        _builtin("coordination.k8s.io", "v1", "leases", "Lease"),
        # The operator makes each shard's agent identity; the emulated server stores RBAC, never enforces it.
        _builtin("rbac.authorization.k8s.io", "v1", "roles", "Role"),
        _builtin("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
        _builtin("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", short_names=("pdb",)),
        _builtin(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            namespaced=False,
            short_names=("crd", "crds"),
            categories=("api-extensions",),
            status_subresource=True,
        ),
    ]


def types_from_crd(crd: dict[str, Any]) -> list[ResourceType]:
    """One ResourceType per served version of a CRD (apiextensions.k8s.io/v1)."""
    spec = crd.get("spec", {})
    names = spec.get("names", {})
    group = spec["group"]
    result = []
    for ver in spec.get("versions", []):
        if not ver.get("served", True):
            continue
        schema = (ver.get("schema") or {}).get("openAPIV3Schema")
        selectable = tuple(s["jsonPath"].lstrip(".") for s in ver.get("selectableFields", []) or [])
        result.append(
            ResourceType(
                group=group,
                version=ver["name"],
                plural=names["plural"],
                kind=names["kind"],
                singular=names.get("singular") or names["kind"].lower(),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                short_names=tuple(names.get("shortNames", []) or []),
                categories=tuple(names.get("categories", []) or []),
                status_subresource="status" in (ver.get("subresources") or {}),
                schema=schema,
                printer_columns=list(ver.get("additionalPrinterColumns") or []),
                field_selectors=COMMON_FIELDS + selectable,
                custom=True,
                preserve_unknown=bool((schema or {}).get("x-kubernetes-preserve-unknown-fields")),
            )
        )
    return result


def storage_version(crd: dict[str, Any]) -> str:
    for ver in crd.get("spec", {}).get("versions", []):
        if ver.get("storage"):
            return str(ver["name"])
    return str(crd["spec"]["versions"][0]["name"])


@dataclass
class Registry:
    """All served types, looked up by (group, version, plural) or by storage key."""

    types: dict[kmock.resource, ResourceType] = field(default_factory=dict)

    def add(self, rt: ResourceType) -> None:
        self.types[rt.ref] = rt

    def remove_group_resource(self, group: str, plural: str) -> None:
        for ref in [r for r, t in self.types.items() if t.group == group and t.plural == plural]:
            del self.types[ref]

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self.types.get(kmock.resource(group, version, plural))

    def __iter__(self) -> Iterator[ResourceType]:
        return iter(list(self.types.values()))

    def for_storage(self, key: StorageKey) -> list[ResourceType]:
        return [t for t in self if t.storage_key == key]

    def primary(self, key: StorageKey) -> ResourceType | None:
        """The type whose own group/plural is the storage key (e.g. core v1 events, a CRD's first version)."""
        for t in self:
            if (t.group, t.plural) == key and t.storage is None:
                return t
        return None

    def groups(self) -> dict[str, list[str]]:
        """group -> served versions, in registration order (the first is preferred)."""
        out: dict[str, list[str]] = {}
        for t in self:
            versions = out.setdefault(t.group, [])
            if t.version not in versions:
                versions.append(t.version)
        return out
