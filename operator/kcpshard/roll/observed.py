"""What a reconcile round sees: plain data the controller reads and the plan decides on.

Types only (no functions at module level): the controller's observer fills them, `kcpshard.roll.plan`
reads them, and the act handlers may read them too without reaching any rule of the roll.
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kcpshard.api import conditions as cond
from kcpshard.api.models import BackupReport, KcpShardSpec, KcpShardStatus, SlotName


@dataclass(frozen=True)
class JobView:
    name: str
    active: int = 0
    succeeded: int = 0
    failed: int = 0
    deleting: bool = False
    message: str = ""  # the Failed condition's reason and message, when there is one

    @property
    def finished(self) -> bool:
        return self.failed > 0 or self.succeeded > 0


@dataclass(frozen=True)
class SlotView:
    name: SlotName
    revision: str
    start: int = 0
    roll_id: str | None = None
    conditions: tuple[Mapping[str, Any], ...] = ()
    port: int | None = None
    exited_at: str | None = None
    exit_code: int | None = None
    started_at: str | None = None
    ready_at: str | None = None
    deleting: bool = False
    job: JobView | None = None
    pods: tuple[str, ...] = ()  # the live pods of this slot name and revision
    # The KcpSlot as read: the first status write of the round starts from it, not a GET (never compared).
    body: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def live_pods(self) -> int:
        return len(self.pods)

    def true(self, type_: str) -> bool:
        return cond.is_true(self.conditions, type_)

    def state(self, type_: str) -> str:
        """`True`, `False` or `Unknown`, as a person reads it in a message."""
        found = cond.find(self.conditions, type_)
        return str(found.get("status", "Unknown")) if found is not None else "Unknown"

    def failed(self, type_: str) -> Mapping[str, Any] | None:
        found = cond.find(self.conditions, type_)
        return found if found is not None and found.get("status") == "False" else None

    @property
    def gone(self) -> bool:
        """Its process has ended: its agent reported the exit, or no pod of it runs any more.

        A deleted Job vanishes at once while its pod still runs kcp's shutdown delay, so
        the Job alone says nothing about the process.
        """
        if self.exited_at is not None:
            return True
        job_done = self.job is None or self.job.finished
        return job_done and self.live_pods == 0

    @property
    def lost(self) -> bool:
        """A serving slot that will not serve on: its process ended, or its KcpSlot or Job was deleted
        (its kcp may still run out its shutdown delay, but nothing brings it back)."""
        return self.gone or self.deleting or self.job is None or self.job.deleting or self.job.finished


@dataclass(frozen=True)
class BackupView:
    """The backup Job of this roll: None fields while it runs."""

    job: str
    report: BackupReport | None = None
    error: str | None = None


@dataclass(frozen=True)
class LeaseReading:
    """kcp's controller lease as read through the front.

    `found` False: there is no lease. `error`: the read failed (kcp unreachable, no root material yet),
    so nothing is known about the holder.
    """

    found: bool = False
    holder: str | None = None
    renew_time: str | None = None
    acquire_time: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class Neighbour:
    """Another KcpShard as the operator's index of every shard holds it: what two shards may contend for."""

    namespace: str
    name: str
    created: str  # creationTimestamp: of two contenders, the older one keeps what it has
    node: str | None = None
    front_address: str = "127.0.0.1"
    front_port: int | None = None
    # The store, as roll/conflicts.py names it: etcd endpoints (normalised), the key prefix, or the
    # Secret that holds a kine DSN.
    etcd_endpoints: tuple[str, ...] = ()
    etcd_prefix: str = ""
    kine_ref: str | None = None


class FrontWorkload(enum.StrEnum):
    """The shard's front Deployment compared with what its spec asks for."""

    ABSENT = "Absent"
    STALE = "Stale"
    CURRENT = "Current"


@dataclass(frozen=True)
class FrontPodView:
    """A pod of the front Deployment, as a person reads it in a message."""

    name: str
    phase: str  # Pending, Running, Failed ...
    state: str = ""  # the container's: "waiting: CrashLoopBackOff (back-off 10s ...)", "running" ...
    deleting: bool = False


@dataclass(frozen=True)
class FrontAvailability:
    """The front Deployment's own availability (its controller's `Available` condition).

    `pods` are read only while it is not available or being replaced, to say why.
    """

    available: bool
    since: str | None = None  # when it became unavailable (or was created), while it is not available
    pods: tuple[FrontPodView, ...] = ()
    # A replacement pod is on its way (a changed template): since when it has made no progress.
    replacing_since: str | None = None
    # Read only while it is not available: why the shard's node is not Ready (its kubelet stopped
    # reporting, the node is gone); None while the node is Ready or cannot be read.
    node_down: str | None = None


@dataclass(frozen=True, kw_only=True)
class Seen:
    """What every round reads first: the KcpShard itself."""

    name: str = "<name>"  # the shard's, for commands in messages
    namespace: str = "default"
    generation: int = 1
    status: KcpShardStatus = field(default_factory=KcpShardStatus)
    retry_token: str | None = None
    reassert_token: str | None = None  # the kcpshard.dev/reassert annotation
    promote_token: str | None = None  # the kcpshard.dev/promote annotation
    abort_token: str | None = None  # the kcpshard.dev/abort annotation
    # The object as read: owner references and Events name it (never written back).
    shard: Mapping[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True, kw_only=True)
class ShardOnly(Seen):
    """A round that reads no further than the KcpShard: it is being deleted, or its spec does not parse."""

    deleting: bool = False
    spec_error: str | None = None


@dataclass(frozen=True)
class RootShardView:
    """The root shard a non-root shard names (spec.shard.rootShardRef), as read this round."""

    name: str
    found: bool
    serving_version: str | None = None  # the kcp version its active slot runs; None before it serves
    # Its front (kcp's base URL of the root shard): a non-root shard's probe creates its workspace there.
    front_url: str | None = None


@dataclass(frozen=True, kw_only=True)
class Observed(Seen):
    """Everything a decision needs, read once at the start of a round."""

    spec: KcpShardSpec  # the live spec: what the next roll goes to
    revision: str
    now: datetime.datetime
    created: str = ""
    # The spec the roll under way started with (status.rollout.targetSpec) and the one the active slot
    # runs (status.activeSpec), parsed once; None when absent or not parsable (see target_spec_error).
    target_spec: KcpShardSpec | None = None
    target_spec_error: str | None = None
    active_spec: KcpShardSpec | None = None
    slots: Mapping[SlotName, SlotView] = field(default_factory=dict)
    # Live pods per slot name, whatever KcpSlot they belong to (a deleted slot's pod may still stop).
    busy: Mapping[SlotName, tuple[str, ...]] = field(default_factory=dict)
    # The highest start counter of the slot Jobs per slot and revision (Jobs of deleted slots included).
    job_starts: Mapping[tuple[SlotName, str], int] = field(default_factory=dict)
    backup: BackupView | None = None
    neighbours: tuple[Neighbour, ...] = ()
    root_shard: RootShardView | None = None  # only for a non-root shard that names its root
    shared_secret: bool = True
    front: FrontWorkload = FrontWorkload.CURRENT
    # None: not read (no Deployment yet), taken as available.
    front_availability: FrontAvailability | None = None
    # kcp's controller lease: read only when the plan asks for it (ReadKcpLease), else None.
    kcp_lease: LeaseReading | None = None
