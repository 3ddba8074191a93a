"""The ordering of resourceVersions (KEP-5504), and the front agent's watch that relies on it: an event
older than the object the agent holds (its own status patch's answer) must not replace it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest

from kcpshard.agent.front import FrontAgent
from kcpshard.k8s.api import ApiClient
from kcpshard.k8s.versions import older, version_of


@pytest.mark.parametrize(
    ("version", "than", "expected"),
    [
        ("9", "10", True),  # shorter is smaller: not a string comparison
        ("10", "9", False),
        ("123", "124", True),
        ("124", "124", False),
        ("0", "1", True),
        ("010", "11", False),  # a leading zero: not a comparable version
        ("a1", "b2", False),  # not decimal: unordered
        ("", "5", False),
        (None, "5", False),
        ("5", None, False),
        ("٣", "٤", False),  # decimal digits, but not ASCII ones
    ],
)
def test_older(version: str | None, than: str | None, expected: bool) -> None:
    assert older(version, than) is expected


def test_version_of() -> None:
    assert version_of({"metadata": {"resourceVersion": "42"}}) == "42"
    assert version_of({"metadata": {}}) is None
    assert version_of(None) is None


def shard(version: str, error: str | None = None) -> dict[str, Any]:
    status = {"front": {"error": error}} if error else {}
    return {"metadata": {"name": "s", "resourceVersion": version}, "status": status}


class EventsApi:
    """Just the watch: yields the given events, then ends."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = events

    async def watch_forever(self, *args: Any, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
        for event in self.events:
            yield event


@pytest.mark.parametrize(
    ("event_version", "taken"),
    [("9", False), ("10", False), ("11", True), ("x", True)],
)
async def test_the_front_agent_keeps_what_it_holds_over_an_older_event(
    tmp_path: Path, event_version: str, taken: bool
) -> None:
    # The list's ADDED of the shard as it was before the agent's own error patch, arriving after the
    # patch's answer: taking it would have the next pass write the same error again.
    stale = shard(event_version)
    agent = FrontAgent(cast(ApiClient, EventsApi([{"type": "ADDED", "object": stale}])), "ns", "s", tmp_path)
    held = shard("10", error="cannot listen")
    agent._obj = held
    await agent._watch()
    assert agent._obj is (stale if taken else held)
    assert agent._kick.is_set() is taken
