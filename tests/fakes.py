"""Recording fakes of the two clients the controller talks through, for unit tests of its handlers.

`RecordingApi` stands in for `kcpshard.k8s.api.ApiClient`: objects live in memory, every request is
recorded in order as (verb, resource, name), and `fail` makes a chosen request raise, so a test can
stop a handler halfway. `RecordingKcp` stands in for `kcpshard.kcp.client.KcpClient` the same way.
"""

from __future__ import annotations

import copy
import datetime
import fnmatch
import itertools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kcpshard.api.models import KcpShardSpec, KcpShardStatus
from kcpshard.controller.act.context import ActContext
from kcpshard.controller.config import OperatorConfig
from kcpshard.k8s.api import KCPSHARDS, ApiError, Conflict, NotFound, ResourceRef
from kcpshard.kcp.client import KcpClient, ProbeResult
from kcpshard.kcp.errors import KcpError, KcpTimeout
from kcpshard.roll.observed import Observed
from kcpshard.roll.revision import revision_of

Request = tuple[str, str, str]  # (verb, resource or resource/subresource, name or label selector)


@dataclass
class _Failure:
    verb: str
    resource: str
    name: str
    error: Exception
    times: int


def _selected(obj: Mapping[str, Any], selector: str | None) -> bool:
    if not selector:
        return True
    labels = obj["metadata"].get("labels") or {}
    pairs = (term.split("=", 1) for term in selector.split(","))
    return all(labels.get(key) == value for key, value in pairs)


