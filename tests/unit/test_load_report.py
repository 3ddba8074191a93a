"""The load client's latency percentiles (nearest rank), as the bench reports them."""

from __future__ import annotations

import math
import time

from kcpshard_testkit.load import KubeStyleLoad, LoadReport
from kcpshard_testkit.pki import CertificateAuthority
from kcpshard_testkit.tcp import free_port
from kcpshard_testkit.waiting import wait_for


def test_percentiles_are_nearest_rank() -> None:
    report = LoadReport(latencies=[float(n) for n in range(100, 0, -1)])  # 1..100, unsorted
    assert report.percentile(50) == 50.0
    assert report.percentile(99) == 99.0
    assert report.percentile(100) == 100.0
    assert report.percentile(0) == 1.0


def test_no_latency_is_no_figure() -> None:
    assert math.isnan(LoadReport().percentile(99))


def test_per_second_counts_requests_by_the_second_they_ended_in() -> None:
    t0 = 1_800_000_000.0
    report = LoadReport(
        outcomes=[
            (t0 - 0.5, True),  # before the window: left out
            (t0, True),
            (t0 + 0.9, True),
            (t0 + 0.95, False),
            (t0 + 1.0, False),
            (t0 + 2.5, True),
            (t0 + 2.9, True),  # at the window's end: left out
        ]
    )
    assert report.per_second(t0, t0 + 2.9) == [(t0, 2, 1), (t0 + 1, 0, 1), (t0 + 2, 1, 0)]
    # A window that is not whole seconds ends with a partial second; an empty or reversed one has none.
    assert report.per_second(t0 + 2, t0 + 2.6) == [(t0 + 2, 1, 0)]
    assert report.per_second(t0, t0) == []
    assert report.per_second(t0 + 1, t0) == []
    assert LoadReport().per_second(t0, t0 + 2) == [(t0, 0, 0), (t0 + 1, 0, 0)]


async def test_every_request_has_an_outcome_failed_ones_too() -> None:
    # Nothing listens on the port: every request fails at once (connection refused).
    load = KubeStyleLoad(f"https://127.0.0.1:{free_port()}", "token", CertificateAuthority().cert_pem)
    before = time.time()
    await load.start()

    async def some() -> bool:
        return len(load.report.outcomes) >= 5

    await wait_for("five requests", some, timeout=10, interval=0.01)
    report = await load.stop()
    after = time.time()
    assert report.ok == 0
    assert len(report.outcomes) == len(report.latencies) == report.failed
    assert all(not ok and before <= at <= after for at, ok in report.outcomes)
    assert sum(failed for _, _, failed in report.per_second(before, after + 1)) == report.failed


def test_the_outage_runs_from_the_last_success_before_failures_to_the_first_after() -> None:
    report = LoadReport(
        outcomes=[(10.0, True), (10.5, False), (11.0, False), (12.5, True), (13.0, True), (20.0, False)]
    )
    # 10.0 -> 12.5 (two failures between), then a failure at the end: 13.0 -> 20.0.
    assert report.outage_seconds() == 2.5 + 7.0
    assert LoadReport(outcomes=[(1.0, True), (2.0, True)]).outage_seconds() == 0.0
    # Parallel requests end out of order: sorted by when they ended.
    assert LoadReport(outcomes=[(3.0, True), (2.0, False), (1.0, True)]).outage_seconds() == 2.0
