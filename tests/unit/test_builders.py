"""Builders of the operator's Kubernetes objects: pure functions, checked field by field."""

from __future__ import annotations

from pathlib import Path

from kcpshard import cli
from kcpshard.agent import front
from kcpshard.agent.store_refs import StoreTLS
from kcpshard.api.models import DeletionPolicy, KcpShardSpec, SlotName
from kcpshard.k8s import backup_job, builders, front_workload, names
from kcpshard.k8s.disruption import disruption_budget

SPEC = KcpShardSpec.model_validate(
    {
        "kcp": {"version": "v0.32.1", "binary": "/usr/local/bin/kcp"},
        "node": "node-7",
        "store": {"etcd": {"endpoints": ["http://10.0.0.1:2379"]}},
        "front": {"address": "127.0.0.1", "port": 6443},
        "shutdownDelaySeconds": 15,
    }
)
SHARD = {
    "apiVersion": "kcpshard.dev/v1alpha1",
    "kind": "KcpShard",
    "metadata": {"name": "root", "namespace": "kcp", "uid": "shard-uid"},
}


def _slot() -> dict:
    body = builders.kcpslot(SHARD, SlotName.B, "abcdef1234", start=3)
    body["metadata"]["uid"] = "slot-uid"
    return body


def test_kcpslot_is_owned_by_its_shard_and_labelled() -> None:
    body = _slot()
    assert body["metadata"]["name"] == "root-b"
    assert body["metadata"]["ownerReferences"][0]["uid"] == "shard-uid"
    assert body["metadata"]["labels"][builders.LABEL_SHARD] == "root"
    assert body["spec"] == {"shard": "root", "slot": "b", "revision": "abcdef1234", "start": 3}


def test_slot_job_runs_the_agent_on_the_node_with_kcp_after_the_separator() -> None:
    job = builders.slot_job(SHARD, SPEC, _slot(), agent_command=("kcpshard",))
    assert job["metadata"]["name"] == "root-b-abcdef12-3"  # slot, revision, start counter
    assert job["metadata"]["labels"][builders.LABEL_START] == "3"
    assert job["metadata"]["ownerReferences"][0]["uid"] == "slot-uid"
    assert job["spec"]["backoffLimit"] == 0
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeName"] == "node-7"
    assert pod["hostNetwork"] is True
    assert pod["restartPolicy"] == "Never"
    command = pod["containers"][0]["command"]
    # the kubelet must not kill kcp before its hold (a replacement's start and flip), its shutdown delay
    # and the agent's report
    hold = SPEC.roll.ready_timeout_seconds + SPEC.roll.flip_timeout_seconds
    assert _option(_agent_args(job), "--hold-timeout") == [str(hold)]
    assert pod["terminationGracePeriodSeconds"] > hold + SPEC.shutdown_delay_seconds + 10
    sep = command.index("--")
    assert command[:3] == ["kcpshard", "agent", "slot"]
    assert command[sep + 1 : sep + 3] == ["/usr/local/bin/kcp", "start"]
    kcp_args = command[sep + 3 :]
    assert "--root-directory=/var/lib/kcpshard/kcp/root/b" in kcp_args
    assert "--shard-base-url=https://127.0.0.1:6443" in kcp_args
    assert pod["volumes"][0]["hostPath"]["path"] == builders.STATE_ROOT


def test_every_slot_gets_the_same_shard_urls() -> None:
    def urls(slot: SlotName) -> list[str]:
        body = builders.kcpslot(SHARD, slot, "r", 0) | {}
        body["metadata"]["uid"] = "u"
        command = builders.slot_job(SHARD, SPEC, body)["spec"]["template"]["spec"]["containers"][0]["command"]
        return [a for a in command if a.startswith("--shard-") and "url" in a]

    assert urls(SlotName.A) == urls(SlotName.B)
    assert len(urls(SlotName.A)) == 3


def test_front_deployment_replaces_its_pod_make_before_break_on_the_node(tmp_path: Path) -> None:
    deployment = front_workload.front_deployment(SHARD, SPEC)
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    front_dir = _option(container["command"], "--state-dir")[0]
    assert front_dir.endswith("/front")
    pod = deployment["spec"]["template"]["spec"]
    # Ready only by the gate the agent sets (no probe the node runs every second)
    assert pod["readinessGates"] == [{"conditionType": names.SERVING_GATE}]
    assert not any("readinessProbe" in c for c in pod["containers"])
    # A deleted front pod serves on until another one does (agent/front_hold.py), inside its grace period
    # with the agent's soft stop after it.
    [hold] = _option(container["command"], "--hold-seconds")
    assert float(hold) > 0
    assert pod["terminationGracePeriodSeconds"] >= float(hold) + front.STOP_GRACE_SECONDS
    assert pod["nodeName"] == "node-7" and pod["hostNetwork"] is True
    assert (
        deployment["spec"]["selector"]["matchLabels"].items()
        <= deployment["spec"]["template"]["metadata"]["labels"].items()
    )