class RecordingApi:
    """An in-memory API server with the ApiClient methods the operator uses."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.requests: list[Request] = []
        self.delete_options: dict[tuple[str, str], dict[str, Any]] = {}
        self._failures: list[_Failure] = []
        self._versions = itertools.count(100)
        self._uids = itertools.count(1)
        self.closed = False  # as ApiClient.closed: set by the operator's cleanup

    # ----- set-up -------------------------------------------------------------------------------

    def put(self, ref: ResourceRef, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Store an object as if someone else created it (not recorded)."""
        stored = copy.deepcopy(dict(obj))
        meta = stored.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        meta.setdefault("uid", f"uid-{next(self._uids)}")
        meta.setdefault("creationTimestamp", "2026-12-01T11:00:00Z")
        meta["resourceVersion"] = str(next(self._versions))
        self.objects[(ref.plural, meta["namespace"], meta["name"])] = stored
        return copy.deepcopy(stored)

    def fail(
        self, verb: str, resource: str, name: str = "*", error: Exception | None = None, times: int = 1
    ) -> None:
        """The next `times` requests matching (verb, resource, name pattern) raise `error` (a 500)."""
        error = error or ApiError(500, "InternalError", f"{verb} {resource} failed (injected)")
        self._failures.append(_Failure(verb, resource, name, error, times))

    def stored(self, ref: ResourceRef, name: str, namespace: str = "default") -> dict[str, Any]:
        return self.objects[(ref.plural, namespace, name)]

    def names(self, ref: ResourceRef) -> list[str]:
        return sorted(name for plural, _, name in self.objects if plural == ref.plural)

    def writes(self) -> list[Request]:
        return [r for r in self.requests if r[0] not in ("get", "list")]

    # ----- the ApiClient methods ----------------------------------------------------------------

    def _request(self, verb: str, ref: ResourceRef, name: str, subresource: str | None = None) -> None:
        resource = f"{ref.plural}/{subresource}" if subresource else ref.plural
        self.requests.append((verb, resource, name))
        for failure in self._failures:
            if (
                failure.times > 0
                and failure.verb == verb
                and failure.resource == resource
                and fnmatch.fnmatch(name, failure.name)
            ):
                failure.times -= 1
                raise failure.error

    def _get(self, ref: ResourceRef, namespace: str | None, name: str) -> dict[str, Any]:
        try:
            return self.objects[(ref.plural, namespace or "default", name)]
        except KeyError:
            raise NotFound(404, "NotFound", f'{ref.plural} "{name}" not found') from None

    async def get(self, ref: ResourceRef, namespace: str | None, name: str) -> dict[str, Any]:
        self._request("get", ref, name)
        return copy.deepcopy(self._get(ref, namespace, name))

    async def list(
        self,
        ref: ResourceRef,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> dict[str, Any]:
        self._request("list", ref, label_selector or "")
        items = [
            copy.deepcopy(obj)
            for (plural, ns, _), obj in sorted(self.objects.items())
            if plural == ref.plural
            and (namespace is None or ns == namespace)
            and _selected(obj, label_selector)
        ]
        return {"metadata": {"resourceVersion": str(next(self._versions))}, "items": items}

    async def create(
        self, ref: ResourceRef, namespace: str | None, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        name = body["metadata"]["name"]
        self._request("create", ref, name)
        if (ref.plural, namespace or "default", name) in self.objects:
            raise Conflict(409, "AlreadyExists", f'{ref.plural} "{name}" already exists')
        # Created now, as the API server stamps it (put() stamps a fixed time in the past).
        created = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        meta = {**body["metadata"], "namespace": namespace, "creationTimestamp": created}
        return self.put(ref, {**body, "metadata": meta})

    async def replace(
        self,
        ref: ResourceRef,
        namespace: str | None,
        name: str,
        body: Mapping[str, Any],
        subresource: str | None = None,
    ) -> dict[str, Any]:
        self._request("replace", ref, name, subresource)
        current = self._get(ref, namespace, name)
        sent = body["metadata"].get("resourceVersion")
        if sent is not None and sent != current["metadata"]["resourceVersion"]:
            raise Conflict(409, "Conflict", f'the object "{name}" has been modified')
        new = copy.deepcopy(current)
        if subresource == "status":
            new["status"] = copy.deepcopy(body.get("status"))
        else:
            new = {**copy.deepcopy(dict(body)), "status": current.get("status")}
            new["metadata"] = {**current["metadata"], **body["metadata"]}
        new["metadata"]["resourceVersion"] = str(next(self._versions))
        self.objects[(ref.plural, namespace or "default", name)] = new
        return copy.deepcopy(new)

    async def delete(
        self,
        ref: ResourceRef,
        namespace: str | None,
        name: str,
        *,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
        preconditions: Mapping[str, str] | None = None,
    ) -> dict[str, Any] | None:
        self._request("delete", ref, name)
        self._get(ref, namespace, name)
        self.delete_options[(ref.plural, name)] = {
            "gracePeriodSeconds": grace_period_seconds,
            "propagationPolicy": propagation_policy,
        }
        del self.objects[(ref.plural, namespace or "default", name)]
        return None

    def touch(self, ref: ResourceRef, name: str, change: Any) -> None:
        """Someone else writes the object (a new resourceVersion): `change(obj)` edits it in place."""
        obj = self.stored(ref, name)
        change(obj)
        obj["metadata"]["resourceVersion"] = str(next(self._versions))


def lease(holder: str | None, renewed: str = "2026-12-01T12:00:00.000000Z") -> dict[str, Any]:
    return {"spec": {"holderIdentity": holder, "renewTime": renewed, "acquireTime": renewed}}


@dataclass
class RecordingKcp:
    """kcp as the controller's handlers see it: a scripted lease, a probe, a ConfigMap; every call recorded.

    `leases` are the answers of successive lease reads (the last one repeats); `new_holder` is who takes
    the lease after it is freed (None: nobody, the wait times out); `probe_error` fails the probe.
    """

    leases: list[dict[str, Any] | None] = field(default_factory=lambda: [None])
    new_holder: str | None = "new-kcp"
    probe_error: KcpError | None = None
    leftovers: list[str] = field(default_factory=list)
    identity_cache: bool = True
    errors: dict[str, KcpError] = field(default_factory=dict)  # method name -> raised once
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)

    async def connect(self, url: str) -> KcpClient:
        self.urls.append(url)
        return self  # type: ignore[return-value]  # duck-typed as KcpClient

    async def __aenter__(self) -> RecordingKcp:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.calls.append(("close",))

    def _call(self, *call: Any) -> None:
        self.calls.append(call)
        error = self.errors.pop(call[0], None)
        if error is not None:
            raise error

    async def get_lease(self) -> dict[str, Any] | None:
        self._call("get_lease")
        return self.leases.pop(0) if len(self.leases) > 1 else self.leases[0]

    async def delete_lease(self) -> bool:
        self._call("delete_lease")
        return True

    async def wait_for_holder(self, not_holder: str | None, timeout: float, poll: float = 0.2) -> str:
        self._call("wait_for_holder", not_holder, timeout)
        if self.new_holder is None or self.new_holder == not_holder:
            raise KcpTimeout("a new controller leader", timeout, f"holder {not_holder}")
        return self.new_holder

    async def delete_workspaces(self, prefix: str) -> list[str]:
        self._call("delete_workspaces", prefix)
        return list(self.leftovers)

    async def probe(
        self, name_prefix: str, timeout: float, poll: float = 0.2, location: str | None = None
    ) -> ProbeResult:
        self._call("probe", name_prefix, timeout)
        if self.probe_error is not None:
            raise self.probe_error
        at = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)
        return ProbeResult(
            name=f"{name_prefix}-abc123",
            phases=("Scheduling", "Initializing", "Ready"),
            started_at=at,
            created_at=at,
            ready_at=at,
            deleted_at=at,
            create_seconds=0.01,
            ready_seconds=0.5,
            delete_seconds=0.01,
            total_seconds=0.6,
            deleted=True,
        )

    async def delete_configmap(self, cluster: str, namespace: str, name: str) -> bool:
        self._call("delete_configmap", cluster, namespace, name)
        return self.identity_cache


