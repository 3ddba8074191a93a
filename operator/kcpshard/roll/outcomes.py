"""What an act handler saw, when the plan decides what follows from it.

Types only (no functions at module level). A handler returns one of these and nothing else; the plan
(`kcpshard.roll.plan`) turns it into the next action of the same round.
"""

from __future__ import annotations

from dataclasses import dataclass

from kcpshard.roll.observed import LeaseReading


@dataclass(frozen=True)
class Outcome:
    """Base of every outcome."""


@dataclass(frozen=True)
class Failed(Outcome):
    """The action could not be carried out; the plan decides what that means for the roll."""

    reason: str
    message: str


@dataclass(frozen=True)
class Refused(Outcome):
    """The API server refused a request in a way that asking again cannot change (400, 403, 422)."""

    status: int
    reason: str
    message: str  # the API server's own


@dataclass(frozen=True)
class SlotCreated(Outcome):
    """The new slot's KcpSlot and Job exist: from `at` (precise) on, starting it is the node's work."""

    slot: str
    at: str


@dataclass(frozen=True)
class SlotGone(Outcome):
    """The KcpSlot the action deleted is gone (its Job and pods may still stop): the plan goes on from the
    round's observation without it."""

    slot: str


@dataclass(frozen=True)
class LeaseWatched(Outcome):
    """kcp's controller lease as it was when the watch ended."""

    last: LeaseReading


@dataclass(frozen=True)
class HolderSeen(Outcome):
    """A holder other than the stale one took kcp's controller lease."""

    holder: str


@dataclass(frozen=True)
class NoNewHolder(Outcome):
    """Nobody but the stale holder took the lease in time; `detail` says what was seen last."""

    waited: float
    detail: str


# Stamped inside the probe step (by the operator's kcp client): the workspace created, and Ready.
PROBE_STAMPS = ("probeCreated", "probeWorkspaceReady")


@dataclass(frozen=True)
class ProbeReady(Outcome):
    """The probe workspace became Ready and was deleted."""

    workspace: str
    ready_seconds: float
    identity_cache_deleted: bool = False
    # When the workspace was created and became Ready (cond.precise): the probe's parts in the report
    stamps: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ProbeNotReady(Outcome):
    waited: float
    detail: str