def test_the_fronts_haproxys_are_containers_of_their_own_beside_its_agent() -> None:
    """No one process of the front pod is the front: each HAProxy is a container the kubelet starts
    again, driven by the agent through a folder they share (agent/front_members.py)."""
    pod = front_workload.front_deployment(SHARD, SPEC)["spec"]["template"]["spec"]
    agent, *members = pod["containers"]
    assert agent["name"] == "front" and [m["name"] for m in members] == ["haproxy-0", "haproxy-1"]
    [members_dir] = _option(agent["command"], "--members-dir")
    [hold] = _option(agent["command"], "--hold-seconds")
    shared = {v["name"] for v in pod["volumes"] if "emptyDir" in v}

    def mounted(container: dict) -> str:
        return {m["mountPath"]: m["name"] for m in container["volumeMounts"]}[members_dir]

    assert mounted(agent) in shared
    for index, member in enumerate(members):
        assert mounted(member) == mounted(agent)
        run, stop = member["command"], member["lifecycle"]["preStop"]["exec"]["command"]
        for command, target in ((run, "run_member"), (stop, "run_member_stop")):
            args, rest = cli._parser().parse_known_args(command[1:])
            assert args.target == f"kcpshard.agent.haproxy_member:{target}"
            assert _option(rest, "--dir") == [members_dir] and _option(rest, "--member") == [str(index)]
        # The hook outwaits the agent's hold, and HAProxy's soft stop fits in the pod's grace period.
        wait, grace = float(_option(stop, "--wait-seconds")[0]), float(_option(stop, "--grace")[0])
        assert wait > float(hold)
        assert wait + grace <= pod["terminationGracePeriodSeconds"]
        assert member["securityContext"] == agent["securityContext"]


def test_a_moved_front_address_replaces_the_front_pod() -> None:
    moved = SPEC.model_copy(update={"front": SPEC.front.model_copy(update={"address": "10.0.0.9"})})
    key = builders.TEMPLATE_HASH
    assert (
        front_workload.front_deployment(SHARD, moved)["metadata"]["annotations"][key]
        != front_workload.front_deployment(SHARD, SPEC)["metadata"]["annotations"][key]
    )


def test_shared_secret_survives_the_shard_unless_asked() -> None:
    assert "ownerReferences" not in builders.shared_secret(SHARD, SPEC)["metadata"]
    deleting = SPEC.model_copy(update={"deletion_policy": DeletionPolicy.DELETE})
    owners = builders.shared_secret(SHARD, deleting)["metadata"]["ownerReferences"]
    assert owners[0]["uid"] == "shard-uid" and owners[0]["controller"] is False


def test_front_carries_a_hash_of_what_was_asked() -> None:
    first = front_workload.front_deployment(SHARD, SPEC)
    again = front_workload.front_deployment(SHARD, SPEC)
    moved = front_workload.front_deployment(SHARD, SPEC.model_copy(update={"node": "node-8"}))
    key = builders.TEMPLATE_HASH
    assert first["metadata"]["annotations"][key] == again["metadata"]["annotations"][key]
    assert first["metadata"]["annotations"][key] != moved["metadata"]["annotations"][key]


def _agent_args(job: dict) -> list[str]:
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    return command[: command.index("--")]


def _option(args: list[str], name: str) -> list[str]:
    return [args[i + 1] for i, arg in enumerate(args) if arg == name]


def test_kcpslot_records_the_roll_that_created_it() -> None:
    body = builders.kcpslot(SHARD, SlotName.A, "abcdef1234", start=0, roll_id="abc-123")
    assert body["spec"]["roll"] == "abc-123"


def test_slot_agent_checks_the_store_and_publishes_kcp_admin() -> None:
    spec = SPEC.model_copy(
        update={
            "store": SPEC.store.model_copy(
                update={
                    "etcd": SPEC.store.etcd.model_copy(
                        update={"endpoints": ["http://e1:2379", "http://e2:2379"]}
                    )
                }
            )
        }  # type: ignore[union-attr]
    )
    args = _agent_args(builders.slot_job(SHARD, spec, _slot()))
    assert _option(args, "--store-endpoint") == ["http://e1:2379", "http://e2:2379"]
    assert _option(args, "--admin-secret") == ["root-b-kcp-admin"]
    assert _option(args, "--front-url") == ["https://127.0.0.1:6443"]
    assert _option(args, "--cache-kubeconfig-secret") == []  # a root shard has none


