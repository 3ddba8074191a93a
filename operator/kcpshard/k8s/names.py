"""Names of the objects the operator owns, each within Kubernetes' limits for any shard name the CRD admits.

The shard's name is a label value on everything it owns (`kcpshard.dev/shard`), so the CRD admits names of
at most 63 characters (`MAX_SHARD_NAME`). A Job's name becomes its pods' `batch.kubernetes.io/job-name`
label, so owned names keep to 63 too: a name that would be longer keeps its head and ends in a hash of
the whole (`fit`), which stays unique and stable. Names that fit are unchanged, so objects made before
this rule keep their names. Pure functions.
"""

from __future__ import annotations

import hashlib

from kcpshard.api.basics import SlotName

# The labels on everything a shard owns (the front agent reads them too, without the builders' models).
LABEL_SHARD = "kcpshard.dev/shard"
LABEL_SLOT = "kcpshard.dev/slot"
LABEL_REVISION = "kcpshard.dev/revision"
LABEL_COMPONENT = "kcpshard.dev/component"
LABEL_START = "kcpshard.dev/start"

# A label value: at most 63 characters (k8s.io/apimachinery/pkg/util/validation IsValidLabelValue).
MAX_SHARD_NAME = 63
MAX_NAME = 63
_HASH = 8


def fit(name: str, limit: int = MAX_NAME) -> str:
    """`name` itself when it fits; else its head, `-` and 8 hex digits of its sha256."""
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:_HASH]
    head = name[: limit - _HASH - 1].rstrip("-.")
    return f"{head}-{digest}"


def shared_secret_name(shard: str) -> str:
    return fit(f"{shard}-shared")


def slot_object_name(shard: str, slot: SlotName) -> str:
    return fit(f"{shard}-{slot.value}")


def slot_job_name(shard: str, slot: SlotName, revision: str, start: int) -> str:
    # Slot, revision and start counter: a re-created slot never meets an old Job of the same name.
    return fit(f"{shard}-{slot.value}-{revision[:8]}-{start}")


def slot_admin_secret_name(slot_object: str) -> str:
    """The kcp-admin kubeconfig a slot's host agent publishes."""
    return fit(f"{slot_object}-kcp-admin")


# The front pod's readiness gate: the front agent sets it True while every HAProxy of its pod serves the
# desired backend (agent/front_pod.py), and the kubelet makes the pod Ready only with it.
SERVING_GATE = "kcpshard.dev/serving"


def agent_name(shard: str) -> str:
    """The ServiceAccount, Role and RoleBinding the shard's agents act with."""
    return fit(f"{shard}-agent")


def budget_name(shard: str) -> str:
    """The PodDisruptionBudget over what serves the shard: its front and slots."""
    return fit(f"{shard}-serving")


def front_name(shard: str) -> str:
    return fit(f"{shard}-front")


def admin_kubeconfig_secret_name(shard: str) -> str:
    return fit(f"{shard}-kcp-admin")


def backup_job_name(shard: str, roll: str) -> str:
    """The backup Job of one roll (its id, or its target revision for a roll recorded without one)."""
    return fit(f"{shard}-backup-{roll}")


def lease_name(shard: str) -> str:
    """The operator's own per-shard Lease (two operator replicas)."""
    return fit(f"kcpshard-{shard}")


def component_selector(shard: str, component: str) -> str:
    """The label selector of one shard's objects of one component (`slot`, `front`)."""
    return f"{LABEL_SHARD}={shard},{LABEL_COMPONENT}={component}"
