"""kcp's controller lease at the handover: which holder counts as the new slot's kcp, and how to get one.

kcp does not release its lease on exit, so a stopped kcp's lease stays until it expires (60 s). The
handover deletes a stale holder's lease so the new kcp takes it at once, but never the lease of a live
new holder.

What ties a holder to the new slot: the lease lives in this shard's own keyspace, and no other
shard's kcp can write there (roll/conflicts.py stalls a shard whose store overlaps another's before
anything starts). So the only kcp processes that can hold it are this shard's slots; with the old
slot's holder recorded (or the old slot exited before the holder renewed), any other live holder is
the new slot's kcp.
"""

from __future__ import annotations

import datetime

from kcpshard.api import conditions as cond
from kcpshard.api.models import RolloutStatus
from kcpshard.roll.actions import Action, Advance, FreeLease, SlotMark, Step, WatchLeaseHolder
from kcpshard.roll.observed import LeaseReading
from kcpshard.roll.route import next_step

# kcp renews its controller lease every retry period (2 s, client-go's leaderelection): a holder that
# does not renew within this long is dead.
RENEW_WINDOW_SECONDS = 7.0


def new_holder(lease: LeaseReading, rollout: RolloutStatus) -> str | None:
    """The lease's holder if it is, for sure, the new slot's kcp; None otherwise.

    Another holder than the one recorded when the roll started is new. With none recorded (the old kcp
    was already dead, or this is the first slot), a holder is new only if it renewed after the old slot
    exited (or the roll started): a dead kcp's lease stays until it expires, and must not pass for new.
    """
    holder = lease.holder
    if not lease.found or not holder or holder == rollout.from_holder:
        return None
    if rollout.from_holder is not None:
        return holder
    renewed = lease.renew_time or lease.acquire_time
    since = rollout.timestamps.get("oldExited") or rollout.started_at
    if renewed and cond.parse_time(renewed) > cond.parse_time(since):
        return holder
    return None


def renewed_by(first: LeaseReading, last: LeaseReading) -> str | None:
    """The holder that proved alive between two readings: it renewed, or it took the lease meanwhile."""
    if not last.found or not last.holder:
        return None
    if last.holder != first.holder or last.renew_time != first.renew_time:
        return last.holder
    return None


def handed_over(holder: str, rollout: RolloutStatus) -> Advance:
    message = f"controller lease held by {holder}"
    mark = SlotMark(rollout.to_slot, "LeaseHandedOver", "True", "NewHolder", message, holder=holder)
    return Advance(next_step(rollout, Step.HANDING_OVER_LEASE), message, marks=(mark,))


def hand_over(
    lease: LeaseReading, rollout: RolloutStatus, url: str, now: datetime.datetime, deadline: datetime.datetime
) -> Action:
    """The next move of the handover from one reading of the lease."""
    holder = new_holder(lease, rollout)
    if holder is not None:
        return handed_over(holder, rollout)
    remaining = max((deadline - now).total_seconds(), 0.1)
    if lease.found and lease.holder and rollout.from_holder is None:
        # Nobody was recorded: the holder is the new kcp if it is alive (the old slot has exited).
        return WatchLeaseHolder(url, window=min(RENEW_WINDOW_SECONDS, remaining / 2))
    # Held by a process from before this roll's slot (or by nobody): free it for the new one.
    return FreeLease(url, stale=lease.holder or rollout.from_holder, delete=lease.found, timeout=remaining)


def after_watch(
    first: LeaseReading,
    last: LeaseReading,
    rollout: RolloutStatus,
    url: str,
    now: datetime.datetime,
    deadline: datetime.datetime,
) -> Action:
    """A holder that renewed during the watch is the new kcp; a silent one is stale: free the lease."""
    alive = renewed_by(first, last)
    if alive is not None:
        return handed_over(alive, rollout)
    remaining = max((deadline - now).total_seconds(), 0.1)
    return FreeLease(url, stale=first.holder, delete=True, timeout=remaining)
