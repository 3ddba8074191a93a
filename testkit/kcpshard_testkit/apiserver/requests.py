"""Parsing of API requests: the resource path, the media types, and the query/body options.

The path grammar imitates k8s.io/apiserver/pkg/endpoints/request/requestinfo.go (RequestInfoFactory):
`/api/v1[/watch][/namespaces/{ns}]/{resource}[/{name}[/{subresource}]]` and the same under `/apis/{g}/{v}`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml

from . import protobuf
from .errors import ApiError, bad_request
from .store import DeleteOptions


@dataclass
class ResourcePath:
    group: str
    version: str
    plural: str
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None
    watch_prefix: bool = False


def parse_resource_path(path: str) -> ResourcePath | None:
    parts = [p for p in path.strip("/").split("/") if p != ""]
    if len(parts) >= 3 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    watch = False
    if rest and rest[0] == "watch":
        watch, rest = True, rest[1:]
    namespace = None
    if (
        len(rest) >= 3
        and rest[0] == "namespaces"
        and not (len(rest) == 3 and rest[2] in ("status", "finalize"))
    ):
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return None
    return ResourcePath(
        group,
        version,
        rest[0],
        namespace,
        rest[1] if len(rest) > 1 else None,
        rest[2] if len(rest) > 2 else None,
        watch,
    )


def media_params(header: str) -> list[tuple[str, dict[str, str]]]:
    """`a/b;x=y, c/d` -> [('a/b', {'x': 'y'}), ('c/d', {})]."""
    out = []
    for part in header.split(","):
        if not part.strip():
            continue
        bits = [b.strip() for b in part.split(";")]
        params = {k.strip(): v.strip() for k, _, v in (b.partition("=") for b in bits[1:])}
        out.append((bits[0].lower(), params))
    return out


def wanted_conversion(accept: str) -> str | None:
    """'Table', 'PartialObjectMetadata' or None (plain objects), from an Accept header, first match wins."""
    for media, params in media_params(accept):
        if media not in ("application/json", "*/*", "application/yaml"):
            continue
        if params.get("g") == "meta.k8s.io" and params.get("as") in (
            "Table",
            "PartialObjectMetadata",
            "PartialObjectMetadataList",
        ):
            return params["as"].removesuffix("List")
        if "as" not in params:
            return None
    return None


def parse_body(raw: bytes, content_type: str) -> Any:
    if not raw.strip():
        return None
    if content_type.startswith(protobuf.PROTOBUF):
        try:
            return protobuf.decode(raw)
        except (ValueError, IndexError, UnicodeDecodeError):
            raise bad_request("the body of the request could not be decoded as protobuf") from None
    try:
        if "yaml" in content_type:
            return yaml.safe_load(raw)
        return json.loads(raw)
    except (ValueError, yaml.YAMLError) as exc:
        raise bad_request(
            f"the body of the request could not be decoded: {str(exc).splitlines()[0]}"
        ) from None


def flag(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def int_param(query: dict[str, str], name: str) -> int | None:
    if query.get(name) in (None, ""):
        return None
    try:
        return int(query[name])
    except ValueError:
        raise bad_request(f"invalid value for {name}: {query[name]!r}") from None


def resource_version(query: dict[str, str]) -> int | None:
    """The watch start point: None for '' or '0' (start from the current state)."""
    raw = query.get("resourceVersion", "")
    if raw in ("", "0"):
        return None
    try:
        return int(raw)
    except ValueError:
        raise ApiError(
            400, "BadRequest", f'invalid resource version: strconv.ParseUint: parsing "{raw}": invalid syntax'
        ) from None


def delete_options(query: dict[str, str], body: Any) -> DeleteOptions:
    body = body if isinstance(body, dict) else {}
    pre = body.get("preconditions") or {}
    policy = query.get("propagationPolicy") or body.get("propagationPolicy")
    orphan = body.get("orphanDependents") if "orphanDependents" in body else query.get("orphanDependents")
    if policy is None and orphan is not None:
        policy = "Orphan" if orphan in (True, "true") else "Background"
    if policy not in (None, "Orphan", "Background", "Foreground"):
        raise bad_request(
            f'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: '
            f'"{policy}": supported values: "Foreground", "Background", "Orphan", "nil"'
        )
    grace = int_param(query, "gracePeriodSeconds")
    if grace is None and body.get("gracePeriodSeconds") is not None:
        grace = int(body["gracePeriodSeconds"])
    dry = query.get("dryRun") == "All" or "All" in (body.get("dryRun") or [])
    return DeleteOptions(
        propagation=policy,
        grace_seconds=grace,
        precondition_rv=pre.get("resourceVersion"),
        precondition_uid=pre.get("uid"),
        dry_run=dry,
    )
