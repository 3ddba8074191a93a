"""Pure parts of the local workload runner: expansion, env, volumes, path mapping, templates, plans."""

from __future__ import annotations

import base64
import copy
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from kcpshard_testkit.runner.deployments import plan_deployment
from kcpshard_testkit.runner.envs import ConfigError, build_env, field_ref, referenced_names
from kcpshard_testkit.runner.expand import expand
from kcpshard_testkit.runner.jobstatus import plan_job
from kcpshard_testkit.runner.templates import pod_from_deployment, pod_from_job, template_hash
from kcpshard_testkit.runner.volumes import (
    Mount,
    container_mounts,
    map_arg,
    map_path,
    prepare_volumes,
)

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


POD: dict[str, Any] = {
    "metadata": {
        "name": "p-1",
        "namespace": "ns",
        "uid": "0123456789abcdef",
        "labels": {"app": "kcp"},
        "annotations": {"note": "hi"},
    },
    "spec": {"nodeName": "local-node", "serviceAccountName": "sa"},
}


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("$(A)", "x"),
        ("a$(A)b$(B)c", "axbyc"),
        ("$$(A)", "$(A)"),
        ("$(MISSING)", "$(MISSING)"),
        ("$(A", "$(A"),
        ("cost $5", "cost $5"),
        ("$$", "$"),
        ("$", "$"),
    ],
)
def test_expand_follows_kubelet_rules(text: str, want: str) -> None:
    assert expand(text, {"A": "x", "B": "y"}) == want


def test_expand_prefers_first_context() -> None:
    assert expand("$(A)-$(S)", {"A": "own"}, {"A": "svc", "S": "s"}) == "own-s"


def test_field_refs() -> None:
    assert field_ref(POD, "metadata.name") == "p-1"
    assert field_ref(POD, "metadata.namespace") == "ns"
    assert field_ref(POD, "metadata.uid") == "0123456789abcdef"
    assert field_ref(POD, "metadata.labels['app']") == "kcp"
    assert field_ref(POD, "metadata.annotations['note']") == "hi"
    assert field_ref(POD, "metadata.labels['absent']") == ""
    assert field_ref(POD, "spec.nodeName") == "local-node"
    assert field_ref(POD, "spec.serviceAccountName") == "sa"
    assert field_ref(POD, "status.podIP") == "127.0.0.1"
    assert field_ref(POD, "status.hostIP") == "127.0.0.1"
    with pytest.raises(ConfigError):
        field_ref(POD, "spec.bogus")


def test_build_env_order_refs_and_expansion() -> None:
    secret = {"metadata": {"namespace": "ns"}, "data": {"token": b64("s3cret"), "bad key": b64("x")}}
    cm = {"metadata": {"namespace": "ns"}, "data": {"MODE": "fast", "LEVEL": "2"}}
    container = {
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}, {"secretRef": {"name": "sec"}}],
        "env": [
            {"name": "A", "value": "a"},
            {"name": "B", "value": "$(A)-$(LATER)-$(CM_MODE)-$(SVC)"},
            {"name": "LATER", "value": "l"},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "token"}}},
            {"name": "LVL", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "LEVEL"}}},
            {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": True}}},
            {"name": "RAW", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}, "value": ""},
        ],
    }
    env = build_env(container, POD, {"sec": secret, "nope": None}, {"cm": cm}, {"SVC": "svc"})
    assert env["CM_MODE"] == "fast"
    assert env["token"] == "s3cret"
    assert "bad key" not in env  # invalid names are skipped like the kubelet does
    assert env["B"] == "a-$(LATER)-fast-svc"  # only variables defined before are expanded
    assert env["POD"] == "p-1"
    assert env["TOKEN"] == "s3cret"
    assert env["LVL"] == "2"
    assert "OPT" not in env


@pytest.mark.parametrize(
    "var",
    [
        {"name": "X", "valueFrom": {"secretKeyRef": {"name": "missing", "key": "k"}}},
        {"name": "X", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "missing"}}},
        {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "missing", "key": "k"}}},
    ],
)
def test_build_env_missing_refs_are_config_errors(var: dict[str, Any]) -> None:
    secrets = {"sec": {"metadata": {"namespace": "ns"}, "data": {"k": b64("topsecret-123")}}, "missing": None}
    with pytest.raises(ConfigError) as err:
        build_env({"env": [var]}, POD, secrets, {"missing": None})
    assert "topsecret-123" not in str(err.value)
    assert "missing" in str(err.value)


