"""`wait_for`: an AssertionError in the probe fails at once; other errors are retried until the deadline."""

from __future__ import annotations

import pytest

from kcpshard_testkit.waiting import wait_for


async def test_an_assertion_in_the_probe_fails_at_once() -> None:
    calls = 0

    async def probe() -> bool:
        nonlocal calls
        calls += 1
        raise AssertionError("the roll went to the wrong slot")

    with pytest.raises(AssertionError, match="wrong slot"):
        await wait_for("the roll", probe, timeout=30)
    assert calls == 1


async def test_other_errors_are_retried_until_the_probe_answers() -> None:
    answers: list[object] = [LookupError("not there yet"), None, "done"]

    async def probe() -> str | None:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[return-value]

    assert await wait_for("the object", probe, timeout=5, interval=0.01) == "done"


async def test_a_timeout_names_what_was_awaited_and_the_last_error() -> None:
    async def probe() -> None:
        raise LookupError("still missing")

    with pytest.raises(TimeoutError, match=r"waiting for the slot \(last error: still missing\)"):
        await wait_for("the slot", probe, timeout=0.05, interval=0.01)
