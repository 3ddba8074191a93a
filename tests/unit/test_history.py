"""`status.history`: newest first, five at most, a report written twice listed once; and the
annotation names the plugin sets are the ones the operator reads."""

from __future__ import annotations

from kcpshard.api import annotations
from kcpshard.api.history import KEEP, with_report
from kcpshard.api.models import KcpShardStatus, RollReport
from kcpshard.roll import plan


def _report(n: int, result: str = "Succeeded") -> RollReport:
    return RollReport(
        result=result,
        to_revision=f"rev{n}",
        timestamps={"started": f"2026-01-01T00:00:0{n}.000000Z"},
    )


def test_newest_first_and_at_most_five() -> None:
    history: list[RollReport] = []
    for n in range(7):
        history = with_report(history, _report(n))
    assert KEEP == 5
    assert [r.to_revision for r in history] == ["rev6", "rev5", "rev4", "rev3", "rev2"]


def test_the_same_roll_written_again_replaces_its_entry() -> None:
    history = with_report(with_report(None, _report(1)), _report(2, result="Failed"))
    # an operator restarted after writing the report writes it once more, maybe with more in it
    again = _report(2, result="Failed").model_copy(update={"message": "again"})
    history = with_report(history, again)
    assert [(r.to_revision, r.message) for r in history] == [("rev2", "again"), ("rev1", "")]


def test_a_report_without_a_start_is_never_taken_for_another() -> None:
    bare = RollReport(result="Aborted", to_revision="x")
    assert len(with_report([bare], bare)) == 2


def test_history_is_read_from_the_status_by_its_wire_name() -> None:
    status = KcpShardStatus.model_validate(
        {"history": [_report(2).model_dump(by_alias=True), _report(1).model_dump(by_alias=True)]}
    )
    assert status.history is not None
    assert [r.to_revision for r in status.history] == ["rev2", "rev1"]
    assert KcpShardStatus().model_dump(by_alias=True, exclude_none=True).get("history") is None


def test_annotation_names() -> None:
    assert annotations.RETRY == plan.RETRY_ANNOTATION == "kcpshard.dev/retry"
    assert annotations.PROMOTE == "kcpshard.dev/promote"
    assert annotations.ABORT == "kcpshard.dev/abort"
