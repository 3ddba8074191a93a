"""What the slot agent reports on its KcpSlot's status: conditions and fields, each a read-modify-write
(`mutate_status`), since the operator writes the same object. A report that cannot be written is
logged and never holds up kcp."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from kcpshard import retry
from kcpshard.agent import cli
from kcpshard.agent.slot_options import Options
from kcpshard.api.conditions import Status, set_condition
from kcpshard.k8s.api import KCPSLOTS, ApiClient, ApiError, NotFound
from kcpshard.k8s.credentials import KubeconfigError
from kcpshard.k8s.status import mutate_status
from kcpshard.timeouts import within

log = logging.getLogger("kcpshard.agent.slot")

PROG = "kcpshard agent slot"
POLL_FAST = 0.2  # readyz until first ready, and material/port polling
POLL_SLOW = 1.0  # readyz once ready, and a write that must land
WRITE_TIMEOUT = 10.0  # a status write never holds up stopping kcp
API_ERRORS = (ApiError, httpx.HTTPError, KubeconfigError, TimeoutError)


@dataclass(frozen=True)
class Cond:
    type: str
    status: Status
    reason: str
    message: str = ""


class Fatal(Exception):
    """Stop kcp and exit 1; the condition saying why is already written.

    `ready`: the Ready condition to leave once kcp has stopped, when the cause is written on Ready itself
    (stopping kcp would otherwise replace it with a plain "kcp stopped")."""

    def __init__(self, message: str, ready: Cond | None = None) -> None:
        super().__init__(message)
        self.ready = ready


def fail(message: str) -> int:
    return cli.fail(PROG, message)


def status_change(
    fields: Mapping[str, Any] | None, conditions: Sequence[Cond], generation: int | None
) -> Any:
    """A `mutate_status` function: set `fields` (None removes one) and the conditions."""

    def fn(status: dict[str, Any]) -> dict[str, Any]:
        for key, value in (fields or {}).items():
            if value is None:
                status.pop(key, None)
            else:
                status[key] = value
        conds = status.get("conditions") or []
        for c in conditions:
            conds = set_condition(
                conds, c.type, c.status, c.reason, c.message, observed_generation=generation
            )
        status["conditions"] = conds
        return status

    return fn


class _Unwritten(Exception):
    """A report that must land did not, this time."""


class SlotReport:
    """The KcpSlot this agent reports on: as first read (its uid, its generation), and the writes."""

    def __init__(self, opts: Options, api: ApiClient) -> None:
        self.opts = opts
        self.api = api
        self.slot: dict[str, Any] = {}  # the KcpSlot as first read: the owner of the published Secret
        self.generation: int | None = None
        self.slot_gone = False  # our KcpSlot was deleted: nobody reads our reports any more

    @property
    def where(self) -> str:
        return f"{self.opts.namespace}/{self.opts.slot}"

    def read(self, slot: dict[str, Any]) -> None:
        self.slot = slot
        self.generation = (slot.get("metadata") or {}).get("generation")

    async def write(self, fields: Mapping[str, Any] | None = None, *conditions: Cond) -> bool:
        """One status change; False (logged) when the API server cannot be reached or refuses."""
        fn = status_change(fields, conditions, self.generation)
        try:
            await within(
                mutate_status(
                    self.api,
                    KCPSLOTS,
                    self.opts.namespace,
                    self.opts.slot,
                    fn,
                    uid=(self.slot.get("metadata") or {}).get("uid"),
                ),
                WRITE_TIMEOUT,
            )
            return True
        except NotFound:
            if not self.slot_gone:
                log.info(
                    "KcpSlot %s is gone (deleted, or another object has its name): not reporting", self.where
                )
            self.slot_gone = True
            return False
        except API_ERRORS as exc:
            log.warning(
                "could not write the status of KcpSlot %s: %s", self.where, str(exc) or type(exc).__name__
            )
            return False

    async def persist(self, fields: Mapping[str, Any] | None = None, *conditions: Cond) -> None:
        """A write that must land (pid, port, the upload): tried again until it does, the KcpSlot is gone,
        or the task is cancelled."""

        async def once() -> None:
            if not await self.write(fields, *conditions) and not self.slot_gone:
                raise _Unwritten

        await retry.retrying(once, passing=retry.kinds(_Unwritten), backoff=retry.Backoff.every(POLL_SLOW))