def test_string_data_is_honoured() -> None:
    secret = {"metadata": {}, "stringData": {"k": "plain"}}
    env = build_env(
        {"env": [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]},
        POD,
        {"s": secret},
        {},
    )
    assert env["K"] == "plain"


def test_referenced_names() -> None:
    pod = {
        "spec": {
            "containers": [
                {
                    "envFrom": [{"secretRef": {"name": "s1"}}, {"configMapRef": {"name": "c1"}}],
                    "env": [{"name": "x", "valueFrom": {"secretKeyRef": {"name": "s2", "key": "k"}}}],
                }
            ],
            "volumes": [
                {"name": "v", "secret": {"secretName": "s3"}},
                {"name": "w", "configMap": {"name": "c2"}},
                {"name": "p", "projected": {"sources": [{"secret": {"name": "s4"}}]}},
            ],
        }
    }
    assert referenced_names(pod) == ({"s1", "s2", "s3", "s4"}, {"c1", "c2"})


def test_map_path_longest_mount_wins_and_respects_boundaries(tmp_path: Path) -> None:
    mounts = sorted(
        [Mount("/data", tmp_path / "d"), Mount("/data/sub", tmp_path / "s")],
        key=lambda m: len(m.mount_path),
        reverse=True,
    )
    assert map_path("/data", mounts) == str(tmp_path / "d")
    assert map_path("/data/x/y", mounts) == str(tmp_path / "d" / "x" / "y")
    assert map_path("/data/sub/f", mounts) == str(tmp_path / "s" / "f")
    assert map_path("/database", mounts) == "/database"
    assert map_path("relative/data", mounts) == "relative/data"
    assert map_arg("--root=/data/kcp", mounts) == f"--root={tmp_path / 'd' / 'kcp'}"
    assert map_arg("--name=value", mounts) == "--name=value"
    assert map_arg("x=/data", mounts) == "x=/data"  # only flags get the value rule


def test_prepare_volumes_and_mounts(tmp_path: Path) -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {
            "volumes": [
                {"name": "state", "hostPath": {"path": "/var/lib/kcp", "type": "DirectoryOrCreate"}},
                {"name": "scratch", "emptyDir": {}},
                {"name": "tls", "secret": {"secretName": "tls", "defaultMode": 0o600}},
                {
                    "name": "cfg",
                    "configMap": {"name": "cfg", "items": [{"key": "a", "path": "sub/a.txt", "mode": 0o640}]},
                },
                {"name": "opt", "secret": {"secretName": "absent", "optional": True}},
                {
                    "name": "proj",
                    "projected": {
                        "sources": [
                            {"configMap": {"name": "cfg"}},
                            {
                                "downwardAPI": {
                                    "items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]
                                }
                            },
                        ]
                    },
                },
            ]
        },
    }
    secrets = {"tls": {"metadata": {"namespace": "ns"}, "data": {"tls.key": b64("KEY")}}, "absent": None}
    cms = {"cfg": {"metadata": {"namespace": "ns"}, "data": {"a": "A", "b": "B"}}}
    pod_dir = tmp_path / "pods" / "p"
    vols = prepare_volumes(tmp_path, "n1", pod, pod_dir, secrets, cms)
    assert vols["state"] == tmp_path / "nodes" / "n1" / "var" / "lib" / "kcp"
    assert vols["state"].is_dir()
    assert vols["scratch"] == pod_dir / "volumes" / "scratch"
    key = vols["tls"] / "tls.key"
    assert key.read_text() == "KEY"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert (vols["cfg"] / "sub" / "a.txt").read_text() == "A"
    assert stat.S_IMODE((vols["cfg"] / "sub" / "a.txt").stat().st_mode) == 0o640
    assert not (vols["cfg"] / "b").exists()
    assert list(vols["opt"].iterdir()) == []
    assert (vols["proj"] / "b").read_text() == "B"
    assert stat.S_IMODE((vols["proj"] / "b").stat().st_mode) == 0o644
    assert (vols["proj"] / "name").read_text() == "p"

    container = {
        "volumeMounts": [
            {"name": "state", "mountPath": "/var/lib/kcp"},
            {"name": "scratch", "mountPath": "/var/lib/kcp/tmp", "subPath": "t"},
        ]
    }
    mounts = container_mounts(container, vols, {})
    assert mounts[0].mount_path == "/var/lib/kcp/tmp"
    assert mounts[0].local == vols["scratch"] / "t"
    assert mounts[0].local.is_dir()


