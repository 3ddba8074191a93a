"""The load client's latency percentiles (nearest rank), as the bench reports them."""

from __future__ import annotations

import math

from kcpshard.testing.load import LoadReport


def test_percentiles_are_nearest_rank() -> None:
    report = LoadReport(latencies=[float(n) for n in range(100, 0, -1)])  # 1..100, unsorted
    assert report.percentile(50) == 50.0
    assert report.percentile(99) == 99.0
    assert report.percentile(100) == 100.0
    assert report.percentile(0) == 1.0


def test_no_latency_is_no_figure() -> None:
    assert math.isnan(LoadReport().percentile(99))
