"""What the front reports on `KcpShard.status.front`, from what the operator asks there (`desiredBackend`,
`desiredPort`, `drain`) and what its HAProxy pair does. Pure: the front agent (front.py) gathers the
facts, these decide the merge patch, so the rules are unit-tested without HAProxy or an API server.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeGuard

from kcpshard.agent.haproxy_config import SLOTS

Backend = tuple[str, int]  # (slot, port)

# Open connections change with every client that connects: a count that only moved is written at most
# this often. Whether a backend has any is written at once: the operator waits on that (a drain), and
# each write of ours also meets the operator's next status write as a 409 (it reads and writes again).
CONNECTIONS_REFRESH_SECONDS = 10.0


def is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def is_port(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536


def restarts_reported(front_status: Mapping[str, Any]) -> int:
    """The restarts counted so far (by an earlier agent of this front): counted on from there."""
    reported = front_status.get("restarts")
    return reported if is_count(reported) else 0


def desired(front_status: Mapping[str, Any]) -> tuple[Backend | None, str | None]:
    """The backend the operator asks for (None: none yet), and why an ask is ignored."""
    backend, port = front_status.get("desiredBackend"), front_status.get("desiredPort")
    if backend is None and port is None:
        return None, None
    if backend in SLOTS and is_port(port):
        return (str(backend), port), None
    return None, f"ignoring desiredBackend={backend!r} desiredPort={port!r}: not a slot and port"


def agreed(applied: Iterable[Backend | None]) -> Backend | None:
    """The backend every running member serves: confirmed only when they all serve the same one."""
    backends = set(applied)
    return backends.pop() if len(backends) == 1 else None


def serves_desired(
    running: Sequence[int], size: int, applied: Mapping[int, Backend | None], wanted: Backend | None
) -> bool:
    """Every member of the pair runs and serves the desired backend (a new shard, with none yet:
    listens). The pod's readiness follows it."""
    if len(running) < size:
        return False
    return wanted is None or all(applied.get(index) == wanted for index in running)


def observed(
    front_status: Mapping[str, Any], serving: Backend | None, *, announce: bool, now: str
) -> dict[str, Any]:
    """The keys that say what the front serves, where they differ from what it said. `announce`: a
    freshly started HAProxy says when it was seen, even with no backend (the operator waits for a
    listening front before a new shard's first slot)."""
    patch: dict[str, Any] = {}
    if (
        serving is not None
        and (front_status.get("observedBackend"), front_status.get("observedPort")) != serving
    ):
        patch.update(observedBackend=serving[0], observedPort=serving[1], observedAt=now)
    if announce:
        patch["observedAt"] = now
    return patch


def to_drain(
    front_status: Mapping[str, Any], connections: Mapping[str, int], wanted: Backend | None
) -> tuple[str | None, str | None]:
    """The slot whose connections the operator asked to close, while it has any; and why an ask is
    refused (it is the backend new connections go to)."""
    slot = front_status.get("drain")
    if slot not in SLOTS or connections.get(slot, 0) <= 0:
        return None, None
    if wanted is not None and slot == wanted[0]:
        return None, f"not draining slot {slot}: it is the desired backend"
    return str(slot), None


def connections_due(
    reported: Mapping[str, int] | None, counts: Mapping[str, int], since_reported: float
) -> bool:
    """Whether `counts` are worth a write, `since_reported` seconds after the last report of them."""
    if reported is None:
        return True
    if {slot for slot, n in counts.items() if n > 0} != {slot for slot, n in reported.items() if n > 0}:
        return True
    return dict(counts) != dict(reported) and since_reported >= CONNECTIONS_REFRESH_SECONDS


def health(
    front_status: Mapping[str, Any], *, error: str | None, restarts: int, last_restart: str | None
) -> dict[str, Any]:
    """`error` (None clears it: a merge patch) and the restarts, where they differ from the status."""
    patch: dict[str, Any] = {}
    if front_status.get("error") != error:
        patch["error"] = error
    if restarts and front_status.get("restarts") != restarts:
        patch.update(restarts=restarts, lastRestart=last_restart)
    return patch
