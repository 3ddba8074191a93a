"""Pods from workload templates, as the Job controller and the ReplicaSet controller build them.

Imitates ``pkg/controller/job/job_controller.go`` (labels ``job-name``, ``batch.kubernetes.io/job-name``,
``controller-uid``, ``batch.kubernetes.io/controller-uid``, a controller ownerReference) and
``pkg/controller/controller_utils.go`` ``GetPodFromTemplate``. Deployment pods are owned by the Deployment
itself (no ReplicaSet in between) and carry ``pod-template-hash`` of the template.
"""

from __future__ import annotations

import copy
import hashlib
import json
import secrets
import string
from collections.abc import Mapping
from typing import Any

_SUFFIX_ALPHABET = string.ascii_lowercase + string.digits


def random_suffix(length: int = 5) -> str:
    return "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(length))


def owner_reference(owner: Mapping[str, Any]) -> dict[str, Any]:
    meta = owner.get("metadata") or {}
    return {
        "apiVersion": owner.get("apiVersion"),
        "kind": owner.get("kind"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def template_hash(template: Mapping[str, Any]) -> str:
    """A stable hash of a pod template (the Deployment controller's ``pod-template-hash`` role)."""
    raw = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(raw).hexdigest()[:10]


def _pod_from_template(owner: Mapping[str, Any], name: str, labels: Mapping[str, str]) -> dict[str, Any]:
    """The pod as the controllers make it: bound only if the template names a node (there is no scheduler)."""
    template = copy.deepcopy((owner.get("spec") or {}).get("template") or {})
    tmeta = template.get("metadata") or {}
    spec = template.get("spec") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": (owner.get("metadata") or {}).get("namespace"),
            "labels": {**(tmeta.get("labels") or {}), **labels},
            "annotations": dict(tmeta.get("annotations") or {}),
            "ownerReferences": [owner_reference(owner)],
        },
        "spec": spec,
    }


def pod_from_job(job: Mapping[str, Any], suffix: str | None = None) -> dict[str, Any]:
    meta = job.get("metadata") or {}
    name, uid = str(meta.get("name")), str(meta.get("uid"))
    labels = {
        "job-name": name,
        "batch.kubernetes.io/job-name": name,
        "controller-uid": uid,
        "batch.kubernetes.io/controller-uid": uid,
    }
    return _pod_from_template(job, f"{name}-{suffix or random_suffix()}", labels)


def pod_from_deployment(deployment: Mapping[str, Any], suffix: str | None = None) -> dict[str, Any]:
    meta = deployment.get("metadata") or {}
    thash = template_hash((deployment.get("spec") or {}).get("template") or {})
    name = f"{meta.get('name')}-{thash}-{suffix or random_suffix()}"
    return _pod_from_template(deployment, name, {"pod-template-hash": thash})


def controller_uid(obj: Mapping[str, Any]) -> str | None:
    """The uid of the controlling owner, if any."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None