def test_missing_secret_volume_is_a_config_error(tmp_path: Path) -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"volumes": [{"name": "v", "secret": {"secretName": "s"}}]},
    }
    with pytest.raises(ConfigError, match="Secret ns/s not found"):
        prepare_volumes(tmp_path, "n", pod, tmp_path / "p", {"s": None}, {})


def test_host_path_directory_must_exist(tmp_path: Path) -> None:
    pod = {
        "metadata": {},
        "spec": {"volumes": [{"name": "v", "hostPath": {"path": "/x", "type": "Directory"}}]},
    }
    with pytest.raises(ConfigError, match="not a directory"):
        prepare_volumes(tmp_path, "n", pod, tmp_path / "p", {}, {})


JOB: dict[str, Any] = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "slot-a", "namespace": "ns", "uid": "job-uid"},
    "spec": {
        "backoffLimit": 0,
        "template": {
            "metadata": {"labels": {"app": "slot"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "command": ["true"]}]},
        },
    },
}


def test_pod_from_job() -> None:
    pod = pod_from_job(JOB)
    meta = pod["metadata"]
    assert meta["name"].startswith("slot-a-") and len(meta["name"]) == len("slot-a-") + 5
    assert meta["name"][-5:].isalnum() and meta["name"][-5:].lower() == meta["name"][-5:]
    assert meta["namespace"] == "ns"
    assert meta["labels"] == {
        "app": "slot",
        "job-name": "slot-a",
        "batch.kubernetes.io/job-name": "slot-a",
        "controller-uid": "job-uid",
        "batch.kubernetes.io/controller-uid": "job-uid",
    }
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "slot-a",
            "uid": "job-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    # Like kube-controller-manager's: bound only when the template names a node (there is no scheduler).
    assert "nodeName" not in pod["spec"]
    bound = copy.deepcopy(JOB)
    bound["spec"]["template"]["spec"]["nodeName"] = "node-1"
    assert pod_from_job(bound)["spec"]["nodeName"] == "node-1"


def _pod(
    phase: str, uid: str, *, deleting: bool = False, ready: bool = False, restarts: int = 0
) -> dict[str, Any]:
    meta: dict[str, Any] = {"uid": uid, "name": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [{"restartCount": restarts}],
        },
    }


def test_job_plan_creates_first_pod_and_sets_start_time() -> None:
    plan = plan_job(JOB, [], {}, NOW)
    assert plan.create == 1
    assert plan.status["startTime"] == "2026-01-02T03:04:05Z"
    assert plan.status.get("active", 0) == 0


def test_job_plan_counts_active_and_ready() -> None:
    plan = plan_job(JOB, [_pod("Running", "p1", ready=True)], {}, NOW)
    assert plan.create == 0
    assert plan.status["active"] == 1
    assert plan.status["ready"] == 1


def test_job_plan_complete() -> None:
    plan = plan_job(JOB, [_pod("Succeeded", "p1")], {}, NOW)
    types = [c["type"] for c in plan.status["conditions"]]
    assert types == ["SuccessCriteriaMet", "Complete"]
    assert plan.status["succeeded"] == 1
    assert plan.status["completionTime"] == "2026-01-02T03:04:05Z"
    assert plan.create == 0


def test_job_plan_backoff_limit_zero_fails_on_first_failure() -> None:
    plan = plan_job(JOB, [_pod("Failed", "p1")], {}, NOW)
    failed = [c for c in plan.status["conditions"] if c["type"] == "Failed"]
    assert failed and failed[0]["reason"] == "BackoffLimitExceeded" and failed[0]["status"] == "True"
    assert plan.status["failed"] == 1
    assert plan.create == 0


