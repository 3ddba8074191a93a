"""The roll timeline picture: a PNG of the expected size, from a full report and from a partial one."""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta
from pathlib import Path

from kcpshard_testkit.load import LoadReport
from kcpshard_testkit.timeline import render_timeline, report_times, roll_steps

START = datetime(2026, 12, 4, 7, 0, 0, tzinfo=UTC)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def iso(seconds: float) -> str:
    return (START + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def load(until: float, failing: tuple[float, float] = (0.0, 0.0)) -> LoadReport:
    """Ten requests a second from 3 s before the start, failing within `failing` (seconds from the start)."""
    t0 = START.timestamp()
    outcomes = []
    for tenth in range(-30, round(until * 10)):
        at = tenth / 10
        outcomes.append((t0 + at, not failing[0] <= at < failing[1]))
    return LoadReport(outcomes=outcomes)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


BLUE_GREEN = {
    "timestamps": {
        "started": iso(0),
        "slotStarting": iso(0.2),
        "slotCreated": iso(0.4),
        "ready": iso(6.5),
        "flipped": iso(6.8),
        "oldExited": iso(9.0),
        "leaseHandedOver": iso(9.6),
        "probed": iso(10.4),
        "drained": iso(12.0),
        "finished": iso(12.1),
    }
}


def test_blue_green_roll_renders_a_png_of_the_expected_size(tmp_path: Path) -> None:
    out = tmp_path / "roll.png"
    marks = {
        "flip": START + timedelta(seconds=6.8),
        "old exit": START + timedelta(seconds=9.0),
        "new lease holder": START + timedelta(seconds=9.5),
    }
    render_timeline(BLUE_GREEN, load(15.0), marks, out, "one blue/green roll")
    assert png_size(out) == (1200, 720)


def test_steps_are_the_report_spans_from_the_start() -> None:
    times = report_times(BLUE_GREEN)
    steps = {name: (round(a, 3), round(b, 3)) for name, a, b in roll_steps(times, times["started"])}
    assert steps == {
        "startToReady": (0.2, 6.5),
        "flip": (6.5, 6.8),
        "oldExit": (6.8, 9.0),
        "leaseHandover": (9.0, 9.6),
        "probe": (9.6, 10.4),
        "drain": (10.4, 12.0),
        "total": (0.0, 12.1),
    }


def test_single_roll_with_missing_timestamps_does_not_raise(tmp_path: Path) -> None:
    # Single: the old slot exits before the new one starts; no 'flipped' before 'oldExited', no drain.
    single = {
        "timestamps": {
            "started": iso(0),
            "oldExited": iso(1.5),
            "slotStarting": iso(1.6),
            "ready": iso(7.0),
            "flipped": iso(7.2),
            "finished": iso(8.0),
            "probed": "not a time",
        }
    }
    out = tmp_path / "single.png"
    render_timeline(single, load(10.0, failing=(1.5, 7.2)), {"old exit": START}, out, "single")
    assert png_size(out) == (1200, 720)
    names = [name for name, _, _ in roll_steps(report_times(single), START.timestamp())]
    # no backwards oldExit from the flip: a Single's old slot stops first, from the roll's start
    assert names == ["startToReady", "flip", "oldExit", "outage", "total"]


def test_empty_report_and_no_load_do_not_raise(tmp_path: Path) -> None:
    out = tmp_path / "empty.png"
    render_timeline({}, LoadReport(), {}, out, "nothing")
    assert png_size(out) == (1200, 720)
