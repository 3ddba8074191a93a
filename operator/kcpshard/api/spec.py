"""Pydantic models of a KcpShard's spec, with the CRD's rules on it (`crds/*.yaml` is generated from
them, see kcpshard.api.models) and the operator's own check of those rules."""

from __future__ import annotations

import enum
import ipaddress
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from kcpshard.api.basics import STORE_SCHEMES

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


# HAProxy binds the front without resolving names, so a host name can never serve: refused at apply.
# isIP is Kubernetes' CEL IP library (k8s.io/apiserver/pkg/cel/library/ip.go), in every CRD since 1.30.
FRONT_ADDRESS_RULE = {
    "rule": "isIP(self)",
    "message": "must be an IP address such as 127.0.0.1 or ::1 (HAProxy listens on it without resolving "
    "names)",
}


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
        Field(
            min_length=1,
            description="IP address the L4 front (HAProxy) listens on, on the shard's node.",
            json_schema_extra={"x-kubernetes-validations": [dict(FRONT_ADDRESS_RULE)]},
        ),
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


# What the host agent gives kcp beyond its shutdown delay to exit, at most: its `--stop-timeout`, which also
# sizes the slot pod's grace period (k8s/builders.py).
STOP_MARGIN_SECONDS = 20


class RollSpec(Model):
    ready_timeout_seconds: Annotated[int, Field(alias="readyTimeoutSeconds", ge=1, le=86400)] = 300
    flip_timeout_seconds: Annotated[int, Field(alias="flipTimeoutSeconds", ge=1, le=3600)] = 30
    stop_timeout_seconds: Annotated[
        int,
        Field(
            alias="stopTimeoutSeconds",
            ge=1,
            le=3600,
            description="SIGTERM to SIGKILL for a stopping slot's kcp, at most shutdownDelaySeconds plus "
            f"{STOP_MARGIN_SECONDS} (the host agent's own limit, which sizes the slot pod's grace period); "
            "read by the host agent when it stops kcp.",
        ),
    ] = 120
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


def agent_stop_timeout(spec: KcpShardSpec) -> int:
    """The host agent's limit on SIGTERM to SIGKILL (`--stop-timeout`)."""
    return spec.shutdown_delay_seconds + STOP_MARGIN_SECONDS


def kill_after_seconds(spec: KcpShardSpec) -> int:
    """SIGTERM to SIGKILL for a slot's kcp as its host agent counts it (agent/slot_hold.py
    `stop_timeout_of`): `roll.stopTimeoutSeconds`, at most the agent's limit."""
    return min(spec.roll.stop_timeout_seconds, agent_stop_timeout(spec))


def spec_rule_problems(spec: KcpShardSpec) -> list[str]:
    """The CRD's CEL rules on the spec, checked again by the operator (a server that skips CEL)."""
    problems = []
    if not is_ip(spec.front.address):
        problems.append(f"front.address {spec.front.address!r} {FRONT_ADDRESS_RULE['message']}")
    if spec.roll.stop_timeout_seconds <= spec.shutdown_delay_seconds:
        problems.append(STOP_TIMEOUT_RULE["message"])
    return problems


def is_ip(text: str) -> bool:
    """CEL's isIP: an IPv4 or IPv6 address, without a zone and not IPv4-mapped."""
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return False
    return not (isinstance(ip, ipaddress.IPv6Address) and (ip.scope_id or ip.ipv4_mapped))


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
