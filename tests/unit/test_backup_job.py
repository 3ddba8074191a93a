"""The backup Job builder, the parser of its report, and the pure parts of the backup agent."""

from __future__ import annotations

import base64
import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kcpshard.agent import backup as agent
from kcpshard.agent import errors, etcdctl, snapshot_files
from kcpshard.api.models import BackupReport, KcpShardSpec
from kcpshard.k8s import backup_job as bj
from kcpshard.k8s import builders

SHARD: dict[str, Any] = {
    "apiVersion": "kcpshard.dev/v1alpha1",
    "kind": "KcpShard",
    "metadata": {"name": "root", "namespace": "kcp", "uid": "shard-uid"},
}
REVISION = "0123456789abcdef"


def _spec(store: dict[str, Any] | None = None, **roll: Any) -> KcpShardSpec:
    return KcpShardSpec.model_validate(
        {
            "kcp": {"version": "v0.32.1"},
            "node": "node-7",
            "store": store or {"etcd": {"endpoints": ["http://127.0.0.1:2379", "http://10.0.0.2:2379"]}},
            "front": {"port": 6443},
            "roll": {"backup": True, **roll},
        }
    )


def _command(job: dict[str, Any]) -> list[str]:
    return list(job["spec"]["template"]["spec"]["containers"][0]["command"])


def _agent_args(command: list[str]) -> list[str]:
    return command[command.index("backup") + 1 :]


def _flag_values(command: list[str], flag: str) -> list[str]:
    return [command[i + 1] for i, part in enumerate(command) if part == flag]


