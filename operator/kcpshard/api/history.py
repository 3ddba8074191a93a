"""`status.history`: the reports of the last rolls, newest first."""

from __future__ import annotations

from collections.abc import Sequence

from kcpshard.api.models import RollReport

KEEP = 5


def _same_roll(a: RollReport, b: RollReport) -> bool:
    # A roll is known by when it started and where it went; an operator that writes its report again
    # after a restart must not list the roll twice.
    started = a.timestamps.get("started")
    return started is not None and started == b.timestamps.get("started") and a.to_revision == b.to_revision


def with_report(
    history: Sequence[RollReport] | None, report: RollReport, keep: int = KEEP
) -> list[RollReport]:
    """`history` with `report` first (replacing an earlier write of the same roll), at most `keep` long."""
    rest = [old for old in history or () if not _same_roll(old, report)]
    return [report, *rest][:keep]