# ----- a shard to act for ---------------------------------------------------------------------------

SHARD_SPEC = {
    "kcp": {"version": "v0.32.1"},
    "node": "n1",
    "store": {"etcd": {"endpoints": ["http://127.0.0.1:2379"]}},
    "front": {"port": 6443},
}


def shard_body(name: str = "root", **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "KcpShard",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "generation": 2},
        "spec": copy.deepcopy(SHARD_SPEC),
        "status": status,
    }


SPEC = KcpShardSpec.model_validate(SHARD_SPEC)

# The agents' identity, made before the shard's first pod, and found as wanted afterwards.
IDENTITY_MADE = [
    ("create", "serviceaccounts", "root-agent"),
    ("get", "roles", "root-agent"),
    ("create", "roles", "root-agent"),
    ("create", "rolebindings", "root-agent"),
]
IDENTITY_KEPT = [
    ("create", "serviceaccounts", "root-agent"),
    ("get", "roles", "root-agent"),
    ("create", "rolebindings", "root-agent"),
]
REV = revision_of(SPEC)
LOG = logging.getLogger("kcpshard.test")


def act_context(api: RecordingApi, kcp: RecordingKcp | None = None) -> ActContext:
    """What the handlers of shard default/root work with, through the fakes."""
    kcp = kcp or RecordingKcp()
    return ActContext(api, "default", "root", OperatorConfig(), kcp.connect, LOG)  # type: ignore[arg-type]


def observed(api: RecordingApi, status: KcpShardStatus | None = None, **more: Any) -> Observed:
    """A round's observation of shard default/root, stored in `api` as it was read."""
    shard = api.put(KCPSHARDS, shard_body())
    now = datetime.datetime(2026, 12, 1, 12, 0, 30, tzinfo=datetime.UTC)
    return Observed(
        name="root",
        generation=2,
        spec=SPEC,
        revision=REV,
        now=now,
        status=status or KcpShardStatus(),
        shard=shard,
        **more,
    )


@dataclass
class RecordedEvents:
    """An Event sink for the status writer: (reason, message, warning) in order."""

    posted: list[tuple[str, str, bool]] = field(default_factory=list)

    def __call__(self, body: Mapping[str, Any], reason: str, message: str, warning: bool) -> None:
        self.posted.append((reason, message, warning))

    @property
    def reasons(self) -> list[str]:
        return [reason for reason, _, _ in self.posted]
