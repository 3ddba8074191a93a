"""The leaderless gap at each change of the controller lease's holder, from hand-made observations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kcpshard_testkit.leasewatch import (
    Handover,
    Observation,
    deleted_at,
    gap_parts,
    handovers,
    parse_micro_time,
)


def t(second: float) -> str:
    """A MicroTime `second` seconds after 07:00:00, as kcp writes it."""
    whole = int(second)
    return f"2026-12-04T07:00:{whole:02d}.{round((second - whole) * 1e6):06d}Z"


def obs(holder: str | None, renew: str | None = None, acquire: str | None = None) -> Observation:
    if holder is None:
        return Observation.from_lease(None)
    spec = {"holderIdentity": holder, "renewTime": renew, "acquireTime": acquire}
    return Observation.from_lease({"spec": {k: v for k, v in spec.items() if v is not None}})


def at(second: float) -> datetime:
    return datetime(2026, 12, 4, 7, 0, 0, tzinfo=UTC) + timedelta(seconds=second)


def test_parses_micro_time_and_second_precision() -> None:
    assert parse_micro_time("2026-12-04T07:00:56.073123Z") == datetime(
        2026, 12, 4, 7, 0, 56, 73123, tzinfo=UTC
    )
    assert parse_micro_time("2026-12-04T07:00:56Z") == datetime(2026, 12, 4, 7, 0, 56, tzinfo=UTC)
    assert parse_micro_time(None) is None
    assert parse_micro_time("") is None
    assert parse_micro_time("yesterday") is None


def test_one_handover_gap_from_the_lease_times() -> None:
    seen = [
        obs("a", renew=t(1.0), acquire=t(0.0)),
        obs("a", renew=t(3.0), acquire=t(0.0)),
        obs("a", renew=t(5.25), acquire=t(0.0)),
        obs("b", renew=t(9.5), acquire=t(9.5)),
        obs("b", renew=t(11.5), acquire=t(9.5)),
    ]
    assert handovers(seen) == [Handover("a", "b", at(5.25), at(9.5), 4.25)]


def test_no_handover() -> None:
    assert handovers([]) == []
    assert handovers([obs(None)]) == []
    assert handovers([obs("a", renew=t(1), acquire=t(0)), obs(None)]) == []


def test_same_holder_renewing_is_no_handover() -> None:
    seen = [obs("a", renew=t(s), acquire=t(0)) for s in (0, 2, 4, 6, 8)]
    assert handovers(seen) == []


def test_two_handovers() -> None:
    seen = [
        obs("a", renew=t(2), acquire=t(0)),
        obs("b", renew=t(3.5), acquire=t(3.5)),
        obs("b", renew=t(5.5), acquire=t(3.5)),
        obs("c", renew=t(6), acquire=t(6)),
    ]
    got = handovers(seen)
    assert [(h.from_holder, h.to_holder) for h in got] == [("a", "b"), ("b", "c")]
    assert [h.gap_seconds for h in got] == [1.5, 0.5]
    assert got[1].last_renewal == at(5.5)


def test_deleted_lease_in_between_gap_from_the_old_holders_last_renewal() -> None:
    # The operator deletes the lease during its roll; the next holder creates it anew.
    seen = [
        obs("a", renew=t(2), acquire=t(0)),
        obs("a", renew=t(4), acquire=t(0)),
        obs(None),
        obs("b", renew=t(4.75), acquire=t(4.75)),
    ]
    assert handovers(seen) == [Handover("a", "b", at(4), at(4.75), 0.75)]


def test_first_renewal_without_acquire_time() -> None:
    seen = [obs("a", renew=t(2)), obs("b", renew=t(3)), obs("b", renew=t(5))]
    assert handovers(seen) == [Handover("a", "b", at(2), at(3), 1.0)]


def test_second_precision_times() -> None:
    seen = [
        obs("a", renew="2026-12-04T07:00:10Z", acquire="2026-12-04T07:00:00Z"),
        obs("b", renew="2026-12-04T07:00:14Z", acquire="2026-12-04T07:00:13Z"),
    ]
    assert handovers(seen) == [Handover("a", "b", at(10), at(13), 3.0)]


def test_back_to_a_previous_holder_is_a_handover() -> None:
    seen = [
        obs("a", renew=t(1), acquire=t(0)),
        obs("b", renew=t(2), acquire=t(2)),
        obs("a", renew=t(4), acquire=t(4)),
    ]
    assert [(h.from_holder, h.to_holder, h.gap_seconds) for h in handovers(seen)] == [
        ("a", "b", 1.0),
        ("b", "a", 2.0),
    ]


def test_the_gap_in_its_parts_adds_up_to_the_gap() -> None:
    """Old kcp renews at 3.0, gets SIGTERM at 2.5 (renewing on through its shutdown delay), exits at 4.2;
    the watch sees no lease at 4.6; the new kcp acquires at 5.1."""
    gone = Observation(holder=None, seen_at=at(4.6).timestamp())
    seen = [obs("a", renew=t(1.0)), obs("a", renew=t(3.0)), gone, obs("b", renew=t(5.1), acquire=t(5.1))]
    [handover] = handovers(seen)
    parts = gap_parts(handover, seen, sigterm_at=at(2.5), exited_at=at(4.2))
    assert parts == {
        "lastRenewalToSigterm": -0.5,
        "sigtermToExit": 1.7,
        "exitToLeaseDeleted": 0.4,
        "deletedToAcquired": 0.5,
    }
    assert round(sum(parts.values()), 3) == handover.gap_seconds == 2.1


def test_a_part_with_an_unknown_end_is_left_out() -> None:
    seen = [obs("a", renew=t(3.0)), obs("b", renew=t(5.1), acquire=t(5.1))]
    [handover] = handovers(seen)
    # No deletion seen (the lease expired instead), no SIGTERM time (an agent before stoppingAt).
    assert gap_parts(handover, seen, sigterm_at=None, exited_at=at(4.2)) == {}
    before = Observation(holder=None, seen_at=at(0.5).timestamp())  # a lease missing before the old tenure
    assert deleted_at([before, *seen], handover) is None
