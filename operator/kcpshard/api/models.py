"""Pydantic models of the KcpShard and KcpSlot resources.

These models are the single source of truth: `crds/*.yaml` is generated from them
(`kcpshard crds`), and a test fails when the files drift. CRD changes must stay
additive, because kopf has no conversion webhooks.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from kcpshard.api.basics import API_VERSION as API_VERSION
from kcpshard.api.basics import GROUP as GROUP
from kcpshard.api.basics import STORE_SCHEMES as STORE_SCHEMES
from kcpshard.api.basics import VERSION as VERSION
from kcpshard.api.basics import SlotName as SlotName

# Semver as kcp tags it: v0.32.1, v0.33.0-rc.1.
VERSION_PATTERN = r"^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
URL_PATTERN = rf"^({'|'.join(STORE_SCHEMES)})://[^\s]+$"


class Model(BaseModel):
    """Base of every model: camelCase on the wire, unknown fields ignored (the CRD prunes them)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")


class Shape(enum.StrEnum):
    BLUE_GREEN = "BlueGreen"
    SINGLE = "Single"


class DeletionPolicy(enum.StrEnum):
    RETAIN = "Retain"
    DELETE = "Delete"


class SecretKeyRef(Model):
    name: Annotated[str, Field(min_length=1, description="Name of a Secret in the shard's namespace.")]
    key: Annotated[str | None, Field(description="Key in the Secret; the reader's default when empty.")] = (
        None
    )


class KcpSpec(Model):
    version: Annotated[
        str,
        Field(
            pattern=VERSION_PATTERN,
            description="kcp version the slot runs, e.g. v0.32.1 (selects the flags).",
        ),
    ]
    binary: Annotated[
        str,
        Field(min_length=1, description="Path of the kcp executable on the node (the host agent runs it)."),
    ] = "kcp"
    image: Annotated[
        str | None,
        Field(description="Container image of the slot Job; the operator's own image when empty."),
    ] = None


class EtcdStore(Model):
    endpoints: Annotated[
        list[Annotated[str, Field(pattern=URL_PATTERN)]],
        Field(min_length=1, description="etcd client URLs (--etcd-servers), e.g. https://10.0.0.5:2379."),
    ]
    prefix: Annotated[str | None, Field(description="Key prefix inside etcd, when the store is shared.")] = (
        None
    )
    tls_secret_ref: Annotated[
        SecretKeyRef | None,
        Field(alias="tlsSecretRef", description="Secret with ca.crt, tls.crt, tls.key for etcd."),
    ] = None


class KineStore(Model):
    endpoint_secret_ref: Annotated[
        SecretKeyRef,
        Field(
            alias="endpointSecretRef",
            description="Secret key holding kine's endpoint (a postgres, mysql or sqlite DSN; key `endpoint` "
            "when empty). Each slot runs its own kine on it, so the database must take two clients.",
        ),
    ]
    binary: Annotated[
        str,
        Field(min_length=1, description="Path of the kine executable on the node (the host agent runs it)."),
    ] = "kine"


class StoreSpec(Model):
    """Exactly one of etcd or kine; the operator stalls with InvalidSpec otherwise."""

    etcd: EtcdStore | None = None
    kine: KineStore | None = None


class FrontSpec(Model):
    address: Annotated[
        str,
        Field(min_length=1, description="Address the L4 front (HAProxy) listens on, on the shard's node."),
    ] = "127.0.0.1"
    port: Annotated[int, Field(ge=1, le=65535, description="Port of the front; clients use address:port.")]


class ShardRef(Model):
    name: Annotated[str, Field(min_length=1, description="Name of a KcpShard in this shard's namespace.")]


class ShardIdentity(Model):
    name: Annotated[str, Field(pattern=DNS_LABEL_PATTERN, max_length=63, description="kcp --shard-name.")] = (
        "root"
    )
    root: Annotated[bool, Field(description="True for the root shard.")] = True
    cache_kubeconfig_secret_ref: Annotated[
        SecretKeyRef | None,
        Field(
            alias="cacheKubeconfigSecretRef",
            description="Required for a non-root shard (--cache-kubeconfig).",
        ),
    ] = None
    root_shard_kubeconfig_secret_ref: Annotated[
        SecretKeyRef | None,
        Field(
            alias="rootShardKubeconfigSecretRef",
            description="Non-root shards up to kcp v0.32 (--root-shard-kubeconfig-file).",
        ),
    ] = None
    root_shard_ref: Annotated[
        ShardRef | None,
        Field(
            alias="rootShardRef",
            description="The KcpShard of this non-root shard's root shard: a roll to a kcp version newer "
            "than the root serves waits until the root serves it.",
        ),
    ] = None
    base_url: Annotated[
        str | None,
        Field(
            alias="baseURL", description="Shard base URL; https://<front.address>:<front.port> when empty."
        ),
    ] = None


