"""The store-backup Job run before a roll (`spec.roll.backup`), and the parser of its outcome.

The Job runs `kcpshard agent backup` (operator/kcpshard/agent/backup.py) on the shard's node; the agent
reports on its own Job's annotations, which `backup_result` reads. Like `builders.py`: pure functions.
The Job fields are those of `k8s.io/api/batch/v1/types.go` (backoffLimit, activeDeadlineSeconds); a Job
that hits its deadline gets the `Failed` condition with reason `DeadlineExceeded`
(`pkg/controller/job/job_controller.go`).
"""

from __future__ import annotations

from typing import Any

from kcpshard.api.models import BackupReport, EtcdStore, KcpShardSpec
from kcpshard.k8s.builders import (
    DEFAULT_IMAGE,
    agent_security_context,
    downward_env,
    labels,
    owner_reference,
    shard_state_dir,
    state_volume,
)
from kcpshard.k8s.names import LABEL_REVISION, agent_name, backup_job_name

ANNOTATION_PATH = "kcpshard.dev/backup-path"
ANNOTATION_SECONDS = "kcpshard.dev/backup-seconds"
ANNOTATION_BYTES = "kcpshard.dev/backup-bytes"
ANNOTATION_ERROR = "kcpshard.dev/backup-error"
BACKUP_KEEP = 3


def backups_dir(namespace: str, shard: str) -> str:
    return f"{shard_state_dir(namespace, shard)}/backups"


def agent_timeout_seconds(deadline: int) -> int:
    """The agent's own limit: under the Job's activeDeadlineSeconds, so it reports before it is killed."""
    margin = max(1, min(30, deadline // 10))
    return max(1, deadline - margin)


def backup_job(
    shard_obj: dict[str, Any],
    spec: KcpShardSpec,
    *,
    revision: str,
    attempt: int,
    image: str = DEFAULT_IMAGE,
    agent_command: tuple[str, ...] = ("kcpshard",),
    name: str | None = None,
    etcd: EtcdStore | None = None,
) -> dict[str, Any]:
    """The Job that snapshots the shard's etcd (`etcd`, else the spec's) into the node's state dir.

    `name` replaces the name made of the revision and attempt: the agent annotates the Job named on its
    command line, so a caller that wants another name passes it here rather than renaming the returned
    object. Raises ValueError without an etcd store: the plan never asks for one (it refuses a backup of
    kine as InvalidSpec).
    """
    etcd = etcd or spec.store.etcd
    if etcd is None:
        raise ValueError("backup needs an etcd store")
    meta = shard_obj["metadata"]
    shard, namespace = meta["name"], meta["namespace"]
    name = name or backup_job_name(shard, f"{revision[:10]}-{attempt}")
    deadline = spec.roll.backup_timeout_seconds
    volume, mount = state_volume()
    command = [*agent_command, "agent", "backup", "--namespace", namespace, "--job-name", name]
    for endpoint in etcd.endpoints:
        command += ["--endpoint", endpoint]
    if etcd.tls_secret_ref is not None:
        command += ["--tls-secret", etcd.tls_secret_ref.name]
    command += ["--dir", backups_dir(namespace, shard), "--keep", str(BACKUP_KEEP)]
    command += ["--timeout", str(agent_timeout_seconds(deadline))]
    job_labels = labels(shard, "backup", **{LABEL_REVISION: revision})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": job_labels,
            "ownerReferences": [owner_reference(shard_obj)],
        },
        "spec": {
            # One try: a failed backup stalls the roll for a person to look at, it is not retried blindly.
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline,
            "template": {
                "metadata": {"labels": job_labels},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeName": spec.node,
                    # etcd often listens on the node's loopback only.
                    "hostNetwork": True,
                    "serviceAccountName": agent_name(shard),
                    "containers": [
                        {
                            "name": "backup",
                            "image": image,
                            "command": command,
                            "env": [*downward_env(), {"name": "JOB_NAME", "value": name}],
                            "volumeMounts": [mount],
                            "securityContext": agent_security_context(),
                        }
                    ],
                    "volumes": [volume],
                },
            },
        },
    }


def _failed_condition(job: dict[str, Any]) -> dict[str, Any] | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Failed" and cond.get("status") == "True":
            return dict(cond)
    return None


def backup_result(job: dict[str, Any]) -> BackupReport | str | None:
    """What the backup Job reported: the snapshot, an error for a person, or None while it runs.

    A Job that failed without a report (killed at its deadline, pod never started) is an error too, so the
    operator need not wait for its own timeout.
    """
    meta = job.get("metadata") or {}
    name = str(meta.get("name") or "")
    notes = meta.get("annotations") or {}
    path, seconds = notes.get(ANNOTATION_PATH), notes.get(ANNOTATION_SECONDS)
    if path and seconds is not None:
        raw_bytes = notes.get(ANNOTATION_BYTES)
        try:
            size = int(raw_bytes) if raw_bytes not in (None, "") else None
            return BackupReport(job=name, path=path, seconds=float(seconds), size_bytes=size)
        except ValueError:
            return f"backup Job {name} has malformed report annotations"
    error = notes.get(ANNOTATION_ERROR)
    if error:
        return str(error)
    failed = _failed_condition(job)
    if failed is not None:
        why = ": ".join(p for p in (failed.get("reason"), failed.get("message")) if p)
        return f"backup Job {name} failed without a report" + (f": {why}" if why else "")
    return None
