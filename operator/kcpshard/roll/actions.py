"""The actions the plan returns: each says everything its handler needs, so no handler decides anything.

Types only (no functions at module level): the act handlers import these and nothing else of the roll.
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kcpshard.api import conditions as cond
from kcpshard.api.models import BackupReport, EtcdStore, KcpShardSpec, RolloutStatus, RollReport, SlotName
from kcpshard.roll.observed import SlotView

# Without a wake-up, look again after this long: a safety net, not the driver.
RESYNC_SECONDS = 10.0

# The name prefix of probe workspaces; a leftover of a cut-short probe is found by it.
PROBE_PREFIX = "kcpshard-probe-"
# A non-root shard's probe workspaces (made in its root shard's `root`), followed by a digest of the
# shard's kcp name: a root's clean-up by PROBE_PREFIX never deletes another shard's probe under way.
SHARD_PROBE_PREFIX = "kcpshard-shard-probe-"


class Step(enum.StrEnum):
    BACKING_UP = "BackingUp"
    STARTING = "Starting"
    WAITING_READY = "WaitingReady"
    FLIPPING = "Flipping"
    STOPPING_OLD = "StoppingOld"
    HANDING_OVER_LEASE = "HandingOverLease"
    PROBING = "Probing"
    DRAINING = "Draining"
    RETIRING = "Retiring"


@dataclass(frozen=True)
class SlotMark:
    """A step condition to set on a KcpSlot (and the lease holder it names, when it leads)."""

    slot: str
    type: str
    status: cond.Status
    reason: str
    message: str
    holder: str | None = None


@dataclass(frozen=True)
class Record:
    """The active record and front backend an aborted flip puts back (all None: nothing served before)."""

    slot: str | None = None
    revision: str | None = None
    port: int | None = None


# (status, reason, message) of one kstatus condition.
Triple = tuple[cond.Status, str, str]


@dataclass(frozen=True)
class Verdict:
    """The shard's kstatus conditions once a roll has ended, as the plan decided them."""

    ready: Triple
    reconciling: Triple
    stalled: Triple

    @property
    def stalls(self) -> bool:
        return self.stalled[0] == "True"


@dataclass(frozen=True)
class Event:
    """An Event about the shard: its CamelCase reason, what a person reads, Normal or Warning."""

    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True)
class RollEnd:
    """How a roll that did not succeed is recorded. The writer adds to `report` the time the roll ended
    (the timestamp named by its result); the rest is written as it stands."""

    report: RollReport
    verdict: Verdict
    event: Event
    reassert: str | None = None  # BootstrapReassertNeeded's message: the aborted upgrade's kcp ran


@dataclass(frozen=True)
class Action:
    """Base of every planned action."""


@dataclass(frozen=True)
class Because(Action):
    """An action that says why: a CamelCase reason and a message a person can act on."""

    reason: str
    message: str


# ----- the shard -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FirstSight(Action):
    """A shard never seen before: write Ready=Unknown before anything else."""


@dataclass(frozen=True)
class CreateSharedSecret(Action):
    """The Secret that keeps the shard's root material; its first slot fills it."""


@dataclass(frozen=True)
class CreateFront(Action):
    """The front Deployment (front agent + HAProxy on the shard's node)."""


@dataclass(frozen=True)
class UpdateFront(Action):
    """The front Deployment no longer matches what the spec and the operator ask for."""


@dataclass(frozen=True)
class ReportFrontRestarts(Action):
    """The front agent counted HAProxy restarts the operator has not reported yet: a Warning Event, then
    the count is recorded as reported (status.front.restartsReported)."""

    total: int
    new: int
    last: str


@dataclass(frozen=True)
class Steady(Action):
    """Nothing to roll: the active slot runs the desired revision. Its kcp-admin kubeconfig is published."""

    message: str = ""


@dataclass(frozen=True)
class Stall(Because):
    """Do nothing more until the spec (or the retry annotation) changes."""


@dataclass(frozen=True)
class Hold(Because):
    """The roll waits on something outside this shard (its root, a person): Reconciling=True with the
    reason, no Stall; `until` when it gives up by itself."""

    until: datetime.datetime | None = None


@dataclass(frozen=True)
class Wait(Action):
    reason: str
    until: datetime.datetime | None = None


@dataclass(frozen=True)
class ReadKcpLease(Action):
    """The decision depends on who holds kcp's controller lease: read it (through `url`), then plan again."""

    url: str


# ----- a roll --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StartRoll(Action):
    """Record the roll; `event` says it started (RollStarted), or that the serving slot was lost."""

    rollout: RolloutStatus
    event: Event


