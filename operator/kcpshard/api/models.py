"""Pydantic models of the KcpShard and KcpSlot resources.

These models are the single source of truth: `crds/*.yaml` is generated from them
(`kcpshard crds`), and a test fails when the files drift. CRD changes must stay
additive, because kopf has no conversion webhooks. The spec's models are in kcpshard.api.spec; this
module names them too, as the one import of the resources.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any

from pydantic import Field

from kcpshard.api.basics import API_VERSION as API_VERSION
from kcpshard.api.basics import GROUP as GROUP
from kcpshard.api.basics import STORE_SCHEMES as STORE_SCHEMES
from kcpshard.api.basics import VERSION as VERSION
from kcpshard.api.basics import SlotName as SlotName
from kcpshard.api.spec import DNS_LABEL_PATTERN as DNS_LABEL_PATTERN
from kcpshard.api.spec import DNS_SUBDOMAIN_PATTERN as DNS_SUBDOMAIN_PATTERN
from kcpshard.api.spec import FRONT_ADDRESS_RULE as FRONT_ADDRESS_RULE
from kcpshard.api.spec import MAX_SHARD_NAME as MAX_SHARD_NAME
from kcpshard.api.spec import SHARD_NAME_RULE as SHARD_NAME_RULE
from kcpshard.api.spec import STOP_TIMEOUT_RULE as STOP_TIMEOUT_RULE
from kcpshard.api.spec import URL_PATTERN as URL_PATTERN
from kcpshard.api.spec import VERSION_PATTERN as VERSION_PATTERN
from kcpshard.api.spec import DeletionPolicy as DeletionPolicy
from kcpshard.api.spec import EtcdStore as EtcdStore
from kcpshard.api.spec import FrontSpec as FrontSpec
from kcpshard.api.spec import KcpShardSpec as KcpShardSpec
from kcpshard.api.spec import KcpSpec as KcpSpec
from kcpshard.api.spec import KineStore as KineStore
from kcpshard.api.spec import Model as Model
from kcpshard.api.spec import RollSpec as RollSpec
from kcpshard.api.spec import SecretKeyRef as SecretKeyRef
from kcpshard.api.spec import Shape as Shape
from kcpshard.api.spec import ShardIdentity as ShardIdentity
from kcpshard.api.spec import ShardRef as ShardRef
from kcpshard.api.spec import StoreSpec as StoreSpec
from kcpshard.api.spec import is_ip as is_ip
from kcpshard.api.spec import shard_name_problems as shard_name_problems
from kcpshard.api.spec import spec_rule_problems as spec_rule_problems


class ConditionStatus(enum.StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(Model):
    """metav1.Condition."""

    type: str
    status: ConditionStatus
    reason: Annotated[str, Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")]
    message: str = ""
    last_transition_time: Annotated[str, Field(alias="lastTransitionTime")]
    observed_generation: Annotated[int | None, Field(alias="observedGeneration")] = None


class BackupReport(Model):
    """The store snapshot taken before a roll (`roll.backup`)."""

    job: str
    path: Annotated[str, Field(description="File of the snapshot on the shard's node.")]
    seconds: float
    size_bytes: Annotated[int | None, Field(alias="sizeBytes")] = None


class RolloutStatus(Model):
    """The roll under way. The step lives here, not in conditions."""

    step: str
    id: Annotated[
        str | None, Field(description="Id of this roll; a slot not created by it is never adopted.")
    ] = None
    from_slot: Annotated[str | None, Field(alias="fromSlot")] = None
    to_slot: Annotated[str, Field(alias="toSlot")]
    target_revision: Annotated[str, Field(alias="targetRevision")]
    from_revision: Annotated[str | None, Field(alias="fromRevision")] = None
    from_version: Annotated[
        str | None, Field(alias="fromVersion", description="kcp version of the old slot.")
    ] = None
    target_generation: Annotated[int | None, Field(alias="targetGeneration")] = None
    shape: Shape = Shape.BLUE_GREEN
    from_holder: Annotated[
        str | None,
        Field(alias="fromHolder", description="Lease holder seen before the old slot was stopped."),
    ] = None
    restoring: Annotated[
        bool, Field(description="Single shape: the new revision failed; the old one is being started again.")
    ] = False
    recovery: Annotated[
        bool,
        Field(description="The serving slot died; its revision is being started again on the other slot."),
    ] = False
    failure_reason: Annotated[str | None, Field(alias="failureReason")] = None
    failure_message: Annotated[str | None, Field(alias="failureMessage")] = None
    target_spec: Annotated[
        dict[str, Any] | None,
        Field(
            alias="targetSpec",
            description="The spec being rolled to (a spec change during the roll waits for the next one).",
            json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        ),
    ] = None
    retry_token: Annotated[str | None, Field(alias="retryToken")] = None
    reassert_token: Annotated[
        str | None,
        Field(
            alias="reassertToken",
            description="The kcpshard.dev/reassert value of a roll of the serving revision it asked for.",
        ),
    ] = None
    promote_token: Annotated[
        str | None,
        Field(
            alias="promoteToken",
            description="The kcpshard.dev/promote value when the roll started: only another value "
            "promotes it.",
        ),
    ] = None
    abort_token: Annotated[
        str | None,
        Field(
            alias="abortToken",
            description="The kcpshard.dev/abort value when the roll started: only another value aborts it.",
        ),
    ] = None
    backup: BackupReport | None = None
    started_at: Annotated[str, Field(alias="startedAt")]
    step_started_at: Annotated[str | None, Field(alias="stepStartedAt")] = None
    timestamps: Annotated[dict[str, str], Field(description="When each step was reached.")] = Field(
        default_factory=dict
    )


class RollReport(Model):
    result: Annotated[str, Field(description="Succeeded, Aborted, Failed or RolledBack.")]
    reason: Annotated[str | None, Field(description="Why it did not succeed (CamelCase).")] = None
    recovery: Annotated[bool, Field(description="It started a dead serving slot's revision again.")] = False
    retry_token: Annotated[
        str | None, Field(alias="retryToken", description="The kcpshard.dev/retry annotation it ran with.")
    ] = None
    reassert_token: Annotated[
        str | None,
        Field(
            alias="reassertToken",
            description="The kcpshard.dev/reassert annotation this roll of the serving revision ran for.",
        ),
    ] = None
    from_slot: Annotated[str | None, Field(alias="fromSlot")] = None
    to_slot: Annotated[str | None, Field(alias="toSlot")] = None
    from_revision: Annotated[str | None, Field(alias="fromRevision")] = None
    to_revision: Annotated[str | None, Field(alias="toRevision")] = None
    shape: Shape = Shape.BLUE_GREEN
    timestamps: dict[str, str] = Field(default_factory=dict)
    backup: BackupReport | None = None
    durations: Annotated[dict[str, float], Field(description="Seconds: startToReady, oldExit, total...")] = (
        Field(default_factory=dict)
    )
    message: str = ""


class FrontStatus(Model):
    desired_backend: Annotated[str | None, Field(alias="desiredBackend")] = None
    desired_port: Annotated[int | None, Field(alias="desiredPort")] = None
    observed_backend: Annotated[str | None, Field(alias="observedBackend")] = None
    observed_port: Annotated[int | None, Field(alias="observedPort")] = None
    drain: Annotated[str | None, Field(description="Backend whose connections the front should close.")] = (
        None
    )
    connections: Annotated[
        dict[str, int],
        Field(
            description="Open connections per backend, as the front last reported them: at once when a "
            "backend has its first or loses its last, else at most every 10 s."
        ),
    ] = Field(default_factory=dict)
    observed_at: Annotated[str | None, Field(alias="observedAt")] = None
    error: Annotated[
        str | None,
        Field(description="Why the front cannot serve, as its agent sees it; cleared once it serves."),
    ] = None
    restarts: Annotated[
        int,
        Field(
            ge=0, description="Processes of the front (HAProxy, its agent) that died and were started again."
        ),
    ] = 0
    last_restart: Annotated[
        str | None,
        Field(alias="lastRestart", description="Which process of the front died last, how and when."),
    ] = None
    restarts_reported: Annotated[
        int | None,
        Field(alias="restartsReported", description="Restarts the operator has reported as Warning Events."),
    ] = None


class KcpShardStatus(Model):
    observed_generation: Annotated[int | None, Field(alias="observedGeneration")] = None
    conditions: list[Condition] = Field(default_factory=list)
    active_slot: Annotated[str | None, Field(alias="activeSlot")] = None
    active_revision: Annotated[str | None, Field(alias="activeRevision")] = None
    rollout: RolloutStatus | None = None
    last_roll: Annotated[RollReport | None, Field(alias="lastRoll")] = None
    failed_roll: Annotated[
        RollReport | None,
        Field(
            alias="failedRoll",
            description="The last roll that did not succeed, kept until a roll of another revision does "
            "(a recovery roll in between does not clear it).",
        ),
    ] = None
    history: Annotated[
        list[RollReport] | None,
        Field(description="Reports of the last rolls, newest first (at most five; lastRoll is the first)."),
    ] = None
    front: FrontStatus | None = None
    active_spec: Annotated[
        dict[str, Any] | None,
        Field(
            alias="activeSpec",
            description="The spec the active slot runs (to start it again when it is lost or a roll fails).",
            json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        ),
    ] = None
    admin_kubeconfig_secret: Annotated[
        str | None,
        Field(
            alias="adminKubeconfigSecret",
            description="Secret with the kcp-admin kubeconfig of the serving slot (key `kubeconfig`).",
        ),
    ] = None


class KcpSlotSpec(Model):
    shard: Annotated[str, Field(min_length=1)]
    slot: Annotated[SlotName, Field(description="Slot name: a or b (the front has one server each).")]
    revision: Annotated[str, Field(min_length=1, description="Hash of the shard spec this slot runs.")]
    start: Annotated[
        int, Field(ge=0, description="Start counter: a re-created slot gets a new Job name.")
    ] = 0
    roll: Annotated[str | None, Field(description="Id of the roll that created this slot.")] = None


class KcpSlotStatus(Model):
    port: int | None = None
    pid: int | None = None
    pod_uid: Annotated[str | None, Field(alias="podUID")] = None
    job_name: Annotated[str | None, Field(alias="jobName")] = None
    started_at: Annotated[str | None, Field(alias="startedAt")] = None
    ready_at: Annotated[str | None, Field(alias="readyAt")] = None
    stopping_at: Annotated[
        str | None, Field(alias="stoppingAt", description="When the host agent sent kcp SIGTERM.")
    ] = None
    exited_at: Annotated[str | None, Field(alias="exitedAt")] = None
    exit_code: Annotated[int | None, Field(alias="exitCode")] = None
    holder_identity: Annotated[str | None, Field(alias="holderIdentity")] = None
    conditions: list[Condition] = Field(default_factory=list)


class KcpShard(Model):
    api_version: Annotated[str, Field(alias="apiVersion")] = API_VERSION
    kind: str = "KcpShard"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: KcpShardSpec
    status: KcpShardStatus = Field(default_factory=KcpShardStatus)


class KcpSlot(Model):
    api_version: Annotated[str, Field(alias="apiVersion")] = API_VERSION
    kind: str = "KcpSlot"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: KcpSlotSpec
    status: KcpSlotStatus = Field(default_factory=KcpSlotStatus)