def test_backup_job_is_a_one_shot_job_on_the_shard_node_owned_by_the_shard() -> None:
    job = bj.backup_job(SHARD, _spec(backupTimeoutSeconds=120), revision=REVISION, attempt=2)
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    assert job["metadata"]["name"] == "root-backup-0123456789-2"
    assert job["metadata"]["namespace"] == "kcp"
    owner = job["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("KcpShard", "shard-uid", True)
    assert job["metadata"]["labels"][builders.LABEL_COMPONENT] == "backup"
    assert job["metadata"]["labels"][builders.LABEL_REVISION] == REVISION
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["activeDeadlineSeconds"] == 120
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["nodeName"] == "node-7"
    assert pod["hostNetwork"] is True
    assert pod["serviceAccountName"] == "root-agent"
    assert pod["volumes"][0]["hostPath"]["path"] == builders.STATE_ROOT
    assert pod["containers"][0]["volumeMounts"][0]["mountPath"] == builders.STATE_ROOT
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["JOB_NAME"]["value"] == "root-backup-0123456789-2"
    assert env["POD_UID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
    assert "POD_NAME" in env


def test_backup_job_command_names_every_endpoint_the_dir_and_its_own_job() -> None:
    job = bj.backup_job(SHARD, _spec(), revision=REVISION, attempt=0, agent_command=("python", "-m", "x"))
    command = _command(job)
    assert command[:5] == ["python", "-m", "x", "agent", "backup"]
    assert _flag_values(command, "--namespace") == ["kcp"]
    assert _flag_values(command, "--job-name") == [job["metadata"]["name"]]
    assert _flag_values(command, "--endpoint") == ["http://127.0.0.1:2379", "http://10.0.0.2:2379"]
    assert _flag_values(command, "--dir") == ["/var/lib/kcpshard/kcp/root/backups"]
    assert _flag_values(command, "--keep") == ["3"]
    assert "--tls-secret" not in command
    # The agent gives up before the Job's deadline kills it, so it can still report why.
    (timeout,) = _flag_values(command, "--timeout")
    assert 0 < int(timeout) < job["spec"]["activeDeadlineSeconds"]
    # The command line is one the agent's own parser accepts.
    opts = agent.parse_args(_agent_args(command))
    assert opts.endpoints == ["http://127.0.0.1:2379", "http://10.0.0.2:2379"]
    assert opts.job_name == job["metadata"]["name"]


def test_backup_job_passes_the_tls_secret() -> None:
    store = {"etcd": {"endpoints": ["https://127.0.0.1:2379"], "tlsSecretRef": {"name": "etcd-client"}}}
    command = _command(bj.backup_job(SHARD, _spec(store), revision=REVISION, attempt=0))
    assert _flag_values(command, "--tls-secret") == ["etcd-client"]
    assert agent.parse_args(_agent_args(command)).tls_secret == "etcd-client"


def test_backup_job_name_given_by_the_caller_is_used_everywhere() -> None:
    job = bj.backup_job(SHARD, _spec(), revision=REVISION, attempt=0, name="root-backup-roll7")
    assert job["metadata"]["name"] == "root-backup-roll7"
    assert _flag_values(_command(job), "--job-name") == ["root-backup-roll7"]
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["JOB_NAME"] == "root-backup-roll7"


def test_kine_store_cannot_be_backed_up() -> None:
    spec = _spec({"kine": {"endpointSecretRef": {"name": "dsn"}}})
    with pytest.raises(ValueError, match="backup needs an etcd store"):
        bj.backup_job(SHARD, spec, revision=REVISION, attempt=0)


def test_backup_job_of_the_longest_shard_name_fits_a_label() -> None:
    shard = {**SHARD, "metadata": {**SHARD["metadata"], "name": "s" * 63}}
    name = bj.backup_job(shard, _spec(), revision=REVISION, attempt=0)["metadata"]["name"]
    assert len(name) <= 63
    assert name.startswith("s" * 40)


def test_agent_timeout_stays_under_the_deadline() -> None:
    for deadline in (1, 2, 5, 60, 600, 86400):
        assert 1 <= bj.agent_timeout_seconds(deadline) <= max(1, deadline - 1)


# -- backup_result ------------------------------------------------------------------------------------


def _job(annotations: dict[str, str] | None = None, conditions: list[dict[str, str]] | None = None) -> dict:
    return {
        "metadata": {"name": "root-backup-x-0", "annotations": annotations or {}},
        "status": {"conditions": conditions or []},
    }


def test_backup_result_reads_the_success_annotations() -> None:
    job = _job({bj.ANNOTATION_PATH: "/b/1.db", bj.ANNOTATION_SECONDS: "1.250", bj.ANNOTATION_BYTES: "20512"})
    assert bj.backup_result(job) == BackupReport(
        job="root-backup-x-0", path="/b/1.db", seconds=1.25, size_bytes=20512
    )


def test_backup_result_gives_the_error_annotation() -> None:
    message = "etcdctl snapshot save failed: context deadline exceeded (endpoints http://127.0.0.1:1)"
    assert bj.backup_result(_job({bj.ANNOTATION_ERROR: message})) == message


def test_backup_result_is_none_while_the_job_runs() -> None:
    assert bj.backup_result(_job()) is None
    assert bj.backup_result({"metadata": {"name": "j"}}) is None


def test_backup_result_reports_a_job_that_failed_without_a_report() -> None:
    failed = {"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "too long"}
    result = bj.backup_result(_job(conditions=[failed]))
    assert isinstance(result, str)
    assert "DeadlineExceeded" in result and "root-backup-x-0" in result


def test_backup_result_refuses_malformed_numbers() -> None:
    result = bj.backup_result(_job({bj.ANNOTATION_PATH: "/b/1.db", bj.ANNOTATION_SECONDS: "soon"}))
    assert isinstance(result, str) and "malformed" in result


# -- the agent's pure parts ---------------------------------------------------------------------------


def test_etcdctl_error_prefers_the_error_line_and_adds_the_dial_error() -> None:
    stderr = "\n".join(
        [
            '{"level":"warn","msg":"retrying of unary invoker failed","error":"rpc error: code = '
            'DeadlineExceeded desc = latest balancer error: connection error: desc = \\"transport: Error '
            'while dialing dial tcp 127.0.0.1:1: connect: connection refused\\""}',
            "Failed to get the status of endpoint http://127.0.0.1:1 (context deadline exceeded)",
        ]
    )
    message = etcdctl.etcdctl_error(stderr, 1)
    assert message.startswith("context deadline exceeded: ")
    assert message.endswith("dial tcp 127.0.0.1:1: connect: connection refused")
    assert etcdctl.etcdctl_error("Error: snapshot must be requested to one selected node\n", 1) == (
        "snapshot must be requested to one selected node"
    )
    assert etcdctl.etcdctl_error("", 2) == "exit code 2"


def test_usage_errors_are_clear() -> None:
    with pytest.raises(errors.UsageError, match="--keep"):
        agent.parse_args(
            ["--namespace", "n", "--job-name", "j", "--endpoint", "e", "--dir", "d", "--keep", "0"]
        )


def test_prune_keeps_the_newest_and_the_current_snapshot(tmp_path: Path) -> None:
    names = [f"2024010{d}T000000Z-old-{d}.db" for d in range(1, 6)]
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "20240101T000000Z-killed.db.part").write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("not a snapshot")
    current = snapshot_files.snapshot_path(tmp_path, "new", datetime(2025, 1, 1, tzinfo=UTC))
    current.write_bytes(b"x")
    gone = snapshot_files.prune(tmp_path, 3, current)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted([current.name, names[4], names[3], "notes.txt"])
    assert len(gone) == 4


def test_tls_files_are_private_and_flags_point_at_them(tmp_path: Path) -> None:
    data = {k: base64.b64encode(f"pem of {k}".encode()).decode() for k in ("ca.crt", "tls.crt", "tls.key")}
    flags = snapshot_files.write_tls_files(tmp_path, data, "kcp/etcd-client")
    assert flags == [f"--cacert={tmp_path}/ca.crt", f"--cert={tmp_path}/tls.crt", f"--key={tmp_path}/tls.key"]
    for key in ("ca.crt", "tls.crt", "tls.key"):
        assert stat.S_IMODE(os.stat(tmp_path / key).st_mode) == 0o600
    assert (tmp_path / "tls.key").read_bytes() == b"pem of tls.key"


def test_tls_secret_with_a_cert_but_no_key_is_refused_without_echoing_it(tmp_path: Path) -> None:
    secret_pem = base64.b64encode(b"-----BEGIN CERTIFICATE----- very private").decode()
    with pytest.raises(snapshot_files.BackupFailed) as err:
        snapshot_files.write_tls_files(tmp_path, {"tls.crt": secret_pem}, "kcp/etcd-client")
    assert "tls.crt but no tls.key" in str(err.value)
    assert "private" not in str(err.value) and secret_pem not in str(err.value)