def test_job_plan_retries_until_backoff_limit_and_remembers_deleted_pods() -> None:
    job = {**JOB, "spec": {**JOB["spec"], "backoffLimit": 1}}
    tracked: dict[str, str] = {}
    plan = plan_job(job, [_pod("Failed", "p1")], tracked, NOW)
    assert plan.create == 1 and "conditions" not in plan.status
    # p1 was deleted meanwhile; the count survives through `tracked`.
    plan = plan_job({**job, "status": plan.status}, [_pod("Failed", "p2")], tracked, NOW)
    assert plan.status["failed"] == 2
    assert any(c["type"] == "Failed" for c in plan.status["conditions"])


def test_job_plan_on_failure_counts_restarts() -> None:
    spec = {**JOB["spec"], "backoffLimit": 2}
    spec["template"] = {"spec": {**JOB["spec"]["template"]["spec"], "restartPolicy": "OnFailure"}}
    job = {**JOB, "spec": spec}
    running = _pod("Running", "p1", restarts=3)
    plan = plan_job(job, [running], {}, NOW)
    assert any(c["type"] == "Failed" for c in plan.status["conditions"])
    assert plan.delete == [running]


def test_job_plan_deadline() -> None:
    job = {
        **JOB,
        "spec": {**JOB["spec"], "activeDeadlineSeconds": 5},
        "status": {"startTime": "2026-01-02T03:03:00Z"},
    }
    running = _pod("Running", "p1")
    plan = plan_job(job, [running], {}, NOW)
    failed = [c for c in plan.status["conditions"] if c["type"] == "Failed"]
    assert failed[0]["reason"] == "DeadlineExceeded"
    assert plan.delete == [running]


def test_job_plan_finished_job_is_left_alone() -> None:
    job = {**JOB, "status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}}
    plan = plan_job(job, [], {}, NOW + timedelta(hours=1))
    assert plan.create == 0 and plan.delete == []
    assert plan.status["conditions"] == job["status"]["conditions"]


def test_job_plan_terminating_pods_count_as_failed() -> None:
    plan = plan_job(
        {**JOB, "spec": {**JOB["spec"], "backoffLimit": 3}}, [_pod("Running", "p1", deleting=True)], {}, NOW
    )
    assert plan.status.get("active", 0) == 0
    assert plan.status["terminating"] == 1
    assert plan.status["failed"] == 1
    assert plan.create == 1  # backoffLimit 3: replaced


DEPLOY: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "front", "namespace": "ns", "uid": "d-uid", "generation": 2},
    "spec": {
        "replicas": 2,
        "template": {"spec": {"containers": [{"name": "c", "command": ["sleep", "100"]}]}},
    },
}


def _dpod(
    thash: str, phase: str = "Running", *, ready: bool = True, deleting: bool = False
) -> dict[str, Any]:
    pod = _pod(phase, f"p-{thash}-{phase}", ready=ready, deleting=deleting)
    pod["metadata"]["labels"] = {"pod-template-hash": thash}
    return pod


def test_pod_from_deployment_carries_template_hash() -> None:
    pod = pod_from_deployment(DEPLOY)
    thash = template_hash(DEPLOY["spec"]["template"])
    assert pod["metadata"]["labels"]["pod-template-hash"] == thash
    assert pod["metadata"]["name"].startswith(f"front-{thash}-")
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "Deployment"


def test_deployment_plan_scales_up_and_reports() -> None:
    thash = template_hash(DEPLOY["spec"]["template"])
    plan = plan_deployment(DEPLOY, [_dpod(thash)], NOW)
    assert plan.create == 1
    assert plan.status["readyReplicas"] == 1
    assert plan.status["observedGeneration"] == 2
    available = next(c for c in plan.status["conditions"] if c["type"] == "Available")
    assert available["status"] == "False"


def test_deployment_plan_recreate_deletes_old_first_then_waits() -> None:
    old = _dpod("oldhash")
    plan = plan_deployment(DEPLOY, [old], NOW)
    assert plan.delete == [old] and plan.create == 0
    plan = plan_deployment(DEPLOY, [_dpod("oldhash", deleting=True)], NOW)
    assert plan.delete == [] and plan.create == 0  # waits until the old pod is gone


def test_deployment_plan_replaces_terminal_pods() -> None:
    thash = template_hash(DEPLOY["spec"]["template"])
    failed = _dpod(thash, "Failed", ready=False)
    plan = plan_deployment({**DEPLOY, "spec": {**DEPLOY["spec"], "replicas": 1}}, [failed], NOW)
    assert plan.delete == [failed] and plan.create == 1 and plan.replaced_terminal