def test_a_tls_store_names_its_secret_to_the_agent_and_kcp_reads_the_files_it_writes() -> None:
    raw = SPEC.model_dump(by_alias=True, exclude_none=True)
    raw["store"] = {"etcd": {"endpoints": ["https://e1:2379"], "tlsSecretRef": {"name": "etcd-client"}}}
    job = builders.slot_job(SHARD, KcpShardSpec.model_validate(raw), _slot())
    args = _agent_args(job)
    assert _option(args, "--store-tls-secret") == ["etcd-client"]
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    root = _option(args, "--root-dir")[0]
    tls = StoreTLS("x", b"ca", b"cert", b"key")
    for relative in tls.files():
        assert any(arg.endswith(f"={root}/{relative}") for arg in command), relative


def test_a_kine_store_runs_kine_with_its_dsn_from_the_secret_and_never_on_a_command_line() -> None:
    raw = SPEC.model_dump(by_alias=True, exclude_none=True)
    raw["store"] = {"kine": {"endpointSecretRef": {"name": "pg"}, "binary": "/opt/kine"}}
    job = builders.slot_job(SHARD, KcpShardSpec.model_validate(raw), _slot())
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert _option(_agent_args(job), "--kine") == ["/opt/kine"]
    assert "--etcd-servers={kine}" in container["command"]
    assert _option(_agent_args(job), "--store-endpoint") == []
    env = {e["name"]: e for e in container["env"]}
    assert env["KINE_ENDPOINT"]["valueFrom"] == {"secretKeyRef": {"name": "pg", "key": "endpoint"}}


def test_non_root_slot_agent_writes_the_kubeconfigs_from_their_secrets() -> None:
    spec = KcpShardSpec.model_validate(
        {
            **SPEC.model_dump(by_alias=True, exclude_none=True),
            "shard": {
                "name": "beta",
                "root": False,
                "cacheKubeconfigSecretRef": {"name": "cache", "key": "kc"},
                "rootShardKubeconfigSecretRef": {"name": "root-kc"},
            },
        }
    )
    args = _agent_args(builders.slot_job(SHARD, spec, _slot()))
    assert _option(args, "--cache-kubeconfig-secret") == ["cache:kc"]
    assert _option(args, "--root-shard-kubeconfig-secret") == ["root-kc"]


def test_published_kcp_admin_secret_goes_with_the_shard() -> None:
    secret = builders.admin_kubeconfig_secret(SHARD, "a3ViZWNvbmZpZw==")
    assert secret["metadata"]["name"] == "root-kcp-admin"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "shard-uid"
    assert secret["data"] == {"kubeconfig": "a3ViZWNvbmZpZw=="}


def _containers(pod_spec: dict) -> list[dict]:
    return [*pod_spec.get("initContainers", []), *pod_spec["containers"]]


def test_agents_run_as_root_with_no_capability_and_no_escalation() -> None:
    slot_pod = builders.slot_job(SHARD, SPEC, _slot())["spec"]["template"]["spec"]
    front_pod = front_workload.front_deployment(SHARD, SPEC)["spec"]["template"]["spec"]
    backup_pod = backup_job.backup_job(SHARD, SPEC, revision="abcdef1234", attempt=0)["spec"]["template"][
        "spec"
    ]
    for pod in (slot_pod, front_pod, backup_pod):
        for container in _containers(pod):
            context = container["securityContext"]
            # root for the hostPath the kubelet creates owned by root; nothing else
            assert context["runAsUser"] == 0 and context["runAsNonRoot"] is False
            assert context["allowPrivilegeEscalation"] is False and context["privileged"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert context["seccompProfile"] == {"type": "RuntimeDefault"}


def test_a_front_below_port_1024_may_bind_it() -> None:
    low = SPEC.model_copy(update={"front": SPEC.front.model_copy(update={"port": 443})})
    container = front_workload.front_deployment(SHARD, low)["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}
    # and the template hash tells the operator the front must be replaced
    assert (
        front_workload.front_deployment(SHARD, low)["metadata"]["annotations"]
        != front_workload.front_deployment(SHARD, SPEC)["metadata"]["annotations"]
    )


def test_the_disruption_budget_holds_the_front_and_the_slots_of_the_shard_only() -> None:
    budget = disruption_budget(SHARD)
    spec = budget["spec"]
    assert budget["metadata"]["name"] == f"{SHARD['metadata']['name']}-serving"
    assert spec["maxUnavailable"] == 0 and spec["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert spec["selector"]["matchLabels"] == {builders.LABEL_SHARD: SHARD["metadata"]["name"]}
    [components] = spec["selector"]["matchExpressions"]
    assert components == {"key": builders.LABEL_COMPONENT, "operator": "In", "values": ["front", "slot"]}
    assert budget["metadata"]["ownerReferences"][0]["uid"] == SHARD["metadata"]["uid"]
