"""The one retry helper (kcpshard.retry): the waits, what passes, and when it gives up."""

from __future__ import annotations

import httpx
import pytest

from kcpshard import retry
from kcpshard.k8s.api import ApiError, Conflict
from kcpshard.kcp.errors import KcpError


def test_the_backoff_doubles_up_to_its_cap() -> None:
    waits = retry.Backoff(1.0, 30.0)
    assert [waits.delay(n) for n in (0, 1, 2, 3, 4, 5, 6, 7, 1000)] == [0, 1, 2, 4, 8, 16, 30, 30, 30]
    assert [retry.Backoff.every(0.25).delay(n) for n in (1, 2, 9)] == [0.25, 0.25, 0.25]


def test_what_passes() -> None:
    assert retry.kinds(Conflict)(Conflict(409, "Conflict", "m"))
    assert not retry.kinds(Conflict)(ApiError(500, "x", "m"))
    # "not now": no answer, too many requests, a server error; not a refusal
    assert retry.not_now(httpx.ConnectError("refused"))
    assert retry.not_now(ApiError(503, "ServiceUnavailable", "m"))
    assert retry.not_now(KcpError("slow down", status=429))
    assert not retry.not_now(ApiError(403, "Forbidden", "m"))
    assert not retry.not_now(ValueError("no status"))


async def test_a_failure_that_passes_is_tried_again_until_it_is_gone() -> None:
    calls: list[int] = []
    told: list[float] = []

    async def flaky() -> str:
        calls.append(len(calls))
        if len(calls) < 3:
            raise Conflict(409, "Conflict", "modified")
        return "done"

    got = await retry.retrying(
        flaky,
        passing=retry.kinds(Conflict),
        backoff=retry.Backoff(0.001, 0.002),
        on_retry=lambda _, wait: told.append(wait),
    )
    assert got == "done" and len(calls) == 3 and told == [0.001, 0.002]


async def test_it_gives_up_after_its_attempts_or_on_a_failure_that_does_not_pass() -> None:
    calls = 0

    async def conflict() -> None:
        nonlocal calls
        calls += 1
        raise Conflict(409, "Conflict", "modified")

    with pytest.raises(Conflict):
        await retry.retrying(
            conflict, passing=retry.kinds(Conflict), backoff=retry.Backoff.every(0), attempts=4
        )
    assert calls == 4

    async def refused() -> None:
        raise ApiError(403, "Forbidden", "no")

    with pytest.raises(ApiError):
        await retry.retrying(refused, passing=retry.not_now, backoff=retry.Backoff.every(0))


async def test_it_gives_up_when_its_budget_is_spent() -> None:
    calls = 0

    async def down() -> None:
        nonlocal calls
        calls += 1
        raise httpx.ConnectError("refused")

    with pytest.raises(httpx.ConnectError):
        await retry.retrying(down, passing=retry.not_now, backoff=retry.Backoff.every(0.02), budget=0.05)
    assert 2 <= calls <= 5  # the last try comes at the end of the budget, not after it
