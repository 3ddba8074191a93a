"""Kubernetes `Status` error bodies with kube's exact wording.

Imitates `k8s.io/apimachinery/pkg/api/errors/errors.go` (NewNotFound, NewAlreadyExists, NewConflict,
NewUnauthorized, NewForbidden, NewBadRequest, NewMethodNotSupported).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web


def status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> web.Response:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details:
        body["details"] = details
    body["code"] = code
    return web.Response(status=code, text=json.dumps(body), content_type="application/json")


def success(name: str, group: str, kind: str, uid: str = "") -> web.Response:
    details: dict[str, Any] = {"name": name, "group": group, "kind": kind}
    if uid:
        details["uid"] = uid
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}
    return web.Response(status=200, text=json.dumps(body), content_type="application/json")


def qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, group: str, name: str) -> web.Response:
    return status(
        404,
        "NotFound",
        f'{qualified(resource, group)} "{name}" not found',
        {"name": name, "group": group, "kind": resource},
    )


def already_exists(resource: str, group: str, name: str) -> web.Response:
    return status(
        409,
        "AlreadyExists",
        f'{qualified(resource, group)} "{name}" already exists',
        {"name": name, "group": group, "kind": resource},
    )


def conflict(resource: str, group: str, name: str) -> web.Response:
    return status(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(resource, group)} "{name}": the object has been '
        "modified; please apply your changes to the latest version and try again",
        {"name": name, "group": group, "kind": resource},
    )


def unauthorized() -> web.Response:
    return status(401, "Unauthorized", "Unauthorized")


def forbidden_path(user: str, verb: str, path: str) -> web.Response:
    return status(403, "Forbidden", f'forbidden: User "{user}" cannot {verb} path "{path}"')


def bad_request(message: str) -> web.Response:
    return status(400, "BadRequest", message)


def invalid(kind: str, group: str, name: str, message: str) -> web.Response:
    return status(
        422,
        "Invalid",
        f'{kind}.{group} "{name}" is invalid: {message}'
        if group
        else f'{kind} "{name}" is invalid: {message}',
        {"name": name, "group": group, "kind": kind},
    )


def method_not_supported(resource: str, group: str, verb: str) -> web.Response:
    return status(
        405,
        "MethodNotAllowed",
        f"{verb} is not supported on resources of kind {qualified(resource, group)!r}",
    )


def page_not_found() -> web.Response:
    return status(404, "NotFound", "the server could not find the requested resource")
