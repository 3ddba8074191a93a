"""The shard's own objects (shared Secret, front Deployment) and the store backup Job, against a
recording API: requests in order, and a request failing halfway."""

from __future__ import annotations

import pytest

from fakes import IDENTITY_KEPT, IDENTITY_MADE, REV, SPEC, RecordingApi, act_context, observed
from kcpshard.controller.act import backup, objects
from kcpshard.k8s import builders
from kcpshard.k8s.api import DEPLOYMENTS, JOBS, ROLES, SECRETS, ApiError
from kcpshard.roll.actions import StartBackup


async def test_shared_secret_is_created_once() -> None:
    api = RecordingApi()
    obs = observed(api)
    await objects.create_shared_secret(act_context(api), obs)
    await objects.create_shared_secret(act_context(api), obs)  # an earlier round made it: fine
    assert api.writes() == [("create", "secrets", "root-shared"), ("create", "secrets", "root-shared")]
    assert api.stored(SECRETS, "root-shared")["data"] == {}


async def test_front_is_created_then_replaced_at_its_resource_version() -> None:
    api = RecordingApi()
    obs = observed(api)
    await objects.create_front(act_context(api), obs)
    budget = ("create", "poddisruptionbudgets", "root-serving")
    assert api.requests == [*IDENTITY_MADE, budget, ("create", "deployments", "root-front")]
    api.touch(DEPLOYMENTS, "root-front", lambda d: d["metadata"].update(annotations={}))
    api.requests.clear()
    await objects.update_front(act_context(api), obs)
    assert api.requests == [
        *IDENTITY_KEPT,
        budget,  # an operator upgrade brings it to a shard made before
        ("get", "deployments", "root-front"),
        ("replace", "deployments", "root-front"),
    ]
    front = api.stored(DEPLOYMENTS, "root-front")
    assert builders.TEMPLATE_HASH in front["metadata"]["annotations"]


async def test_front_update_racing_another_writer_fails_and_the_next_round_retries() -> None:
    api = RecordingApi()
    obs = observed(api)
    await objects.create_front(act_context(api), obs)
    api.fail("replace", "deployments", error=ApiError(409, "Conflict", "modified"))
    with pytest.raises(ApiError, match="409"):
        await objects.update_front(act_context(api), obs)
    await objects.update_front(act_context(api), obs)
    assert api.writes()[-1] == ("replace", "deployments", "root-front")


async def test_backup_job_is_created_once_under_the_planned_name() -> None:
    api = RecordingApi()
    assert SPEC.store.etcd is not None
    action = StartBackup("root-backup-r1", SPEC, REV, etcd=SPEC.store.etcd)
    assert await backup.start_backup(act_context(api), action, observed(api)) is None
    assert await backup.start_backup(act_context(api), action, observed(api)) is None
    job = ("create", "jobs", "root-backup-r1")
    assert [w for w in api.writes() if w[1] == "jobs"] == [job, job]
    assert api.names(JOBS) == ["root-backup-r1"]
    # The agent of the backup Job may record its result on it, and on no other Job.
    [jobs_rule] = [r for r in api.stored(ROLES, "root-agent")["rules"] if r["resources"] == ["jobs"]]
    assert jobs_rule == {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "patch"],
                         "resourceNames": ["root-backup-r1"]}  # fmt: skip
