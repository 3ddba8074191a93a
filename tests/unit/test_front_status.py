"""What the front agent reports on `status.front` (kcpshard.agent.front_status): pure, from what the
operator asks and what the HAProxy pair does."""

from __future__ import annotations

import pytest

from kcpshard.agent import front_status as report

NOW = "2026-12-01T12:00:00Z"


@pytest.mark.parametrize(
    ("front", "wanted", "ignored"),
    [
        ({}, None, False),
        ({"desiredBackend": "b", "desiredPort": 4321}, ("b", 4321), False),
        ({"desiredBackend": "c", "desiredPort": 4321}, None, True),
        ({"desiredBackend": "a", "desiredPort": 0}, None, True),
        ({"desiredBackend": "a", "desiredPort": True}, None, True),  # a bool is no port
        ({"desiredBackend": "a"}, None, True),
    ],
)
def test_the_desired_backend_is_a_slot_and_a_port(front: dict, wanted: tuple | None, ignored: bool) -> None:
    got, why = report.desired(front)
    assert got == wanted and (why is not None) is ignored


def test_a_backend_is_confirmed_only_when_every_member_serves_it() -> None:
    assert report.agreed([("a", 1), ("a", 1)]) == ("a", 1)
    assert report.agreed([("a", 1), ("b", 2)]) is None
    assert report.agreed([("a", 1), None]) is None
    assert report.agreed([]) is None


def test_the_observed_backend_is_written_when_it_changes_and_a_new_haproxy_announces_itself() -> None:
    front = {"observedBackend": "a", "observedPort": 1}
    assert report.observed(front, ("a", 1), announce=False, now=NOW) == {}
    assert report.observed(front, ("b", 2), announce=False, now=NOW) == {
        "observedBackend": "b",
        "observedPort": 2,
        "observedAt": NOW,
    }
    # a new shard's first HAProxy serves nothing yet, but the operator waits for it to listen
    assert report.observed({}, None, announce=True, now=NOW) == {"observedAt": NOW}


def test_a_drain_closes_the_old_slot_never_the_desired_one() -> None:
    connections = {"a": 3, "b": 0}
    assert report.to_drain({"drain": "a"}, connections, ("b", 2)) == ("a", None)
    assert report.to_drain({"drain": "a"}, {"a": 0, "b": 0}, ("b", 2)) == (None, None)  # nothing left
    slot, refused = report.to_drain({"drain": "a"}, connections, ("a", 1))
    assert slot is None and refused == "not draining slot a: it is the desired backend"
    assert report.to_drain({"drain": "x"}, connections, None) == (None, None)


def test_the_error_is_set_and_cleared_and_restarts_are_counted_on() -> None:
    assert report.health({}, error="port taken", restarts=0, last_restart=None) == {"error": "port taken"}
    assert report.health({"error": "port taken"}, error=None, restarts=0, last_restart=None) == {
        "error": None
    }
    assert report.health({}, error=None, restarts=2, last_restart="haproxy-1 exited") == {
        "restarts": 2,
        "lastRestart": "haproxy-1 exited",
    }
    assert report.health({"restarts": 2}, error=None, restarts=2, last_restart="x") == {}
    assert report.restarts_reported({"restarts": 3}) == 3
    assert report.restarts_reported({"restarts": -1}) == 0


def test_the_pod_is_ready_once_the_whole_pair_serves_the_desired_backend() -> None:
    applied = {0: ("a", 1), 1: ("a", 1)}
    assert report.serves_desired([0, 1], 2, applied, ("a", 1))
    assert not report.serves_desired([0], 2, applied, ("a", 1))  # the spare is missing
    assert not report.serves_desired([0, 1], 2, {0: ("a", 1), 1: None}, ("a", 1))
    assert report.serves_desired([0, 1], 2, {}, None)  # a new shard: listening is serving


def test_connections_are_written_at_once_when_a_backend_gains_or_loses_its_last() -> None:
    assert report.connections_due(None, {"a": 0, "b": 0}, 0.0)  # never reported
    assert report.connections_due({"a": 1, "b": 0}, {"a": 0, "b": 0}, 0.0)  # drained: the operator waits
    assert report.connections_due({"a": 0, "b": 0}, {"a": 0, "b": 2}, 0.0)
    assert not report.connections_due({"a": 3, "b": 0}, {"a": 3, "b": 0}, 60.0)  # nothing changed


def test_a_count_that_only_moved_is_written_after_the_refresh_interval() -> None:
    refresh = report.CONNECTIONS_REFRESH_SECONDS
    assert not report.connections_due({"a": 3, "b": 1}, {"a": 5, "b": 1}, refresh - 0.1)
    assert report.connections_due({"a": 3, "b": 1}, {"a": 5, "b": 1}, refresh)
