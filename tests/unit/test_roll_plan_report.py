"""The roll report: which timestamps a roll writes and the step durations read from them."""

from __future__ import annotations

from typing import Any

from kcpshard.api.models import RolloutStatus
from kcpshard.roll import plan
from kcpshard.roll.observed import SlotName, SlotView
from kcpshard.roll.plan import Step
from kcpshard.roll.report import reassert_needed, slot_durations


def stamps(**seconds: float) -> dict[str, str]:
    """Timestamps as the status holds them, `seconds` after 12:00:00 (microseconds, as now_precise)."""
    return {name: f"2026-12-01T12:{int(s // 60):02d}:{s % 60:09.6f}Z" for name, s in seconds.items()}


# A BlueGreen roll with a backup: the new slot is ready and serving before the old one exits.
BLUE_GREEN = stamps(
    started=0,
    backedUp=4,
    slotStarting=4.5,
    slotCreated=4.75,
    ready=7,
    flipped=7.5,
    oldExited=10.5,
    leaseHandedOver=11.5,
    probeCreated=11.75,
    probeWorkspaceReady=12.5,
    probed=13,
    drained=15,
    finished=16,
)

# A Single roll: the old slot exits first, the new one starts in its place (a planned outage).
SINGLE = stamps(
    started=0,
    oldExited=2,
    slotStarting=2.25,
    slotCreated=2.5,
    ready=6,
    flipped=6.5,
    leaseHandedOver=8,
    probed=9,
    drained=9,
    finished=10,
)


def test_blue_green_durations() -> None:
    assert plan.durations(BLUE_GREEN) == {
        "backup": 4.0,
        "startToReady": 2.5,  # from slotStarting, not from the roll's start (the backup is its own span)
        "flip": 0.5,
        "oldExit": 3.0,
        "leaseHandover": 1.0,
        "probe": 1.5,
        "probeCreate": 0.25,  # the probe in its parts: reaching kcp and creating the workspace,
        "probeWorkspaceReady": 0.75,  # kcp's controllers making it Ready,
        "probeDelete": 0.5,  # the delete request (kcp's finalizers are not waited for)
        "drain": 2.0,
        "total": 16.0,
    }


def test_outage_exists_only_where_the_old_slot_exited_before_the_flip() -> None:
    assert "outage" not in plan.durations(BLUE_GREEN)  # negative span: no outage
    spans = plan.durations(SINGLE)
    assert spans["outage"] == 4.5
    assert spans["startToReady"] == 3.75
    assert spans["drain"] == 0.0  # a zero span is kept
    assert spans["oldExit"] == 2.0  # Single: from the roll's start, the old slot stopping first
    assert "backup" not in spans


def test_spans_need_both_timestamps() -> None:
    assert plan.durations(stamps(started=0, ready=3)) == {}
    assert plan.durations(stamps(started=0, finished=2.5)) == {"total": 2.5}


def test_durations_are_rounded_to_milliseconds() -> None:
    assert plan.durations(stamps(ready=1, flipped=1.0004567)) == {"flip": 0.0}
    assert plan.durations(stamps(ready=1, flipped=1.2345678)) == {"flip": 0.235}


def test_lease_handover_counts_from_the_later_of_flip_and_old_exit() -> None:
    # Single shape: HandingOverLease follows Flipping (8 - 6.5), not the old exit before the start
    assert plan.durations(SINGLE)["leaseHandover"] == 1.5
    # blue/green: it follows the old exit (11.5 - 10.5), as in test_blue_green_durations
    assert plan.durations(BLUE_GREEN)["leaseHandover"] == 1.0
    # one of the two is enough
    assert plan.durations(stamps(flipped=1, leaseHandedOver=3))["leaseHandover"] == 2.0
    assert plan.durations(stamps(oldExited=1, leaseHandedOver=4))["leaseHandover"] == 3.0


