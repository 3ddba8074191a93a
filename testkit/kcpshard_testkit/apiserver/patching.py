"""Patch mechanics: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and a light strategic merge patch.

The real server applies these in k8s.io/apiserver/pkg/endpoints/handlers/patch.go with
github.com/evanphx/json-patch (merge and JSON patch) and k8s.io/apimachinery/pkg/util/strategicpatch.
Error texts follow evanphx/json-patch so a caller sees the same messages.
"""

from __future__ import annotations

import copy
from typing import Any

from .errors import ApiError, bad_request, unprocessable


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, `null` removes, anything else replaces (lists too)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# Lists of built-in kinds that strategic merge patch merges by a key instead of replacing
# (patchMergeKey tags in k8s.io/api); everything else behaves as in a merge patch.
_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "ownerReferences": "uid",
    "conditions": "type",
    "imagePullSecrets": "name",
    "tolerations": "key",
}
_SET_LISTS = {"finalizers"}  # primitive lists with patchStrategy=merge


def strategic_merge_patch(target: Any, patch: Any, key: str = "") -> Any:
    """A subset of strategic merge patch: keyed list merge for the usual lists, `$patch` directives,
    `$setElementOrder/...`, `$retainKeys` and `$deleteFromPrimitiveList/...` are honored or dropped."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    for k, value in patch.items():
        if k.startswith("$deleteFromPrimitiveList/"):
            name = k.split("/", 1)[1]
            result[name] = [x for x in result.get(name) or [] if x not in value]
            continue
        if k.startswith("$"):
            continue  # ordering and retain-keys directives: order is kept as stored
        if value is None:
            result.pop(k, None)
        elif isinstance(value, list) and k in _MERGE_KEYS and isinstance(result.get(k), list):
            result[k] = _merge_keyed_list(result[k], value, _MERGE_KEYS[k])
        elif isinstance(value, list) and k in _SET_LISTS and isinstance(result.get(k), list):
            result[k] = list(result[k]) + [x for x in value if x not in result[k]]
        else:
            merged = strategic_merge_patch(result.get(k), value, k)
            if merged is None:
                result.pop(k, None)
            else:
                result[k] = merged
    return result


def _merge_keyed_list(current: list[Any], patch: list[Any], merge_key: str) -> list[Any]:
    out = [copy.deepcopy(x) for x in current]
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            out.append(copy.deepcopy(item))
            continue
        idx = next(
            (i for i, x in enumerate(out) if isinstance(x, dict) and x.get(merge_key) == item[merge_key]),
            None,
        )
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
        elif idx is None:
            out.append({k: v for k, v in item.items() if not k.startswith("$")})
        else:
            out[idx] = strategic_merge_patch(out[idx], item)
    return out


def _decode_pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise unprocessable(f'JSON pointer must be empty or start with a "/": {path}')
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _container(doc: Any, parts: list[str], op: str, path: str) -> tuple[Any, str]:
    cur = doc
    for part in parts[:-1]:
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            raise unprocessable(
                f'{op} operation does not apply: doc is missing path: "{path}": missing value'
            )
    return cur, parts[-1]


def _get(doc: Any, path: str, op: str) -> Any:
    cur = doc
    for part in _decode_pointer(path):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            raise unprocessable(
                f'{op} operation does not apply: doc is missing path: "{path}": missing value'
            )
    return cur


def _add(doc: Any, path: str, value: Any, op: str = "add") -> Any:
    parts = _decode_pointer(path)
    if not parts:
        return copy.deepcopy(value)
    parent, last = _container(doc, parts, op, path)
    if isinstance(parent, dict):
        parent[last] = copy.deepcopy(value)
    elif isinstance(parent, list):
        if last == "-":
            parent.append(copy.deepcopy(value))
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), copy.deepcopy(value))
        else:
            raise unprocessable(f"Unable to access invalid index: {last}: invalid index referenced")
    else:
        raise unprocessable(f'{op} operation does not apply: doc is missing path: "{path}": missing value')
    return doc


def _remove(doc: Any, path: str, op: str = "remove") -> tuple[Any, Any]:
    parts = _decode_pointer(path)
    parent, last = _container(doc, parts, op, path)
    if isinstance(parent, dict) and last in parent:
        return doc, parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return doc, parent.pop(int(last))
    raise unprocessable(f'{op} operation does not apply: doc is missing path: "{path}": missing value')


def json_patch(doc: Any, operations: Any) -> Any:
    """RFC 6902 on a deep copy of `doc`; any failed operation (incl. `test`) -> 422 as the real server."""
    if not isinstance(operations, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = copy.deepcopy(doc)
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation:
            raise bad_request("Unexpected kind: unknown")
        op, path = operation["op"], operation.get("path", "")
        if op != "remove" and op not in ("move", "copy") and "value" not in operation and op != "test":
            raise unprocessable(f"{op} operation, missing value field")
        if op == "add":
            doc = _add(doc, path, operation["value"])
        elif op == "remove":
            doc, _ = _remove(doc, path)
        elif op == "replace":
            _get(doc, path, "replace")
            if _decode_pointer(path):
                doc, _ = _remove(doc, path, "replace")
            doc = _add(doc, path, operation["value"], "replace")
        elif op == "move":
            doc, value = _remove(doc, operation.get("from", ""), "move")
            doc = _add(doc, path, value, "move")
        elif op == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, operation.get("from", ""), "copy")), "copy")
        elif op == "test":
            try:
                actual = _get(doc, path, "test")
            except ApiError:
                actual = None
            if actual != operation.get("value"):
                raise unprocessable(f"testing value {path} failed: test failed")
        else:
            raise unprocessable(f"Unexpected kind: {op}")
    return doc
