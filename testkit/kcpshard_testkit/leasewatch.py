"""Watches kcp's controller lease during a roll and measures the leaderless gap at each change of holder.

kcp's controllers elect a leader on the Lease `kube-system/kcp-controllers` in `system:admin` (client-go
leader election: the holder writes `renewTime` every retry period, a new holder writes `acquireTime` when
it takes the lease; both are metav1.MicroTime). The gap is read from those times, as kcp wrote them, not
from when this watch happened to poll: polling faster than the retry period is enough to see the old
holder's last renewal, whatever the poll interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from kcpshard.kcp.client import LEASE_PATH
from kcpshard_testkit.load import kube_client


def parse_micro_time(value: object) -> datetime | None:
    """A MicroTime (`2026-12-04T07:00:56.073123Z`) or a second-precision time (`...56Z`); None if not one."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Observation:
    """One distinct state of the lease as polled; `holder` None: no lease (404) or a lease with no holder."""

    holder: str | None
    renew_time: datetime | None = None
    acquire_time: datetime | None = None
    seen_at: float = 0.0  # time.time() of the poll that first saw this state

    @classmethod
    def from_lease(cls, lease: Mapping[str, Any] | None, seen_at: float = 0.0) -> Observation:
        spec = (lease or {}).get("spec") or {}
        holder = spec.get("holderIdentity") or None
        return cls(
            holder=str(holder) if holder else None,
            renew_time=parse_micro_time(spec.get("renewTime")),
            acquire_time=parse_micro_time(spec.get("acquireTime")),
            seen_at=seen_at,
        )

    @property
    def key(self) -> tuple[str | None, datetime | None, datetime | None]:
        return (self.holder, self.renew_time, self.acquire_time)


@dataclass(frozen=True)
class Handover:
    """The lease passed from `from_holder` to `to_holder`; `gap_seconds` nobody led (negative: overlap)."""

    from_holder: str
    to_holder: str
    last_renewal: datetime  # the old holder's last renewTime seen
    first_renewal: datetime  # the new holder's acquireTime, else its first renewTime seen
    gap_seconds: float


def handovers(observations: Iterable[Observation]) -> list[Handover]:
    """Each change of holder in a sequence of observations, with the gap between the two holders' times.

    A deleted lease (or one with no holder) in between does not end the old holder's tenure: the gap runs
    from its last renewal seen to the next holder's acquisition. The same holder renewing is no handover.
    An observation of a holder with neither renewTime nor acquireTime carries no time and is skipped.
    """
    out: list[Handover] = []
    holder: str | None = None
    last: datetime | None = None
    for obs in observations:
        if obs.holder is None:
            continue
        if obs.holder == holder:
            seen = obs.renew_time or obs.acquire_time
            if seen is not None and (last is None or seen > last):
                last = seen
            continue
        first = obs.acquire_time or obs.renew_time
        if first is None:
            continue
        if holder is not None and last is not None:
            out.append(Handover(holder, obs.holder, last, first, (first - last).total_seconds()))
        holder = obs.holder
        last = obs.renew_time or obs.acquire_time
    return out


@dataclass
class LeaseWatch:
    """Polls the controller lease every `interval` seconds from `start()` until `stop()`.

    Records each distinct (holderIdentity, renewTime, acquireTime); a 404 is recorded as "no lease". A poll
    that fails (connection error, timeout, another status, a body that is not JSON) is skipped and counted
    in `failed_polls`. `handovers()` are those seen so far; `stop()` returns them.
    """

    base_url: str
    token: str
    ca_pem: bytes
    interval: float = 0.1
    observations: list[Observation] = field(default_factory=list, init=False)
    polls: int = field(default=0, init=False)
    failed_polls: int = field(default=0, init=False)
    _client: httpx.AsyncClient | None = field(default=None, init=False, repr=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False, repr=False)

    async def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("LeaseWatch already started")
        self._client = kube_client(self.base_url, self.token, self.ca_pem, max(self.interval * 10, 2.0))
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> list[Handover]:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._client is not None:
            await self._client.aclose()
        return self.handovers()

    def handovers(self) -> list[Handover]:
        """The handovers in what was observed so far."""
        return handovers(self.observations)

    def holder(self) -> str | None:
        """The holder in the latest observation (None: none yet, no lease or no holder)."""
        return self.observations[-1].holder if self.observations else None

    async def _run(self) -> None:
        while True:
            await self.poll()
            await asyncio.sleep(self.interval)

    async def poll(self) -> Observation | None:
        """One GET of the lease; the observation, or None when the poll failed."""
        assert self._client is not None, "not started"
        self.polls += 1
        try:
            response = await self._client.get(LEASE_PATH)
            if response.status_code == 404:
                lease = None
            elif response.status_code == 200:
                lease = response.json()
                if not isinstance(lease, dict):
                    raise ValueError("the lease is not a JSON object")
            else:
                self.failed_polls += 1
                return None
        except (httpx.HTTPError, ValueError):
            self.failed_polls += 1
            return None
        obs = Observation.from_lease(lease, seen_at=time.time())
        if not self.observations or self.observations[-1].key != obs.key:
            self.observations.append(obs)
        return obs


# The parts of the leaderless gap, in the order they follow each other (gap_parts).
GAP_PARTS = ("lastRenewalToSigterm", "sigtermToExit", "exitToLeaseDeleted", "deletedToAcquired")


def deleted_at(observations: Iterable[Observation], handover: Handover) -> datetime | None:
    """When the watch first saw no lease between the old holder's last renewal and the new holder's
    acquisition (the operator deletes it once the old kcp exited); None if it saw none."""
    for obs in observations:
        seen = datetime.fromtimestamp(obs.seen_at, UTC)
        if obs.holder is None and handover.last_renewal <= seen <= handover.first_renewal:
            return seen
    return None


def gap_parts(
    handover: Handover,
    observations: Iterable[Observation],
    *,
    sigterm_at: datetime | None,
    exited_at: datetime | None,
) -> dict[str, float]:
    """The leaderless gap in its parts, each from the old holder's last renewal on: to the old kcp's
    SIGTERM (negative when it renewed after it), SIGTERM to its exit, exit to the lease deleted, delete to
    the new holder's acquisition. `sigterm_at` and `exited_at` are the old slot's `stoppingAt` and
    `exitedAt`, as its host agent wrote them; a part whose ends are unknown is left out."""
    # Each mark with the name of the part that ends at it.
    ends = (sigterm_at, exited_at, deleted_at(observations, handover), handover.first_renewal)
    marks = [("", handover.last_renewal), *zip(GAP_PARTS, ends, strict=True)]
    out: dict[str, float] = {}
    for (_, begun), (part, ended) in itertools.pairwise(marks):
        if begun is not None and ended is not None:
            out[part] = round((ended - begun).total_seconds(), 3)
    return out
