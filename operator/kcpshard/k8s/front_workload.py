"""The front's Deployment: a pure function of the shard, like builders.py.

One pod on the shard's node, host network, three containers: the front agent, and two HAProxys of their
own (agent/haproxy_member.py) that it drives through their runtime sockets in a shared emptyDir. No one
process of the pod is the front: an HAProxy killed leaves the other on the port (SO_REUSEPORT), the
agent killed leaves both serving while the kubelet starts it again.
"""

from __future__ import annotations

from typing import Any

from kcpshard.api.models import KcpShardSpec
from kcpshard.k8s.builders import (
    DEFAULT_IMAGE,
    TEMPLATE_HASH,
    agent_security_context,
    downward_env,
    labels,
    shard_state_dir,
    state_volume,
    template_hash,
)
from kcpshard.k8s.names import LABEL_COMPONENT, LABEL_SHARD, SERVING_GATE, agent_name, front_name
from kcpshard.k8s.owners import owner_reference

# A front pod deleted or evicted serves on until another pod of its front serves, at most this long
# (agent/front_hold.py): a replacement's container start fits in it.
FRONT_HOLD_SECONDS = 30
# After the hold, an HAProxy's open connections get this long to finish (its preStop hook).
MEMBER_STOP_GRACE_SECONDS = 7
# The pod's own folder shared by the agent and its HAProxys: configs, runtime sockets, `release`. Short,
# as unix socket paths must be.
MEMBERS_DIR = "/run/kcpshard-front"
MEMBERS = 2
# Names the front's address in the pod template, so a changed spec.front.address or port replaces the
# pod (make before break): its HAProxys bind once, at their start.
ADDRESS_ANNOTATION = "kcpshard.dev/front-address"


def front_deployment(
    shard_obj: dict[str, Any],
    spec: KcpShardSpec,
    *,
    image: str = DEFAULT_IMAGE,
    agent_command: tuple[str, ...] = ("kcpshard",),
) -> dict[str, Any]:
    """The front workload: the front agent and its two HAProxy containers on the shard's node."""
    meta = shard_obj["metadata"]
    shard, namespace = meta["name"], meta["namespace"]
    volume, mount = state_volume()
    members_mount = {"name": "members", "mountPath": MEMBERS_DIR}
    security = agent_security_context(bind_below_1024=spec.front.port < 1024)
    # The agent keeps each pod's state (its start marker) in <front dir>/<pod name>.
    front_dir = f"{shard_state_dir(namespace, shard)}/front"
    command = [
        *agent_command,
        "agent",
        "front",
        "--namespace",
        namespace,
        "--shard",
        shard,
        "--state-dir",
        front_dir,
        "--members-dir",
        MEMBERS_DIR,
        "--hold-seconds",
        str(FRONT_HOLD_SECONDS),
    ]
    agent = {
        "name": "front",
        "image": image,
        "command": command,
        "env": downward_env(),
        "volumeMounts": [mount, members_mount],
        # No probe: readiness is the pod's gate, which the agent writes only when serving changes. An exec
        # probe each second cost the node about 25 ms of CPU each time (runc exec; docs/measurements.md):
        # 50 idle fronts on one node took most of two cores.
        "securityContext": security,
    }
    members = [_member(index, image, agent_command, members_mount, security) for index in range(MEMBERS)]
    pod_labels = labels(shard, "front")
    deployment: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": front_name(shard),
            "namespace": namespace,
            "labels": pod_labels,
            "ownerReferences": [owner_reference(shard_obj)],
        },
        "spec": {
            "replicas": 1,
            # Make before break: a replacement front starts beside the old one and shares its port
            # (SO_REUSEPORT); the old one goes only once the new one is Ready, i.e. serves the desired
            # backend. A replacement that never comes up leaves the old one serving.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "selector": {"matchLabels": {LABEL_SHARD: shard, LABEL_COMPONENT: "front"}},
            "template": {
                "metadata": {
                    "labels": pod_labels,
                    "annotations": {ADDRESS_ANNOTATION: f"{spec.front.address}:{spec.front.port}"},
                },
                "spec": {
                    "nodeName": spec.node,
                    "hostNetwork": True,
                    "serviceAccountName": agent_name(shard),
                    # The hold, then the HAProxys' soft stop and a margin.
                    "terminationGracePeriodSeconds": FRONT_HOLD_SECONDS + MEMBER_STOP_GRACE_SECONDS + 3,
                    "readinessGates": [{"conditionType": SERVING_GATE}],
                    "containers": [agent, *members],
                    "volumes": [volume, {"name": "members", "emptyDir": {"medium": "Memory"}}],
                },
            },
        },
    }
    deployment["metadata"]["annotations"] = {TEMPLATE_HASH: template_hash(deployment)}
    return deployment


def _member(
    index: int,
    image: str,
    agent_command: tuple[str, ...],
    mount: dict[str, Any],
    security: dict[str, Any],
) -> dict[str, Any]:
    """One HAProxy container; its preStop hook waits for the agent's hold, then stops it softly."""
    which = ["--dir", MEMBERS_DIR, "--member", str(index)]
    stop = [
        *agent_command,
        "agent",
        "haproxy-member-stop",
        *which,
        # The agent releases at the hold's end; one that is dead cannot, so not much longer.
        "--wait-seconds",
        str(FRONT_HOLD_SECONDS + 1),
        "--grace",
        str(MEMBER_STOP_GRACE_SECONDS),
    ]
    return {
        "name": f"haproxy-{index}",
        "image": image,
        "command": [*agent_command, "agent", "haproxy-member", *which],
        "volumeMounts": [mount],
        "lifecycle": {"preStop": {"exec": {"command": stop}}},
        "securityContext": security,
    }
