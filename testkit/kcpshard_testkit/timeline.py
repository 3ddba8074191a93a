"""A picture of one roll: its steps on a time axis above the client's requests per second, with marks.

matplotlib is a development dependency only: it is imported inside `render_timeline`, never by the operator.
The figure is drawn on matplotlib's Agg canvas directly (no pyplot, no global backend switch).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kcpshard.api import conditions as cond
from kcpshard.roll.report import REPORT_SPANS
from kcpshard_testkit.load import LoadReport

if TYPE_CHECKING:
    from matplotlib.axes import Axes

WIDTH_INCHES, HEIGHT_INCHES, DPI = 10.0, 6.0, 120
MARGIN_SECONDS = 2.0  # shown before the roll's start and after its end


def _epoch(when: datetime) -> float:
    return (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).timestamp()


def report_times(report: Mapping[str, Any]) -> dict[str, float]:
    """The roll report's timestamps as epoch seconds; absent or unreadable ones are left out."""
    out: dict[str, float] = {}
    for name, value in (report.get("timestamps") or {}).items():
        if isinstance(value, str):
            try:
                out[name] = _epoch(cond.parse_time(value))
            except ValueError:
                continue
    return out


def roll_steps(times: Mapping[str, float], origin: float) -> list[tuple[str, float, float]]:
    """(span, start, end) in seconds from `origin` for each span of the report (REPORT_SPANS) that has its
    timestamps and does not run backwards (as `durations` has them: no "outage" in a blue/green roll)."""
    out: list[tuple[str, float, float]] = []
    for name, starts, end in REPORT_SPANS:
        if any(name == seen for seen, _, _ in out):  # a second way to measure a span, as in `durations`
            continue
        begun = [times[s] for s in starts if s in times]
        if begun and end in times and times[end] >= max(begun):
            out.append((name, max(begun) - origin, times[end] - origin))
    return out


def render_timeline(
    report: Mapping[str, Any], load: LoadReport, marks: Mapping[str, datetime], out: Path, title: str
) -> None:
    """Write a PNG of one roll to `out`: the report's steps as bars, the load's requests and failures per
    second below on the same axis (seconds from the roll's start), and a vertical line for each mark."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    times = report_times(report)
    mark_at = {label: _epoch(when) for label, when in marks.items()}
    known = list(times.values()) or list(mark_at.values()) or [at for at, _ in load.outcomes] or [0.0]
    origin = times.get("started", min(known))
    steps = roll_steps(times, origin)
    ends = [0.0, *(e for _, _, e in steps), *(at - origin for at in times.values())]
    ends += [at - origin for at in mark_at.values()]
    lo = math.floor(min(ends) - MARGIN_SECONDS)
    hi = math.ceil(max(ends) + MARGIN_SECONDS)

    fig = Figure(figsize=(WIDTH_INCHES, HEIGHT_INCHES), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[3, 2])
    fig.suptitle(title)
    _draw_steps(top, steps)
    _draw_load(bottom, load, origin, lo, hi)
    colors = ["tab:purple", "tab:orange", "tab:cyan", "tab:brown", "tab:olive", "tab:pink"]
    for i, (label, at) in enumerate(sorted(mark_at.items(), key=lambda kv: kv[1])):
        x = at - origin
        color = colors[i % len(colors)]
        top.axvline(x, color=color, linestyle="--", linewidth=1)
        top.annotate(
            label,
            (x, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(2, -2 - 11 * i),
            textcoords="offset points",
            va="top",
            fontsize=8,
            color=color,
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1},
        )
        bottom.axvline(x, color=color, linestyle="--", linewidth=1, label=label)
    bottom.set_xlim(lo, hi)
    if bottom.get_legend_handles_labels()[0]:
        bottom.legend(loc="upper right", fontsize=8)
    fig.savefig(out, format="png", dpi=DPI)


def _draw_steps(ax: Axes, steps: list[tuple[str, float, float]]) -> None:
    if not steps:
        ax.text(0.5, 0.5, "no steps in the roll report", transform=ax.transAxes, ha="center", va="center")
        ax.set_yticks([])
        return
    names = [name for name, _, _ in steps]
    for y, (name, start, end) in enumerate(steps):
        color = "tab:gray" if name == "total" else ("tab:red" if name == "outage" else "tab:blue")
        ax.barh(y, end - start, left=start, height=0.6, color=color, alpha=0.8)
        ax.annotate(
            f"{end - start:.2f} s",
            (end, y),
            xytext=(3, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
        )
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)
    ax.set_ylabel("roll step")


def _draw_load(ax: Axes, load: LoadReport, origin: float, lo: float, hi: float) -> None:
    buckets = load.per_second(origin + lo, origin + hi)
    xs = [start - origin for start, _, _ in buckets]
    ok = [n for _, n, _ in buckets]
    failed = [n for _, _, n in buckets]
    ax.bar(xs, failed, width=1.0, align="edge", color="tab:red", alpha=0.6, label="failed / s")
    if xs:
        # A step per second: each count held over its second.
        ax.step([*xs, xs[-1] + 1], [*ok, ok[-1]], where="post", color="tab:green", label="ok / s")
    ax.set_ylim(bottom=0)
    ax.set_ylabel("requests / s")
    ax.set_xlabel("seconds from the roll's start")
    ax.grid(alpha=0.3)
