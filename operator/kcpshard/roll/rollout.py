"""Facts of the roll under way, read from its record: one spec per roll, its deadlines, what it runs. Pure."""

from __future__ import annotations

import datetime

from kcpshard.api import conditions as cond
from kcpshard.api.models import KcpShardSpec, RolloutStatus, SlotName
from kcpshard.k8s import names
from kcpshard.kcp.versions import Version, VersionError
from kcpshard.roll.observed import Observed

# The kcp release that reads identities from the cache server and leaves `identitycache` behind.
IDENTITY_CACHE_RELEASE = Version.parse("v0.33.0")


def roll_spec(obs: Observed) -> KcpShardSpec:
    """The spec the roll under way started with: its timeouts, its kcp URL, its flags.

    A spec edited during the roll waits for the next one. A roll recorded without its spec (an older
    operator started it) goes by the live spec.
    """
    return obs.target_spec or obs.spec


def slot_spec(obs: Observed, rollout: RolloutStatus) -> KcpShardSpec:
    """What the new slot runs: the roll's spec, or the old slot's while a Single roll restores it."""
    if rollout.restoring and obs.active_spec is not None:
        return obs.active_spec
    return roll_spec(obs)


def expected_revision(rollout: RolloutStatus) -> str:
    """The revision the new slot must run: the target, or the old one while restoring it."""
    if rollout.restoring and rollout.from_revision:
        return rollout.from_revision
    return rollout.target_revision


def deadline(rollout: RolloutStatus, seconds: int) -> datetime.datetime:
    """When the current step times out: counted from the step's start, else the roll's."""
    started = rollout.step_started_at or rollout.started_at
    return cond.parse_time(started) + datetime.timedelta(seconds=seconds)


def backup_job_name(shard: str, rollout: RolloutStatus) -> str:
    return names.backup_job_name(shard, rollout.id or rollout.target_revision)


def identity_cache_stale(spec: KcpShardSpec) -> bool:
    """A non-root shard on v0.33 or later no longer uses the `identitycache` ConfigMap of system:shard.

    Level-based rather than tied to the roll that crossed v0.33, so a crossing roll that failed after
    the flip is cleaned up by the next one; once deleted it stays gone, so the delete happens once.
    """
    if spec.shard.root:
        return False
    try:
        return Version.parse(spec.kcp.version) >= IDENTITY_CACHE_RELEASE
    except VersionError:
        return False


def job_of(obs: Observed, slot: str) -> str:
    """The name of a slot's Job, for the `kubectl logs job/...` a message points at."""
    view = obs.slots.get(SlotName(slot))
    return view.job.name if view is not None and view.job is not None else f"<{slot} slot's Job>"
