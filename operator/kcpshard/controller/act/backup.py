"""The store backup Job of a roll."""

from __future__ import annotations

from kcpshard.controller.act.context import ActContext, create_once
from kcpshard.controller.act.identity import ensure_agent_identity
from kcpshard.k8s import backup_job
from kcpshard.k8s.api import JOBS
from kcpshard.roll.actions import StartBackup
from kcpshard.roll.observed import Observed


async def start_backup(ctx: ActContext, action: StartBackup, obs: Observed) -> None:
    """Create the backup Job of the etcd store the plan named."""
    await ensure_agent_identity(ctx, obs, [action.spec], jobs=[action.job])
    job = backup_job.backup_job(
        dict(obs.shard),
        action.spec,
        revision=action.revision,
        attempt=0,
        image=ctx.config.image,
        agent_command=ctx.config.agent_command,
        name=action.job,
        etcd=action.etcd,
    )
    await create_once(ctx, JOBS, job)