class RollSpec(Model):
    ready_timeout_seconds: Annotated[int, Field(alias="readyTimeoutSeconds", ge=1, le=86400)] = 300
    flip_timeout_seconds: Annotated[int, Field(alias="flipTimeoutSeconds", ge=1, le=3600)] = 30
    stop_timeout_seconds: Annotated[int, Field(alias="stopTimeoutSeconds", ge=1, le=3600)] = 120
    lease_timeout_seconds: Annotated[int, Field(alias="leaseTimeoutSeconds", ge=1, le=3600)] = 90
    probe_timeout_seconds: Annotated[int, Field(alias="probeTimeoutSeconds", ge=1, le=3600)] = 120
    drain_timeout_seconds: Annotated[int, Field(alias="drainTimeoutSeconds", ge=0, le=3600)] = 30
    front_start_timeout_seconds: Annotated[
        int,
        Field(
            alias="frontStartTimeoutSeconds",
            ge=1,
            le=3600,
            description="A front Deployment not available this long stalls the shard as FrontFailed.",
        ),
    ] = 60
    backup: Annotated[bool, Field(description="Snapshot the store before each roll.")] = False
    backup_timeout_seconds: Annotated[int, Field(alias="backupTimeoutSeconds", ge=1, le=86400)] = 600
    allow_unsafe_side_by_side: Annotated[
        bool,
        Field(
            alias="allowUnsafeSideBySide",
            description="Roll BlueGreen even across kcp versions that must not run side by side on one "
            "store (the old kcp may misread what the new one wrote). Prefer shape: Single for such a roll.",
        ),
    ] = False
    auto_promote: Annotated[
        bool,
        Field(
            alias="autoPromote",
            description="false: a BlueGreen roll waits once its new slot is ready, before the flip, until "
            "`kubectl kcpshard promote` (the kcpshard.dev/promote annotation); the old slot serves "
            "meanwhile.",
        ),
    ] = True
    promotion_deadline_seconds: Annotated[
        int | None,
        Field(
            alias="promotionDeadlineSeconds",
            ge=1,
            le=604800,
            description="With autoPromote: false, a roll not promoted this many seconds after its new slot "
            "is ready aborts by itself (the old slot serves on). Unset: it waits as long as it takes.",
        ),
    ] = None


# The shard's name is a label value on every object it owns (see kcpshard.k8s.names).
MAX_SHARD_NAME = 63
SHARD_NAME_RULE = {
    "rule": f"self.metadata.name.size() <= {MAX_SHARD_NAME}",
    "message": f"a KcpShard name has at most {MAX_SHARD_NAME} characters: it is a label value on every "
    "object the operator makes for the shard",
}
# Defaulting runs before CEL, so both fields are there; `has` guards a CRD applied without defaults.
STOP_TIMEOUT_RULE = {
    "rule": "!has(self.roll) || !has(self.roll.stopTimeoutSeconds) || !has(self.shutdownDelaySeconds) || "
    "self.roll.stopTimeoutSeconds > self.shutdownDelaySeconds",
    "message": "roll.stopTimeoutSeconds must be longer than shutdownDelaySeconds: kcp serves out its "
    "shutdown delay after SIGTERM, and a stop timeout inside it kills kcp mid-shutdown (allow the delay "
    "plus about 20 s)",
}


def spec_rule_problems(spec: KcpShardSpec) -> list[str]:
    """The CRD's CEL rules on the spec, checked again by the operator (a server that skips CEL)."""
    if spec.roll.stop_timeout_seconds <= spec.shutdown_delay_seconds:
        return [STOP_TIMEOUT_RULE["message"]]
    return []


def shard_name_problems(name: str) -> list[str]:
    """SHARD_NAME_RULE, checked again by the operator."""
    return [SHARD_NAME_RULE["message"]] if len(name) > MAX_SHARD_NAME else []


class KcpShardSpec(Model):
    model_config = ConfigDict(
        populate_by_name=True,
        extra="ignore",
        json_schema_extra={"x-kubernetes-validations": [dict(STOP_TIMEOUT_RULE)]},
    )

    kcp: KcpSpec
    shape: Annotated[Shape, Field(description="BlueGreen (no outage) or Single (planned outage).")] = (
        Shape.BLUE_GREEN
    )
    node: Annotated[
        str,
        Field(
            pattern=DNS_SUBDOMAIN_PATTERN,
            max_length=253,
            description="Node that runs the slots and the front. It cannot change: to move a shard, delete "
            "it and create it again on the new node (a planned outage).",
            # Make-before-break across nodes would need two fronts on two addresses, which clients do not
            # follow; so a move is refused at admission instead of dropping every client mid-flight.
            json_schema_extra={
                "x-kubernetes-validations": [
                    {
                        "rule": "self == oldSelf",
                        "message": "spec.node cannot change: the shard's front and slots run on that node, "
                        "and moving them in place drops every client. To move the shard, delete this "
                        "KcpShard and create it again with the new node (a planned outage).",
                    }
                ]
            },
        ),
    ]
    store: StoreSpec
    front: FrontSpec
    shard: ShardIdentity = Field(default_factory=ShardIdentity)
    extra_args: Annotated[
        list[str], Field(alias="extraArgs", description="Appended to kcp start (checked by the operator).")
    ] = Field(default_factory=list)
    feature_gates: Annotated[dict[str, bool], Field(alias="featureGates")] = Field(default_factory=dict)
    roll: RollSpec = Field(default_factory=RollSpec)
    shutdown_delay_seconds: Annotated[
        int,
        Field(alias="shutdownDelaySeconds", ge=0, le=600, description="kcp --shutdown-delay-duration."),
    ] = 5
    deletion_policy: Annotated[
        DeletionPolicy,
        Field(
            alias="deletionPolicy", description="Delete or keep the shared-material Secret with the shard."
        ),
    ] = DeletionPolicy.RETAIN


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
    connections: Annotated[dict[str, int], Field(description="Open connections per backend.")] = Field(
        default_factory=dict
    )
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
