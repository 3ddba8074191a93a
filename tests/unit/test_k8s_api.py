"""Pure parts of kcpshard.k8s.api (credentials: test_credentials.py, test_credentials_exec.py)."""

from __future__ import annotations

from typing import Any

import pytest

from kcpshard.k8s.api import (
    JOBS,
    KCPSHARDS,
    NAMESPACES,
    PODS,
    ApiError,
    Conflict,
    Gone,
    Invalid,
    NotFound,
    _relist_events,
    error_from_status,
)


def test_paths() -> None:
    assert PODS.path("ns") == "/api/v1/namespaces/ns/pods"
    assert PODS.path(None) == "/api/v1/pods"
    assert PODS.path("ns", "p", "status") == "/api/v1/namespaces/ns/pods/p/status"
    assert JOBS.path("ns", "j") == "/apis/batch/v1/namespaces/ns/jobs/j"
    assert (
        KCPSHARDS.path("ns", "s", "status") == "/apis/kcpshard.dev/v1alpha1/namespaces/ns/kcpshards/s/status"
    )
    assert NAMESPACES.path("ignored", "n") == "/api/v1/namespaces/n"
    assert KCPSHARDS.api_version == "kcpshard.dev/v1alpha1" and PODS.api_version == "v1"


@pytest.mark.parametrize(
    ("code", "cls"), [(404, NotFound), (409, Conflict), (410, Gone), (422, Invalid), (500, ApiError)]
)
def test_error_classes(code: int, cls: type[ApiError]) -> None:
    body = {"kind": "Status", "code": code, "reason": "Why", "message": 'things "x" went wrong'}
    err = error_from_status(code, body)
    assert type(err) is cls
    assert (err.status, err.reason, err.message) == (code, "Why", 'things "x" went wrong')
    assert str(err) == f'{code} Why: things "x" went wrong'


def test_error_without_status_body() -> None:
    err = error_from_status(401, None)
    assert err.status == 401 and err.reason == "Unauthorized"
    assert "401" in str(err)


def _obj(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": rv}}


def test_relist_reports_what_changed() -> None:
    known = {("ns", "a"): _obj("a", "1"), ("ns", "b"): _obj("b", "2"), ("ns", "gone"): _obj("gone", "3")}
    events = _relist_events(known, [_obj("a", "1"), _obj("b", "9"), _obj("new", "10")])
    got = [(e["type"], e["object"]["metadata"]["name"]) for e in events]
    assert got == [("DELETED", "gone"), ("MODIFIED", "b"), ("ADDED", "new")]
    assert set(known) == {("ns", "a"), ("ns", "b"), ("ns", "new")}
