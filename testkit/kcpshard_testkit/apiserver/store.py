"""The in-memory object store: metadata rules, optimistic concurrency, finalizers, GC and event history.

Imitates, much simplified, k8s.io/apiserver/pkg/registry/generic/registry/store.go (Create, Update,
Delete with preconditions, markAsDeleting, graceful deletion from
k8s.io/apiserver/pkg/registry/rest/delete.go),
the garbage collector of k8s.io/kubernetes/pkg/controller/garbagecollector (synchronously here), the
namespace lifecycle controller, the CRD finalizer controller, and the watch cache's bounded history
(k8s.io/apiserver/pkg/storage/cacher/watch_cache.go: 410 Gone when a watch starts too old).

Every operation is synchronous (no await inside), so one event loop makes each request atomic.
KMock's KubernetesEmulator store is not used: it has no resourceVersion, uid, generation, conflicts,
selectors, history or garbage collection.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import random
import re
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from . import builtins, crds, schema
from .errors import (
    MODIFIED,
    Cause,
    already_exists,
    bad_request,
    conflict,
    conflict_on_kind,
    forbidden,
    gone,
    invalid,
    not_found,
)
from .registry import Registry, ResourceType, StorageKey, storage_version, types_from_crd

ObjKey = tuple[str, str]  # (namespace or "", name)
NS_KEY: StorageKey = ("", "namespaces")
CRD_KEY: StorageKey = ("apiextensions.k8s.io", "customresourcedefinitions")
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_SERVER_META = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "resourceVersion",
    "selfLink",
)


def now_iso(offset_seconds: int = 0) -> str:
    moment = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=offset_seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class WatchEvent:
    rv: int
    key: StorageKey
    type: str  # ADDED, MODIFIED, DELETED
    obj: dict[str, Any]  # stored form, never mutated after emission
    old: dict[str, Any] | None = None


@dataclass(eq=False)
class Subscriber:
    key: StorageKey
    queue: asyncio.Queue[WatchEvent | None] = field(default_factory=asyncio.Queue)


@dataclass
class DeleteOptions:
    propagation: str | None = None  # Background, Foreground (treated as Background), Orphan
    grace_seconds: int | None = None
    precondition_rv: str | None = None
    precondition_uid: str | None = None
    dry_run: bool = False


class Store:
    def __init__(self, registry: Registry, history_size: int = 5000) -> None:
        self.registry = registry
        self.rv = 0
        self.data: dict[StorageKey, dict[ObjKey, dict[str, Any]]] = {}
        self.history: deque[WatchEvent] = deque(maxlen=history_size)
        self.evicted_rv = 0  # the newest resourceVersion no longer in the history
        self.subscribers: set[Subscriber] = set()
        for ns in DEFAULT_NAMESPACES:
            self.create(registry.get("", "v1", "namespaces"), "", {"metadata": {"name": ns}})  # type: ignore[arg-type]

    # ----- reading -----------------------------------------------------------------------------------------

    def _bucket(self, key: StorageKey) -> dict[ObjKey, dict[str, Any]]:
        return self.data.setdefault(key, {})

    def view(self, rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """The stored object as `rt` presents it (version, event flavor, schema defaults)."""
        out = builtins.from_storage(rt, obj)
        if rt.custom and rt.schema:
            out = copy.deepcopy(out)
            schema.apply_defaults(out, rt.schema)
        return out

    def get(self, rt: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        obj = self._bucket(rt.storage_key).get((namespace if rt.namespaced else "", name))
        if obj is None:
            raise not_found(rt.group, rt.plural, name)
        return self.view(rt, obj)

    def list_items(self, rt: ResourceType, namespace: str | None) -> tuple[list[dict[str, Any]], int]:
        items = [
            self.view(rt, obj)
            for (ns, _), obj in sorted(self._bucket(rt.storage_key).items())
            if namespace is None or ns == namespace
        ]
        return items, self.rv

    def namespace_exists(self, name: str) -> bool:
        return ("", name) in self._bucket(NS_KEY)

    # ----- watch -------------------------------------------------------------------------------------------

    def subscribe(self, key: StorageKey, since: int | None) -> tuple[list[WatchEvent], Subscriber]:
        """Past events after `since` (or None: the caller lists) and a live subscription; 410 if too old."""
        if since is not None and since < self.evicted_rv:
            oldest = self.history[0].rv if self.history else self.rv
            raise gone(f"too old resource version: {since} ({oldest - 1})")
        past = [e for e in self.history if e.key == key and since is not None and e.rv > since]
        sub = Subscriber(key)
        self.subscribers.add(sub)
        return past, sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)

    def close(self) -> None:
        for sub in list(self.subscribers):
            sub.queue.put_nowait(None)

    def _emit(self, key: StorageKey, type_: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        event = WatchEvent(int(obj["metadata"]["resourceVersion"]), key, type_, obj, old)
        if self.history.maxlen is not None and len(self.history) == self.history.maxlen:
            self.evicted_rv = self.history[0].rv
        self.history.append(event)
        for sub in list(self.subscribers):
            if sub.key == key:
                sub.queue.put_nowait(event)

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    # ----- create ------------------------------------------------------------------------------------------

    def create(
        self,
        rt: ResourceType,
        namespace: str,
        body: Any,
        dry_run: bool = False,
        warnings: list[str] | None = None,
        strict: bool = False,
    ) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format")
        obj = builtins.to_storage(rt, copy.deepcopy(body))
        if rt.custom and strict:
            self._refuse_unknown_fields(rt, obj)  # decoding comes before any lookup, as in kube-apiserver
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            meta = obj["metadata"] = {}
        name = meta.get("name") or ""
        if not name and meta.get("generateName"):
            name = meta["generateName"] + "".join(random.choices("bcdfghjklmnpqrstvwxz2456789", k=5))
        if not name:
            raise invalid(
                rt.kind,
                rt.group,
                "",
                [
                    Cause(
                        "FieldValueRequired",
                        "Required value: name or generateName is required",
                        "metadata.name",
                    )
                ],
            )
        self._check_name(rt, name)
        if rt.namespaced:
            if meta.get("namespace") and namespace and meta["namespace"] != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            namespace = namespace or meta.get("namespace") or ""
            self._check_namespace(rt, namespace, name)
            meta["namespace"] = namespace
        else:
            namespace = ""
            meta.pop("namespace", None)
        bucket = self._bucket(rt.storage_key)
        if (namespace, name) in bucket:
            raise already_exists(rt.group, rt.plural, name)
        for f in _SERVER_META:
            meta.pop(f, None)
        meta["name"] = name
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_iso()
        if builtins.tracks_generation(rt):
            meta["generation"] = 1
        self._stamp_kind(rt, obj)
        if rt.custom:
            if rt.status_subresource:
                obj.pop("status", None)
            self._admit_custom(rt, obj, warnings, strict)
        else:
            builtins.admit_create(rt, obj)
        if rt.storage_key == CRD_KEY:
            crds.admit(rt, obj)
        if dry_run:
            meta["resourceVersion"] = str(self.rv)
            return self.view(rt, obj)
        meta["resourceVersion"] = self._next_rv()
        bucket[(namespace, name)] = obj
        self._emit(rt.storage_key, "ADDED", obj, None)
        if rt.storage_key == CRD_KEY:
            self._register_crd(obj)
        return self.view(rt, obj)

    def _check_name(self, rt: ResourceType, name: str) -> None:
        pattern, msg = (_LABEL, _LABEL_MSG) if rt.storage_key == NS_KEY else (_SUBDOMAIN, _SUBDOMAIN_MSG)
        if len(name) > (63 if rt.storage_key == NS_KEY else 253) or not pattern.match(name):
            raise invalid(
                rt.kind,
                rt.group,
                name,
                [Cause("FieldValueInvalid", f'Invalid value: "{name}": {msg}', "metadata.name")],
            )

    def _check_namespace(self, rt: ResourceType, namespace: str, name: str) -> None:
        if not namespace:
            raise bad_request("the server could not find the requested resource: a namespace is required")
        ns_obj = self._bucket(NS_KEY).get(("", namespace))
        if ns_obj is None:
            raise not_found("", "namespaces", namespace)
        if ns_obj["metadata"].get("deletionTimestamp"):
            raise forbidden(
                rt.group,
                rt.plural,
                name,
                f"unable to create new content in namespace {namespace} because it is being terminated",
            )

    def _stamp_kind(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        if rt.custom:
            crd = self._bucket(CRD_KEY).get(("", f"{rt.plural}.{rt.group}"))
            version = storage_version(crd) if crd else rt.version
            obj["apiVersion"] = f"{rt.group}/{version}"
        elif rt.storage is None:
            obj["apiVersion"] = rt.api_version
        obj["kind"] = rt.kind

    def _admit_custom(
        self, rt: ResourceType, obj: dict[str, Any], warnings: list[str] | None, strict: bool
    ) -> None:
        if rt.schema is None:
            return
        if strict:
            self._refuse_unknown_fields(rt, obj)
        unknown = self._unknown_fields(rt, obj)
        if warnings is not None:
            warnings.extend(f'unknown field "{u.lstrip(".")}"' for u in unknown)
        schema.prune(obj, rt.schema)
        schema.apply_defaults(obj, rt.schema)
        causes = schema.cel_skipped(schema.validate(obj, rt.schema), rt.schema)
        if causes:
            raise invalid(rt.kind, rt.group, obj["metadata"].get("name", ""), causes)

    @staticmethod
    def _unknown_fields(rt: ResourceType, obj: dict[str, Any]) -> list[str]:
        if rt.schema is None or rt.preserve_unknown:
            return []
        return [u for u in schema.unknown_fields(obj, rt.schema) if not u.startswith(".metadata")]

    def _refuse_unknown_fields(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        unknown = self._unknown_fields(rt, obj)
        if unknown:
            fields = ", ".join(f'unknown field "{u.lstrip(".")}"' for u in unknown)
            raise bad_request(
                f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
                f"strict decoding error: {fields}"
            )

    # ----- update and patch --------------------------------------------------------------------------------

    def _current(self, rt: ResourceType, namespace: str, name: str) -> tuple[ObjKey, dict[str, Any]]:
        key = (namespace if rt.namespaced else "", name)
        obj = self._bucket(rt.storage_key).get(key)
        if obj is None:
            raise not_found(rt.group, rt.plural, name)
        return key, obj

    def update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        subresource: str | None = None,
        dry_run: bool = False,
        warnings: list[str] | None = None,
        strict: bool = False,
    ) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format")
        body_name = (body.get("metadata") or {}).get("name")
        if body_name and body_name != name:
            raise bad_request(
                f"the name of the object ({body_name}) does not match the name on the URL ({name})"
            )
        key, current = self._current(rt, namespace, name)
        incoming = builtins.to_storage(rt, copy.deepcopy(body))
        incoming.setdefault("metadata", {})["name"] = name
        return self._write(rt, key, current, incoming, subresource, dry_run, warnings, strict)

    def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        apply: Any,
        subresource: str | None = None,
        dry_run: bool = False,
        warnings: list[str] | None = None,
        strict: bool = False,
    ) -> dict[str, Any]:
        """`apply` maps the current object (as `rt` presents it) to the patched one."""
        key, current = self._current(rt, namespace, name)
        patched = apply(copy.deepcopy(self.view(rt, current)))
        if not isinstance(patched, dict):
            raise bad_request("the patched object is not a JSON object")
        if (patched.get("metadata") or {}).get("name", name) != name:
            raise bad_request(
                f"the name of the object ({patched['metadata']['name']}) does not match the name on "
                f"the URL ({name})"
            )
        problem = None if rt.custom else builtins.decode_error(rt, patched)
        if problem:
            raise invalid(
                rt.kind, rt.group, name, [Cause("FieldValueInvalid", f"Invalid value: {problem}", "patch")]
            )
        incoming = builtins.to_storage(rt, patched)
        incoming.setdefault("metadata", {})["name"] = name
        return self._write(rt, key, current, incoming, subresource, dry_run, warnings, strict)

    def _write(
        self,
        rt: ResourceType,
        key: ObjKey,
        current: dict[str, Any],
        incoming: dict[str, Any],
        subresource: str | None,
        dry_run: bool,
        warnings: list[str] | None,
        strict: bool,
    ) -> dict[str, Any]:
        cur_meta = current["metadata"]
        in_meta = incoming.get("metadata") or {}
        if in_meta.get("resourceVersion") and str(in_meta["resourceVersion"]) != cur_meta["resourceVersion"]:
            raise conflict(rt.group, rt.plural, key[1], MODIFIED)
        if in_meta.get("uid") and in_meta["uid"] != cur_meta["uid"]:
            raise conflict(
                rt.group,
                rt.plural,
                key[1],
                f"Precondition failed: UID in precondition: "
                f"{in_meta['uid']}, UID in object meta: {cur_meta['uid']}",
            )
        if subresource == "status":
            new = copy.deepcopy(current)
            if "status" in incoming:
                new["status"] = incoming["status"]
            else:
                new.pop("status", None)
        else:
            new = incoming
            meta = new.setdefault("metadata", {})
            for f in _SERVER_META:
                meta.pop(f, None)
                if f in cur_meta:
                    meta[f] = cur_meta[f]
            meta["name"] = cur_meta["name"]
            if "namespace" in cur_meta:
                meta["namespace"] = cur_meta["namespace"]
            else:
                meta.pop("namespace", None)
            if rt.status_subresource:
                if "status" in current:
                    new["status"] = copy.deepcopy(current["status"])
                else:
                    new.pop("status", None)
            if cur_meta.get("deletionTimestamp"):
                added = [
                    f for f in meta.get("finalizers") or [] if f not in (cur_meta.get("finalizers") or [])
                ]
                if added:
                    quoted = ", ".join(f'"{f}"' for f in added)
                    raise invalid(
                        rt.kind,
                        rt.group,
                        key[1],
                        [
                            Cause(
                                "FieldValueForbidden",
                                "Forbidden: no new finalizers can be added if the object is being "
                                f"deleted, found new finalizers []string{{{quoted}}}",
                                "metadata.finalizers",
                            )
                        ],
                    )
        self._stamp_kind(rt, new)
        if rt.custom:
            self._admit_custom(rt, new, warnings, strict)
        else:
            builtins.admit_update(rt, current, new)
        if rt.storage_key == CRD_KEY:
            crds.admit(rt, new, keep_status=current.get("status"))
        if self._same(new, current):
            return self.view(rt, current)
        if builtins.tracks_generation(rt) and self._spec_changed(rt, current, new):
            new["metadata"]["generation"] = int(cur_meta.get("generation", 1)) + 1
        if dry_run:
            return self.view(rt, new)
        self._commit(rt.storage_key, key, new, current)
        if rt.storage_key == CRD_KEY:
            self._register_crd(new)
        return self.view(rt, self._finalize_if_released(rt.storage_key, key) or new)

    @staticmethod
    def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
        def strip(o: dict[str, Any]) -> dict[str, Any]:
            return {**o, "metadata": {k: v for k, v in o["metadata"].items() if k != "resourceVersion"}}

        return strip(a) == strip(b)

    @staticmethod
    def _spec_changed(rt: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> bool:
        ignored = {"metadata", "status"} if rt.status_subresource else {"metadata"}
        return {k: v for k, v in old.items() if k not in ignored} != {
            k: v for k, v in new.items() if k not in ignored
        }

    def _commit(self, skey: StorageKey, key: ObjKey, new: dict[str, Any], old: dict[str, Any]) -> None:
        new["metadata"]["resourceVersion"] = self._next_rv()
        self._bucket(skey)[key] = new
        self._emit(skey, "MODIFIED", new, old)

    def _modify(self, skey: StorageKey, key: ObjKey, change: Any) -> dict[str, Any]:
        """Apply a server-side change (a function on a copy) and commit it."""
        old = self._bucket(skey)[key]
        new = copy.deepcopy(old)
        change(new)
        if new != old:
            self._commit(skey, key, new, old)
        return new

    def _finalize_if_released(self, skey: StorageKey, key: ObjKey) -> dict[str, Any] | None:
        """Remove an object being deleted once nothing holds it; returns its final state if removed."""
        obj = self._bucket(skey).get(key)
        if obj is None:
            return None
        meta = obj["metadata"]
        if not meta.get("deletionTimestamp") or meta.get("finalizers"):
            return None
        if skey == ("", "pods") and int(meta.get("deletionGracePeriodSeconds") or 0) > 0:
            return None  # the kubelet still has to confirm with gracePeriodSeconds=0
        if skey == NS_KEY and (obj.get("spec") or {}).get("finalizers"):
            return None
        return self._remove(skey, key)

    # ----- delete ------------------------------------------------------------------------------------------

    def delete(self, rt: ResourceType, namespace: str, name: str, options: DeleteOptions) -> dict[str, Any]:
        key, current = self._current(rt, namespace, name)
        meta = current["metadata"]
        if options.precondition_uid and options.precondition_uid != meta["uid"]:
            # storage.Preconditions.Check (k8s.io/apiserver v0.37): named by kind, not resource.
            raise conflict_on_kind(
                rt.kind,
                rt.group,
                rt.plural,
                name,
                f"the UID in the precondition ({options.precondition_uid}) does not match the UID in "
                f"record ({meta['uid']}). The object might have been deleted and then recreated",
            )
        if options.precondition_rv and options.precondition_rv != meta["resourceVersion"]:
            raise conflict_on_kind(
                rt.kind,
                rt.group,
                rt.plural,
                name,
                f"the ResourceVersion in the precondition ({options.precondition_rv}) does not match the "
                f"ResourceVersion in record ({meta['resourceVersion']}). The object might have been modified",
            )
        if options.dry_run:
            return self.view(rt, current)
        policy = options.propagation or builtins.default_propagation(rt)
        if policy == "Orphan":
            self._orphan_dependents(meta["uid"])
        result = self._delete(rt.storage_key, key, options.grace_seconds)
        return self.view(rt, result)

    def _delete(self, skey: StorageKey, key: ObjKey, grace: int | None = None) -> dict[str, Any]:
        obj = self._bucket(skey)[key]
        meta = obj["metadata"]
        if skey == ("", "pods"):
            spec, phase = obj.get("spec") or {}, (obj.get("status") or {}).get("phase")
            if grace is None:
                grace = int(spec.get("terminationGracePeriodSeconds", 30))
            if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
                grace = 0
            current_grace = meta.get("deletionGracePeriodSeconds")
            if grace > 0:
                if current_grace is None or grace < int(current_grace):

                    def mark_graceful(o: dict[str, Any]) -> None:
                        if not o["metadata"].get("deletionTimestamp") and "generation" in o["metadata"]:
                            o["metadata"]["generation"] = int(o["metadata"].get("generation", 1)) + 1
                        o["metadata"]["deletionTimestamp"] = now_iso(grace)
                        o["metadata"]["deletionGracePeriodSeconds"] = grace

                    return self._modify(skey, key, mark_graceful)
                return obj
            if meta.get("finalizers") or current_grace:
                self._modify(skey, key, self._mark_deleting)
                return self._finalize_if_released(skey, key) or self._bucket(skey)[key]
            return self._remove(skey, key)
        if skey == NS_KEY:
            return self._delete_namespace(key)
        if skey == CRD_KEY:
            new = self._modify(skey, key, self._mark_deleting)
            self._delete_custom_resources(new)
            return self._finalize_if_released(skey, key) or self._bucket(skey).get(key, new)
        if meta.get("finalizers"):
            return self._modify(skey, key, self._mark_deleting)
        return self._remove(skey, key)

    @staticmethod
    def _mark_deleting(obj: dict[str, Any]) -> None:
        """markAsDeleting in registry/store.go: timestamp once, grace 0, generation bumped once."""
        meta = obj["metadata"]
        if not meta.get("deletionTimestamp"):
            meta["deletionTimestamp"] = now_iso()
            if "generation" in meta:
                meta["generation"] = int(meta["generation"]) + 1
        meta["deletionGracePeriodSeconds"] = 0

    def _remove(self, skey: StorageKey, key: ObjKey) -> dict[str, Any]:
        old = self._bucket(skey).pop(key)
        final = copy.deepcopy(old)
        final["metadata"]["resourceVersion"] = self._next_rv()
        self._emit(skey, "DELETED", final, old)
        if skey == CRD_KEY:
            self._unregister_crd(old)
        self._collect_dependents(old["metadata"]["uid"])
        self._finish_cleanups(skey, key)
        return final

    # ----- garbage collection ------------------------------------------------------------------------------

    def _all_objects(self) -> Iterable[tuple[StorageKey, ObjKey, dict[str, Any]]]:
        for skey, bucket in list(self.data.items()):
            for key, obj in list(bucket.items()):
                yield skey, key, obj

    def _uid_exists(self, uid: str) -> bool:
        return any(obj["metadata"].get("uid") == uid for _, _, obj in self._all_objects())

    def _orphan_dependents(self, uid: str) -> None:
        for skey, key, obj in self._all_objects():
            refs = obj["metadata"].get("ownerReferences") or []
            if any(r.get("uid") == uid for r in refs):

                def drop(o: dict[str, Any]) -> None:
                    kept = [r for r in o["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
                    if kept:
                        o["metadata"]["ownerReferences"] = kept
                    else:
                        o["metadata"].pop("ownerReferences", None)

                self._modify(skey, key, drop)

    def _collect_dependents(self, uid: str) -> None:
        """Background propagation: dependents whose every owner is gone are deleted (pods gracefully)."""
        for skey, key, obj in self._all_objects():
            if key not in self._bucket(skey):
                continue  # removed meanwhile by a nested collection
            obj = self._bucket(skey)[key]
            refs = obj["metadata"].get("ownerReferences") or []
            if not any(r.get("uid") == uid for r in refs):
                continue
            others = [r for r in refs if r.get("uid") != uid and self._uid_exists(r.get("uid", ""))]
            if others:
                self._modify(
                    skey, key, lambda o, others=others: o["metadata"].__setitem__("ownerReferences", others)
                )
            elif not obj["metadata"].get("deletionTimestamp") or skey == ("", "pods"):
                self._delete(skey, key)

    # ----- namespaces and CRDs -----------------------------------------------------------------------------

    def _delete_namespace(self, key: ObjKey) -> dict[str, Any]:
        def terminating(o: dict[str, Any]) -> None:
            self._mark_deleting(o)
            o.setdefault("status", {})["phase"] = "Terminating"

        obj = self._modify(NS_KEY, key, terminating)
        for skey, okey, item in self._all_objects():
            if (
                okey[0] == key[1]
                and okey in self._bucket(skey)
                and not item["metadata"].get("deletionTimestamp")
            ):
                self._delete(skey, okey)
        self._finish_cleanups(None, (key[1], ""))
        return self._bucket(NS_KEY).get(key, obj)

    def _finish_cleanups(self, skey: StorageKey | None, key: ObjKey) -> None:
        namespace = key[0]
        if namespace:
            ns_obj = self._bucket(NS_KEY).get(("", namespace))
            if (
                ns_obj
                and ns_obj["metadata"].get("deletionTimestamp")
                and not any(k[0] == namespace for b in self.data.values() for k in b)
            ):
                self._modify(NS_KEY, ("", namespace), lambda o: o.__setitem__("spec", {"finalizers": []}))
                self._finalize_if_released(NS_KEY, ("", namespace))
        if skey is not None and skey != CRD_KEY:
            crd_key = ("", f"{skey[1]}.{skey[0]}")
            crd = self._bucket(CRD_KEY).get(crd_key)
            if crd and crd["metadata"].get("deletionTimestamp") and not self._bucket(skey):

                def release(o: dict[str, Any]) -> None:
                    o["metadata"]["finalizers"] = [
                        f for f in o["metadata"].get("finalizers", []) if f != crds.FINALIZER
                    ]

                self._modify(CRD_KEY, crd_key, release)
                self._finalize_if_released(CRD_KEY, crd_key)

    def _register_crd(self, crd: dict[str, Any]) -> None:
        spec = crd["spec"]
        self.registry.remove_group_resource(spec["group"], spec["names"]["plural"])
        for rt in types_from_crd(crd):
            self.registry.add(rt)

    def _unregister_crd(self, crd: dict[str, Any]) -> None:
        spec = crd["spec"]
        self.registry.remove_group_resource(spec["group"], spec["names"]["plural"])
        self.data.pop((spec["group"], spec["names"]["plural"]), None)

    def _delete_custom_resources(self, crd: dict[str, Any]) -> None:
        skey = (crd["spec"]["group"], crd["spec"]["names"]["plural"])
        for key, obj in list(self._bucket(skey).items()):
            if key in self._bucket(skey) and not obj["metadata"].get("deletionTimestamp"):
                self._delete(skey, key)
        self._finish_cleanups(skey, ("", ""))
