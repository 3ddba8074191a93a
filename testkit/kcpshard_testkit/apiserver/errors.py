"""API errors rendered as `meta/v1 Status` bodies, worded like the real server.

Imitates k8s.io/apimachinery/pkg/api/errors/errors.go (NewNotFound, NewConflict, NewInvalid, ...).
The Status shape is the one KMock's `KubernetesScaffold._render_error` produces, minus its traceback
in `details` (the real server never sends one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Cause:
    """One `details.causes` entry (StatusCause): a field error."""

    reason: str  # e.g. FieldValueRequired
    message: str  # e.g. `Required value`
    field: str  # e.g. `spec.kcp`

    def as_dict(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.message, "field": self.field}

    def render(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


@dataclass
class ApiError(Exception):
    """An error the HTTP layer turns into a Status response."""

    code: int
    reason: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.message

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def _details(group: str, resource: str, name: str | None) -> dict[str, Any]:
    details: dict[str, Any] = {"kind": resource}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    return details


def qualified(group: str, resource: str) -> str:
    """`kcpshards.kcpshard.dev` or `pods` (schema.GroupResource.String())."""
    return f"{resource}.{group}" if group else resource


def not_found(group: str, resource: str, name: str) -> ApiError:
    return ApiError(
        404, "NotFound", f'{qualified(group, resource)} "{name}" not found', _details(group, resource, name)
    )


def already_exists(group: str, resource: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified(group, resource)} "{name}" already exists',
        _details(group, resource, name),
    )


def conflict(group: str, resource: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(group, resource)} "{name}": {why}',
        _details(group, resource, name),
    )


def conflict_on_kind(kind: str, group: str, resource: str, name: str, why: str) -> ApiError:
    """A storage precondition's 409: the message names the kind (`on ConfigMap "a"`)."""
    named = f"{kind}.{group}" if group else kind
    message = f'Operation cannot be fulfilled on {named} "{name}": {why}'
    return ApiError(409, "Conflict", message, _details(group, resource, name))


MODIFIED = "the object has been modified; please apply your changes to the latest version and try again"


def invalid(kind: str, group: str, name: str, causes: list[Cause]) -> ApiError:
    """NewInvalid: `Kind.group "name" is invalid: <one cause>` or `...: [<c1>, <c2>]`."""
    qualified_kind = f"{kind}.{group}" if group else kind
    rendered = [c.render() for c in causes]
    text = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    details: dict[str, Any] = {"name": name, "kind": kind, "causes": [c.as_dict() for c in causes]}
    if group:
        details["group"] = group
    return ApiError(422, "Invalid", f'{qualified_kind} "{name}" is invalid: {text}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def forbidden(group: str, resource: str, name: str, why: str) -> ApiError:
    return ApiError(
        403,
        "Forbidden",
        f'{qualified(group, resource)} "{name}" is forbidden: {why}',
        _details(group, resource, name),
    )


def method_not_allowed() -> ApiError:
    return ApiError(
        405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
    )


def unsupported_media_type(content_type: str, accepted: list[str]) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{', '.join(accepted)}",
    )


def unprocessable(server_message: str) -> ApiError:
    """NewGenericServerResponse(422, ...): what a failed JSON patch (e.g. a `test` op) answers."""
    return ApiError(
        422,
        "Invalid",
        "the server rejected our request due to an error in our request",
        {"causes": [{"reason": "UnexpectedServerResponse", "message": server_message}]},
    )


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def page_not_found() -> ApiError:
    # What the real server answers for an unknown path: a bare 404 Status.
    return ApiError(404, "NotFound", "the server could not find the requested resource")
