"""Structural OpenAPI v3 schemas of CRDs: pruning, defaulting and validation.

Imitates k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning/algorithm.go (prune unknown fields),
.../schema/defaulting/algorithm.go (apply `default`), and .../apiserver/validation/validation.go, which
turns kube-openapi's validate errors into field.ErrorList; messages are worded as
k8s.io/apimachinery/pkg/util/validation/field/errors.go renders them. `x-kubernetes-validations` (CEL)
is not evaluated; a schema that has rules only adds the error the real server adds when a blocking
schema error stops it from evaluating them (`cel_skipped`).
"""

from __future__ import annotations

import copy
import json
import re
from datetime import datetime
from typing import Any

from .errors import Cause

_ROOT_KEEP = ("apiVersion", "kind", "metadata")
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


def render_value(value: Any) -> str:
    """A bad value as field.Error prints it: strings quoted, numbers bare, null as `null`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value) if isinstance(value, float) and not value.is_integer() else str(int(value))
    if value is None:
        return "null"
    return json.dumps(value)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def prune(obj: Any, schema: dict[str, Any] | None, root: bool = True) -> None:
    """Drop fields the schema does not declare (in place), unless x-kubernetes-preserve-unknown-fields."""
    if schema is None or not isinstance(obj, dict | list):
        return
    if isinstance(obj, list):
        for item in obj:
            prune(item, schema.get("items"), root=False)
        return
    props: dict[str, Any] = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
    for key in list(obj):
        if root and key in _ROOT_KEEP:
            continue  # apiVersion, kind and metadata are never pruned by the schema
        if key in props:
            prune(obj[key], props[key], root=False)
        elif isinstance(additional, dict):
            prune(obj[key], additional, root=False)
        elif not (preserve or additional is True):
            del obj[key]


def apply_defaults(obj: Any, schema: dict[str, Any] | None) -> None:
    """Set `default` values of absent (or null, when not nullable) properties, recursively, in place."""
    if schema is None:
        return
    if isinstance(obj, list):
        for item in obj:
            apply_defaults(item, schema.get("items"))
        return
    if not isinstance(obj, dict):
        return
    for key, sub in (schema.get("properties") or {}).items():
        if key in obj and obj[key] is None and not sub.get("nullable"):
            del obj[key]  # null on a non-nullable field is pruned, then defaulted
        if key not in obj and "default" in sub:
            obj[key] = copy.deepcopy(sub["default"])
        if key in obj:
            apply_defaults(obj[key], sub)
    additional = schema.get("additionalProperties")
    if isinstance(additional, dict):
        for key in obj:
            if key not in (schema.get("properties") or {}):
                apply_defaults(obj[key], additional)


def _check_format(fmt: str, value: Any) -> bool:
    if fmt == "int32" and isinstance(value, int):
        return _INT32[0] <= value <= _INT32[1]
    if fmt == "int64" and isinstance(value, int):
        return _INT64[0] <= value <= _INT64[1]
    if fmt in ("date-time", "datetime") and isinstance(value, str):
        try:  # lenient: RFC 3339 with `Z` or an offset, fractional seconds allowed
            datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            return False
        return True
    if fmt == "date" and isinstance(value, str):
        return bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", value))
    return True


def _type_ok(expected: str, value: Any) -> bool:
    match expected:
        case "string":
            return isinstance(value, str)
        case "integer":
            return (isinstance(value, int) and not isinstance(value, bool)) or (
                isinstance(value, float) and value.is_integer()
            )
        case "number":
            return isinstance(value, int | float) and not isinstance(value, bool)
        case "boolean":
            return isinstance(value, bool)
        case "object":
            return isinstance(value, dict)
        case "array":
            return isinstance(value, list)
    return True


def validate(obj: Any, schema: dict[str, Any] | None, path: str = "") -> list[Cause]:
    """All violations of `schema` by `obj`, as field causes (path like `spec.front.port`)."""
    if schema is None:
        return []
    errors: list[Cause] = []
    if obj is None:
        if schema.get("nullable") or not schema.get("type"):
            return []
        return [
            Cause(
                "FieldValueTypeInvalid",
                f'Invalid value: "null": {path} in body must be of type {schema["type"]}: "null"',
                path,
            )
        ]
    expected = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        if not (isinstance(obj, str) or _type_ok("integer", obj)):
            errors.append(
                Cause(
                    "FieldValueTypeInvalid",
                    f'Invalid value: "{_type_name(obj)}": {path} in body '
                    f'must be of type integer-or-string: "{_type_name(obj)}"',
                    path,
                )
            )
            return errors
    elif expected and not _type_ok(expected, obj):
        return [
            Cause(
                "FieldValueTypeInvalid",
                # kube-openapi's InvalidType names the type found as the value, not the value itself.
                f'Invalid value: "{_type_name(obj)}": {path} in body must be of '
                f'type {expected}: "{_type_name(obj)}"',
                path,
            )
        ]

    def invalid(detail: str) -> None:
        errors.append(
            Cause("FieldValueInvalid", f"Invalid value: {render_value(obj)}: {path} in body {detail}", path)
        )

    if "enum" in schema and obj not in schema["enum"]:
        supported = ", ".join(render_value(v) for v in schema["enum"])
        errors.append(
            Cause(
                "FieldValueNotSupported",
                f"Unsupported value: {render_value(obj)}: supported values: {supported}",
                path,
            )
        )
    if isinstance(obj, int | float) and not isinstance(obj, bool):
        if "maximum" in schema:
            if schema.get("exclusiveMaximum") and obj >= schema["maximum"]:
                invalid(f"should be less than {render_value(schema['maximum'])}")
            elif obj > schema["maximum"]:
                invalid(f"should be less than or equal to {render_value(schema['maximum'])}")
        if "minimum" in schema:
            if schema.get("exclusiveMinimum") and obj <= schema["minimum"]:
                invalid(f"should be greater than {render_value(schema['minimum'])}")
            elif obj < schema["minimum"]:
                invalid(f"should be greater than or equal to {render_value(schema['minimum'])}")
        if "multipleOf" in schema and obj % schema["multipleOf"]:
            invalid(f"should be a multiple of {render_value(schema['multipleOf'])}")
    if isinstance(obj, str):
        if "maxLength" in schema and len(obj) > schema["maxLength"]:
            errors.append(
                Cause(
                    "FieldValueTooLong", f"Too long: may not be more than {schema['maxLength']} bytes", path
                )
            )
        if "minLength" in schema and len(obj) < schema["minLength"]:
            invalid(f"should be at least {schema['minLength']} chars long")
        if "pattern" in schema and not re.search(schema["pattern"], obj):
            invalid(f"should match '{schema['pattern']}'")
    if "format" in schema and not _check_format(schema["format"], obj):
        errors.append(
            Cause(
                "FieldValueTypeInvalid",
                f"Invalid value: {render_value(obj)}: {path} in body must be "
                f"of type {schema['format']}: {json.dumps(obj if isinstance(obj, str) else str(obj))}",
                path,
            )
        )
    if isinstance(obj, list):
        if "maxItems" in schema and len(obj) > schema["maxItems"]:
            errors.append(
                Cause(
                    "FieldValueTooMany",
                    f"Too many: {len(obj)}: must have at most {schema['maxItems']} items",
                    path,
                )
            )
        if "minItems" in schema and len(obj) < schema["minItems"]:
            invalid(f"should have at least {schema['minItems']} items")
        if schema.get("uniqueItems") and len({json.dumps(x, sort_keys=True) for x in obj}) != len(obj):
            errors.append(Cause("FieldValueDuplicate", f"Duplicate value: {render_value(obj)}", path))
        for i, item in enumerate(obj):
            errors += validate(item, schema.get("items"), f"{path}[{i}]")
    if isinstance(obj, dict):
        for key in schema.get("required") or []:
            if key not in obj:
                errors.append(Cause("FieldValueRequired", "Required value", _join(path, key)))
        props = schema.get("properties") or {}
        for key, sub in props.items():
            if key in obj and not (path == "" and key == "metadata"):
                errors += validate(obj[key], sub, _join(path, key))
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):
            for key, value in obj.items():
                if key not in props:
                    errors += validate(value, additional, f"{path}[{key}]" if path else key)
        if "maxProperties" in schema and len(obj) > schema["maxProperties"]:
            errors.append(
                Cause(
                    "FieldValueTooMany",
                    f"Too many: {len(obj)}: must have at most {schema['maxProperties']} items",
                    path,
                )
            )
        if "minProperties" in schema and len(obj) < schema["minProperties"]:
            invalid(f"should have at least {schema['minProperties']} properties")
    for sub in schema.get("allOf") or []:
        errors += validate(obj, sub, path)
    if schema.get("anyOf") and all(validate(obj, sub, path) for sub in schema["anyOf"]):
        invalid("must validate at least one schema (anyOf)")
    if schema.get("oneOf") and sum(not validate(obj, sub, path) for sub in schema["oneOf"]) != 1:
        invalid("must validate one and only one schema (oneOf)")
    return errors


# apiextensions-apiserver/pkg/registry/customresource/strategy.go, hasBlockingErr: these error types
# stop CEL rules from running, and the server says so with one more error on no field.
_BLOCKING = {
    "FieldValueNotSupported",
    "FieldValueRequired",
    "FieldValueTooLong",
    "FieldValueTooMany",
    "FieldValueTypeInvalid",
}
CEL_SKIPPED = Cause(
    "FieldValueInvalid",
    "Invalid value: null: some validation rules were not checked because the object was invalid; "
    "correct the existing errors to complete validation",
    "<nil>",
)


def has_cel_rules(schema: Any) -> bool:
    """True when any level of the schema carries `x-kubernetes-validations`."""
    if isinstance(schema, dict):
        return bool(schema.get("x-kubernetes-validations")) or any(has_cel_rules(v) for v in schema.values())
    if isinstance(schema, list):
        return any(has_cel_rules(v) for v in schema)
    return False


def cel_skipped(causes: list[Cause], schema: dict[str, Any] | None) -> list[Cause]:
    """The causes plus the real server's note when its CEL rules could not run."""
    if has_cel_rules(schema) and any(c.reason in _BLOCKING for c in causes):
        return [*causes, CEL_SKIPPED]
    return causes


def unknown_fields(obj: Any, schema: dict[str, Any] | None) -> list[str]:
    """Paths pruning would drop (for fieldValidation=Strict/Warn), like `.spec.foo`."""
    pruned = copy.deepcopy(obj)
    prune(pruned, schema)
    found: list[str] = []

    def walk(a: Any, b: Any, path: str) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for key in a:
                if key not in b:
                    found.append(f"{path}.{key}")
                else:
                    walk(a[key], b[key], f"{path}.{key}")
        elif isinstance(a, list) and isinstance(b, list):
            for i, (x, y) in enumerate(zip(a, b, strict=False)):
                walk(x, y, f"{path}[{i}]")

    walk(obj, pruned, "")
    return found