@dataclass(frozen=True)
class Advance(Action):
    """Record the next step. `marks` go on the slots first; leaving the flip also records `active_spec`
    and publishes the new slot's kcp-admin kubeconfig."""

    step: Step
    message: str
    backup: BackupReport | None = None
    marks: tuple[SlotMark, ...] = ()
    active_spec: Mapping[str, Any] | None = None
    publish_admin: bool = False
    warning: tuple[str, str] | None = None  # a Warning Event (reason, message) besides the step's own
    stamps: tuple[tuple[str, str], ...] = ()  # report timestamps seen inside the step (the probe's)


@dataclass(frozen=True)
class StartBackup(Action):
    """Run the store snapshot Job of this roll, of its etcd store (the plan refuses a backup of kine)."""

    job: str
    spec: KcpShardSpec
    revision: str
    etcd: EtcdStore


@dataclass(frozen=True)
class CreateSlot(Action):
    slot: SlotName
    revision: str
    start: int
    spec: KcpShardSpec  # what the slot runs: the roll's recorded spec (the old one when restoring)
    roll_id: str | None = None


@dataclass(frozen=True)
class DeleteSlot(Action):
    """Remove a KcpSlot (and through ownerReferences its Job): a leftover or a retired slot."""

    slot: SlotName
    why: str


@dataclass(frozen=True)
class Flip(Action):
    """Persist the new active record and ask the front for the new backend, in one write."""

    slot: SlotName
    port: int
    revision: str


@dataclass(frozen=True)
class StopSlot(Action):
    slot: SlotName
    job: str


@dataclass(frozen=True)
class WatchLeaseHolder(Action):
    """Watch kcp's controller lease for up to `window` seconds, until it changes (a live holder renews)."""

    url: str
    window: float


@dataclass(frozen=True)
class FreeLease(Action):
    """Delete kcp's controller lease (when there is one) and wait up to `timeout` seconds for a holder
    other than `stale`: the new slot's kcp takes it at once instead of after the lease expires."""

    url: str
    stale: str | None
    delete: bool
    timeout: float


@dataclass(frozen=True)
class ProbeVia:
    """Where a non-root shard's probe workspace is made: kcp serves the `root` workspace only on the root
    shard, so the workspace is created there and placed on this shard by its Shard's `name` label."""

    shard: str  # the root's KcpShard: its front and its shard-admin credentials
    url: str  # the root's front


@dataclass(frozen=True)
class Probe(Action):
    """Create a workspace, wait until it is Ready, delete it: proves kcp's controllers work."""

    url: str
    prefix: str
    timeout: float
    # The name prefix of this shard's probe workspaces: the clean-up of an earlier probe cut short deletes
    # these before the new one starts, and never another shard's.
    leftovers: str = PROBE_PREFIX
    # The kcp version that no longer reads the `identitycache` ConfigMap: delete it (None: keep it).
    stale_identity_cache: str | None = None
    via: ProbeVia | None = None  # a non-root shard's probe, through its root shard
    # The kcp shard the workspace is placed on (kcp labels each Shard object `name: <shard name>`), so a
    # root's probe never lands on another shard, which may be rolling itself.
    location: str | None = None


@dataclass(frozen=True)
class RequestDrain(Action):
    """Ask the front to close the connections left on `slot`. `withdraw`: the ask to serve it goes too
    (Single: it is the stopping old kcp, and the front never drains the backend it is asked to serve)."""

    slot: SlotName
    withdraw: bool = False


@dataclass(frozen=True)
class Finish(Action):
    """The roll reached its end. The writer adds to `report` when it finished and what each step took
    (the new slot's own start-to-ready from `to_slot`), and says so in the Event `event`."""

    message: str
    report: RollReport
    verdict: Verdict
    event: str
    warning: bool = False
    to_slot: SlotView | None = None


@dataclass(frozen=True)
class Abort(Because):
    """Before the flip: stop the new slot, keep (or put back) the old one serving, stall."""

    put_back: Record | None = None  # the flip was asked for: the previous record and backend
    remove: SlotName | None = None  # the new slot, deleted once the roll has ended
    end: RollEnd = field(kw_only=True)


@dataclass(frozen=True)
class Restore(Because):
    """Single shape: the new revision failed after the old slot stopped; start the old revision again,
    from `step`."""

    holder: str | None = None  # the lease holder now: the failed process, if it led; not the restored one
    step: Step = field(kw_only=True)
    event: Event = field(kw_only=True)


@dataclass(frozen=True)
class Fail(Because):
    """After the flip: end the roll as failed and stall; never flip back on a live store."""

    end: RollEnd = field(kw_only=True)