def test_every_step_but_the_last_stamps_its_end() -> None:
    assert set(plan.LEAVE_STAMP) == set(Step) - {Step.RETIRING}  # the roll's end stamps "finished"
    assert len(set(plan.LEAVE_STAMP.values())) == len(plan.LEAVE_STAMP)


def test_report_spans_read_only_stamps_that_are_written() -> None:
    # "started" comes with the roll, "slotStarting" on entering Starting, "finished" at its end
    written = set(plan.LEAVE_STAMP.values()) | {"started", "slotStarting", "finished", *plan.PROBE_STAMPS}
    read = {name for _, starts, end in plan.REPORT_SPANS for name in (*starts, end)}
    assert read <= written
    assert plan.LEAVE_STAMP[Step.BACKING_UP] == "backedUp"
    assert plan.LEAVE_STAMP[Step.WAITING_READY] == "ready"
    assert plan.LEAVE_STAMP[Step.FLIPPING] == "flipped"
    assert plan.LEAVE_STAMP[Step.STOPPING_OLD] == "oldExited"


# ----- after an aborted upgrade ------------------------------------------------------------------


def _upgrade(**kw: Any) -> RolloutStatus:
    kw.setdefault("timestamps", {"started": "t0", "slotStarting": "t1"})
    kw.setdefault("from_version", "v0.32.1")
    return RolloutStatus(
        step="WaitingReady",
        from_slot="a",
        to_slot="b",
        target_revision="new",
        from_revision="old",
        target_spec={"kcp": {"version": "v0.33.0"}},
        started_at="t0",
        **kw,
    )


def test_an_aborted_upgrade_whose_kcp_started_asks_for_a_reassert_with_the_command() -> None:
    message = reassert_needed(_upgrade(), "Aborted", "root")
    assert message is not None
    assert "kcp v0.33.0 started during the aborted upgrade from v0.32.1" in message
    assert "kubectl kcpshard reassert root" in message


def test_no_reassert_when_the_new_kcp_never_ran_the_version_is_the_same_or_it_rolled_back() -> None:
    assert reassert_needed(_upgrade(timestamps={"started": "t0"}), "Aborted", "root") is None
    assert reassert_needed(_upgrade(from_version="v0.33.0"), "Aborted", "root") is None
    assert reassert_needed(_upgrade(), "RolledBack", "root") is None  # the old kcp started again
    assert reassert_needed(_upgrade(), "Failed", "root") is None  # after the flip: the new kcp serves


def test_the_operators_share_leaves_out_the_node_starting_the_slot_and_every_wait_on_kcp() -> None:
    # The slot was created at 4.75; its agent started kcp at 6.0 (the node's container start), ready at 6.75.
    times = stamps(kcpStarted=6.0, kcpReady=6.75)
    slot = SlotView(SlotName.B, "rev", started_at=times["kcpStarted"], ready_at=times["kcpReady"])
    spans = plan.durations(BLUE_GREEN)
    taken = slot_durations(slot, spans, BLUE_GREEN)
    assert taken["slotStart"] == 1.25 and taken["kcpStartToReady"] == 0.75
    # 16 s in all, less the backup 4, the slot's start 1.25, kcp's 0.75, the old exit 3, the lease 1 and
    # the probe 1.5
    assert taken["operatorShare"] == 4.5
    assert "slotStart" not in slot_durations(slot, spans, {})  # no slotCreated stamp: not reported


def test_a_single_rolls_share_leaves_out_the_old_slot_stopping_first() -> None:
    times = stamps(kcpStarted=3.0, kcpReady=5.5)
    slot = SlotView(SlotName.B, "rev", started_at=times["kcpStarted"], ready_at=times["kcpReady"])
    taken = slot_durations(slot, plan.durations(SINGLE), SINGLE)
    # 10 s in all, less the old slot's stop 2, the slot's start 0.5, kcp's 2.5, the lease 1.5, the probe 1
    assert taken["operatorShare"] == 2.5
