"""Generate the CustomResourceDefinitions from the pydantic models.

Kubernetes wants a *structural* OpenAPI v3 schema: no `$ref`, no `anyOf` with null
(use `nullable`), a `type` on every node. Pydantic emits JSON Schema, so this module
inlines references and rewrites the few constructs that differ.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from kcpshard.api.models import (
    GROUP,
    SHARD_NAME_RULE,
    VERSION,
    KcpShardSpec,
    KcpShardStatus,
    KcpSlotSpec,
    KcpSlotStatus,
)

_DROP_KEYS = {"title"}

# `kubectl get kcp` lists both kinds.
CATEGORY = "kcp"


def _condition_column(name: str, cond: str, priority: int = 0, field: str = "status") -> dict[str, Any]:
    column: dict[str, Any] = {
        "name": name,
        "type": "string",
        "jsonPath": f'.status.conditions[?(@.type=="{cond}")].{field}',
    }
    if priority:
        column["priority"] = priority
    return column


def _structural(node: Any, defs: dict[str, Any], *, keep_defaults: bool) -> Any:
    """Inline `$ref`s and turn pydantic's JSON Schema into a structural schema."""
    if isinstance(node, list):
        return [_structural(item, defs, keep_defaults=keep_defaults) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(merged, defs, keep_defaults=keep_defaults)
    any_of = node.get("anyOf")
    if any_of is not None:
        non_null = [option for option in any_of if option.get("type") != "null"]
        if len(non_null) != 1:
            raise ValueError(f"cannot express a union in a structural schema: {any_of}")
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        merged = {**non_null[0], **rest}
        if len(non_null) < len(any_of):
            merged["nullable"] = True
        if merged.get("default", "absent") is None:
            del merged["default"]
        return _structural(merged, defs, keep_defaults=keep_defaults)
    out: dict[str, Any] = {}
    if node.get("x-kubernetes-preserve-unknown-fields"):
        # A free-form object: structural schemas say so with this marker, not `additionalProperties: true`.
        node = {k: v for k, v in node.items() if k != "additionalProperties"}
    for key, value in node.items():
        if key in _DROP_KEYS or key == "$defs":
            continue
        if key == "default" and not keep_defaults:
            continue
        if key == "properties":
            out[key] = {name: _structural(v, defs, keep_defaults=keep_defaults) for name, v in value.items()}
        elif key in {"items", "additionalProperties"} and isinstance(value, dict):
            out[key] = _structural(value, defs, keep_defaults=keep_defaults)
        else:
            out[key] = value
    # `type` first: easier to read in the generated YAML.
    out = dict(sorted(out.items(), key=lambda item: item[0] != "type"))
    if out.get("type") == "object" and "properties" in out:
        # Nested objects built by default_factory get `default: {}` so the API server
        # applies the defaults of their fields, as users expect from `roll: {}` being absent.
        for name, prop in out["properties"].items():
            if (
                keep_defaults
                and prop.get("type") == "object"
                and "properties" in prop
                and not prop.get("nullable")
                and name not in out.get("required", [])
            ):
                prop.setdefault("default", {})
    return out


def schema_of(model: type[BaseModel], *, keep_defaults: bool) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return _structural(raw, raw.get("$defs", {}), keep_defaults=keep_defaults)


def _crd(
    *,
    kind: str,
    plural: str,
    short: str,
    spec: type[BaseModel],
    status: type[BaseModel],
    columns: list[dict[str, Any]],
    rules: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": schema_of(spec, keep_defaults=True),
            "status": schema_of(status, keep_defaults=False),
        },
    }
    if rules:
        schema["x-kubernetes-validations"] = rules
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": [short],
                # Not a resource name: kubectl expands a category before it looks up a name, so a
                # category `kcpshard` (the singular of KcpShard) made `kubectl get kcpshard root` fail.
                "categories": [CATEGORY],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def kcpshard_crd() -> dict[str, Any]:
    return _crd(
        kind="KcpShard",
        plural="kcpshards",
        short="kshard",
        spec=KcpShardSpec,
        status=KcpShardStatus,
        columns=[
            _condition_column("Ready", "Ready"),
            {"name": "Active", "type": "string", "jsonPath": ".status.activeSlot"},
            {"name": "Revision", "type": "string", "jsonPath": ".status.activeRevision"},
            {"name": "Step", "type": "string", "jsonPath": ".status.rollout.step"},
            {"name": "Version", "type": "string", "jsonPath": ".spec.kcp.version", "priority": 1},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            _condition_column("Message", "Ready", priority=1, field="message"),
        ],
        rules=[SHARD_NAME_RULE],
    )


def kcpslot_crd() -> dict[str, Any]:
    return _crd(
        kind="KcpSlot",
        plural="kcpslots",
        short="kslot",
        spec=KcpSlotSpec,
        status=KcpSlotStatus,
        columns=[
            {"name": "Shard", "type": "string", "jsonPath": ".spec.shard"},
            {"name": "Slot", "type": "string", "jsonPath": ".spec.slot"},
            {"name": "Port", "type": "integer", "jsonPath": ".status.port"},
            _condition_column("Ready", "Ready"),
            _condition_column("Flipped", "Flipped"),
            _condition_column("Probed", "Probed"),
            {"name": "Revision", "type": "string", "jsonPath": ".spec.revision", "priority": 1},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    )


class _NoAliasDumper(yaml.SafeDumper):
    """Shared sub-schemas are written out in full: anchors would puzzle readers and some tools."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _dump(obj: dict[str, Any]) -> str:
    return yaml.dump(obj, Dumper=_NoAliasDumper, sort_keys=False, width=100)


def render() -> dict[str, str]:
    """File name -> YAML text of every CRD."""
    header = "# Generated from kcpshard.api.models by `kcpshard crds`; do not edit.\n"
    return {
        "kcpshards.yaml": header + _dump(kcpshard_crd()),
        "kcpslots.yaml": header + _dump(kcpslot_crd()),
    }


def write(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render().items():
        path = directory / name
        path.write_text(text)
        written.append(path)
    return written
