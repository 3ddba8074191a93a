"""What `kubectl kcpshard` prints, from status dicts: pure functions, checked line by line."""

from __future__ import annotations

import argparse
import datetime
import io
from typing import Any

import pytest

from kcpshard.plugin import checklist, cli, clock, commands, live, objects, render, tables
from kcpshard.plugin.checklist import Mark
from kcpshard.roll.phase import Phase
from kcpshard.roll.route import route

T0 = "2026-03-01T10:00:00.000000Z"
NOW = datetime.datetime(2026, 3, 1, 10, 0, 9, tzinfo=datetime.UTC)


def cond(
    type_: str, status: str, reason: str = "R", message: str = "", at: str = "2026-03-01T10:00:00Z"
) -> dict:
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": at}


def shard(generation: int = 2, observed: int | None = 2, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "KcpShard",
        "metadata": {
            "name": "root",
            "namespace": "default",
            "generation": generation,
            "creationTimestamp": T0,
        },
        "spec": {"kcp": {"version": "v0.32.2"}, "shape": "BlueGreen"},
        "status": {"observedGeneration": observed, **status} if observed is not None else status,
    }


READY = [cond("Ready", "True", "Serving", "slot a serves revision r1"), cond("Reconciling", "False", "Idle")]
ROLLING = [
    cond("Ready", "False", "Progressing", "slot b created; next: WaitingReady"),
    cond("Reconciling", "True", "Progressing", "slot b created; next: WaitingReady"),
    cond("Stalled", "False", "Progressing"),
]
STALLED = [
    cond("Ready", "False", "ReadyTimeout", "slot a serves revision r1; the roll failed"),
    cond("Reconciling", "False", "RollAborted"),
    cond("Stalled", "True", "ReadyTimeout", "slot a serves revision r1; the roll failed"),
]


def rollout(step: str, shape: str = "BlueGreen", **stamps: str) -> dict[str, Any]:
    return {
        "step": step,
        "fromSlot": "a",
        "toSlot": "b" if shape == "BlueGreen" else "a",
        "targetRevision": "r2",
        "fromRevision": "r1",
        "shape": shape,
        "startedAt": T0,
        "stepStartedAt": stamps.get("ready", T0),
        "targetSpec": {"kcp": {"version": "v0.32.2"}},
        "timestamps": {"started": T0, "slotStarting": T0, **stamps},
    }


def report(result: str, **fields: Any) -> dict[str, Any]:
    """A roll's report (RollReport on the wire): a blue/green roll from slot a to b unless told."""
    return {"result": result, "fromSlot": "a", "toSlot": "b", "shape": "BlueGreen", **fields}


# ----- phase ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (shard(observed=None), (Phase.PROGRESSING, "waiting for the operator to see the shard")),
        (shard(conditions=READY), (Phase.HEALTHY, "slot a serves revision r1")),
        (
            shard(observed=1, conditions=ROLLING, rollout=rollout("WaitingReady")),
            (Phase.PROGRESSING, "slot b created; next: WaitingReady"),
        ),
        (shard(conditions=STALLED), (Phase.DEGRADED, "slot a serves revision r1; the roll failed")),
        # a verdict of an older generation is no verdict on the spec now
        (
            shard(generation=3, observed=2, conditions=STALLED),
            (Phase.PROGRESSING, "waiting for the operator to act on generation 3"),
        ),
        (
            shard(generation=3, observed=2, conditions=READY),
            (Phase.PROGRESSING, "waiting for the operator to act on generation 3"),
        ),
        (
            shard(
                conditions=[cond("Reconciling", "True", "WaitingForPromotion", "slot b is ready; promote it")]
            ),
            (Phase.PAUSED, "slot b is ready; promote it"),
        ),
        (
            shard(conditions=[cond("Ready", "Unknown", "Observed", "seen by the operator")]),
            (Phase.PROGRESSING, "seen by the operator"),
        ),
    ],
    ids=["new", "ready", "rolling", "stalled", "stalled-older", "ready-older", "promotion", "first-sight"],
)
def test_phase(obj: dict, expected: tuple[Phase, str]) -> None:
    assert render.phase(obj) == expected


def test_a_shard_being_deleted_is_terminating() -> None:
    obj = shard(conditions=READY)
    obj["metadata"]["deletionTimestamp"] = T0
    assert render.phase(obj)[0] is Phase.TERMINATING


# ----- steps ----------------------------------------------------------------------------------------


def step_order(roll: dict[str, Any]) -> list[str]:
    """The steps of a roll as the plugin reads them: the roll's own rule, on the parsed record."""
    return [s.value for s in route(objects.rollout(roll))]


def test_step_order_per_shape() -> None:
    assert " ".join(step_order(rollout("Starting"))) == (
        "Starting WaitingReady Flipping StoppingOld HandingOverLease Probing Draining Retiring"
    )
    assert step_order(rollout("StoppingOld", shape="Single"))[:4] == [
        "StoppingOld", "Starting", "WaitingReady", "Flipping",
    ]  # fmt: skip
    first = step_order({**rollout("Starting"), "fromSlot": None})
    assert "StoppingOld" not in first and "Draining" not in first  # nothing to stop or drain
    assert step_order({**rollout("BackingUp"), "targetSpec": {"roll": {"backup": True}}})[0] == "BackingUp"
    # a recovery starts the serving revision again: no backup, whatever its spec says
    recovery = {**rollout("Starting"), "recovery": True, "targetSpec": {"roll": {"backup": True}}}
    assert step_order(recovery)[0] == "Starting"
    # restoring the old revision (Single): the old slot stopped first, and not once more after the flip
    restoring = {**rollout("Flipping", shape="Single"), "restoring": True}
    assert step_order(restoring).count("StoppingOld") == 1


def test_running_roll_marks_done_running_and_pending_steps_with_times() -> None:
    roll = rollout("Flipping", slotCreated="2026-03-01T10:00:00.250000Z", ready="2026-03-01T10:00:03.250000Z")
    items = checklist.step_items(roll, running=True, now=NOW)
    assert [(i.mark, i.name) for i in items[:4]] == [
        (Mark.DONE, "Starting"),
        (Mark.DONE, "WaitingReady"),
        (Mark.RUNNING, "Flipping"),
        (Mark.PENDING, "StoppingOld"),
    ]
    assert (items[0].time, items[0].duration) == ("10:00:00", "0.25s")
    assert (items[1].time, items[1].duration) == ("10:00:03", "3.00s")
    assert items[2].duration == "5.75s" and items[2].note == "now"  # running since stepStartedAt
    # without a clock the view changes only when the objects do
    assert checklist.step_items(roll, running=True)[2].duration == ""


def test_failed_report_marks_the_step_it_ended_in() -> None:
    aborted = report(
        "Aborted", timestamps={"started": T0, "slotCreated": T0, "aborted": "2026-03-01T10:00:06.000000Z"}
    )
    items = checklist.step_items(aborted, running=False)
    assert [(i.mark, i.name) for i in items[:3]] == [
        (Mark.DONE, "Starting"),
        (Mark.FAILED, "WaitingReady"),
        (Mark.PENDING, "Flipping"),
    ]
    assert items[1].note == "Aborted" and items[1].duration == "6.00s"


def test_slot_conditions_with_time_and_whole_second_durations() -> None:
    slot = {
        "metadata": {"name": "root-b", "creationTimestamp": "2026-03-01T10:00:00Z"},
        "spec": {"slot": "b"},
        "status": {
            "conditions": [
                cond("Seeded", "True", "Seeded", at="2026-03-01T10:00:01Z"),
                cond("Listening", "True", "Bound", at="2026-03-01T10:00:03Z"),
                cond("Ready", "Unknown", "Starting", "host agent starting"),
            ]
        },
    }
    items = checklist.slot_items(slot, now=NOW)
    assert [(i.mark, i.name, i.time, i.duration) for i in items[:3]] == [
        (Mark.DONE, "Seeded", "10:00:01", "1s"),
        (Mark.DONE, "Listening", "10:00:03", "2s"),
        (Mark.RUNNING, "Ready", "", "6.00s"),
    ]
    assert [i.mark for i in items[3:]] == [Mark.PENDING] * 3
    slot["status"]["conditions"][2] = cond("Ready", "False", "ProcessExited", "kcp exited: exit code 2")
    failed = checklist.slot_items(slot)[2]
    assert failed.mark is Mark.FAILED and failed.note == "kcp exited: exit code 2"


def test_durations_and_ages_read_as_people_read_them() -> None:
    assert [clock.seconds(v) for v in (0.214, 3.4, 12.34, 72, 7380)] == [
        "0.21s",
        "3.40s",
        "12.3s",
        "1m12s",
        "2h3m",
    ]
    assert clock.between("2026-03-01T10:00:00.5Z", "2026-03-01T10:00:01.75Z") == "1.25s"
    assert clock.between("2026-03-01T10:00:00.9Z", "2026-03-01T10:00:01Z") == "1s"  # coarse: whole seconds
    assert clock.between("2026-03-01T10:00:02Z", "2026-03-01T10:00:01Z") == ""
    start = datetime.datetime(2026, 3, 1, tzinfo=datetime.UTC)

    def aged(**delta: float) -> str:
        return clock.age("2026-03-01T00:00:00Z", start + datetime.timedelta(**delta))

    assert [aged(seconds=5), aged(seconds=119), aged(minutes=5, seconds=3), aged(minutes=42)] == [
        "5s",
        "119s",
        "5m3s",
        "42m",
    ]
    assert [aged(hours=5, minutes=7), aged(hours=30), aged(days=3, hours=4), aged(days=40)] == [
        "5h7m",
        "30h",
        "3d4h",
        "40d",
    ]
    assert clock.age(None, start) == "<unknown>"


# ----- status ---------------------------------------------------------------------------------------


def test_status_view_of_a_roll_under_way() -> None:
    roll = rollout("WaitingReady", slotCreated="2026-03-01T10:00:00.250000Z")
    obj = shard(
        observed=1,
        conditions=ROLLING,
        rollout=roll,
        activeSlot="a",
        activeRevision="r1",
        activeSpec={"kcp": {"version": "v0.32.1"}},
        front={"observedBackend": "a", "observedPort": 4001},
        lastRoll={
            "result": "Succeeded",
            "toSlot": "a",
            "toRevision": "r1",
            "durations": {"total": 3.94, "probe": 0.5},
        },
    )
    slots = [
        {
            "metadata": {"name": "root-a"},
            "spec": {"slot": "a", "revision": "r1"},
            "status": {"pid": 10, "port": 4001},
        },
        {"metadata": {"name": "root-b"}, "spec": {"slot": "b", "revision": "r2"}, "status": {}},
    ]
    lines = render.status_lines(obj, slots, glyphs=checklist.ASCII)
    text = "\n".join(lines)
    assert lines[:3] == [
        "Name:            root",
        "Namespace:       default",
        "Status:          * Progressing",
    ]
    assert "Message:         slot b created; next: WaitingReady" in lines
    assert "Serving:         slot a (front a:4001)" in lines
    assert "Revision:        r1 (kcp v0.32.1)" in lines
    assert "Rolling to:      slot b, revision r2 (kcp v0.32.2)" in lines
    assert "Steps (WaitingReady):" in lines
    assert "  + Starting          10:00:00    0.25s" in lines
    assert "Slot b (new):" in lines
    assert "  slot a: revision r1, running" in lines
    assert "Last roll:       + Succeeded  slot a  revision r1  total 3.94s" in lines
    assert "probe 0.50s" in text and "total 3.94s" not in lines[-1]  # total is in the summary line


def test_status_view_while_the_front_follows_the_new_slot() -> None:
    # the active record moves before the flip; activeSpec follows only at the end of the roll
    obj = shard(
        observed=1,
        conditions=ROLLING,
        rollout=rollout("Flipping"),
        activeSlot="b",
        activeRevision="r2",
        activeSpec={"kcp": {"version": "v0.32.1"}},
        front={"observedBackend": "a", "observedPort": 4001},
    )
    lines = render.status_lines(obj)
    assert "Serving:         slot a (front a:4001); slot b is recorded active, the front follows" in lines
    assert "Revision:        r2 (kcp v0.32.2)" in lines


def test_status_view_of_a_healthy_shard_lists_the_last_roll_steps() -> None:
    succeeded = report(
        "Succeeded",
        fromRevision="r1",
        toRevision="r2",
        timestamps={
            "started": T0,
            "slotCreated": "2026-03-01T10:00:00.5Z",
            "finished": "2026-03-01T10:00:07Z",
        },
        durations={"total": 7.0},
    )
    lines = render.status_lines(
        shard(conditions=READY, activeSlot="b", lastRoll=succeeded), glyphs=checklist.UNICODE
    )
    assert "Status:          ✔ Healthy" in lines
    assert "Last roll:       ✔ Succeeded  slot a → b  revision r1 → r2  total 7.00s" in lines
    assert "Steps of the last roll:" in lines
    assert "Slot b (serving): its KcpSlot is gone" in lines


@pytest.mark.parametrize(
    ("step", "shape", "allowed"),
    [
        ("Starting", "BlueGreen", True),
        ("WaitingReady", "BlueGreen", True),
        ("Flipping", "BlueGreen", True),
        ("StoppingOld", "BlueGreen", False),  # the front already serves the new slot
        ("StoppingOld", "Single", True),  # the planned outage: the new slot has not started
        ("HandingOverLease", "BlueGreen", False),
        ("Probing", "BlueGreen", False),
        ("Draining", "BlueGreen", False),
        ("Retiring", "BlueGreen", False),
    ],
)
def test_abort_only_before_the_flip(step: str, shape: str, allowed: bool) -> None:
    ok, why = render.can_abort(shard(conditions=ROLLING, rollout=rollout(step, shape=shape)))
    assert ok is allowed
    assert ("the store has moved on" in why) is not allowed


def test_abort_without_a_roll() -> None:
    assert render.can_abort(shard(conditions=READY)) == (
        False,
        "kcpshard root has no roll under way: nothing to abort",
    )


# ----- tables ---------------------------------------------------------------------------------------


def test_history_reads_status_history_newest_first_or_the_last_roll() -> None:
    newest = report(
        "Failed",
        reason="ProbeFailed",
        fromSlot="b",
        toSlot="a",
        fromRevision="r2",
        toRevision="r3",
        timestamps={"started": "2026-03-02T09:00:00.1Z"},
        durations={"startToReady": 3.2},
    )
    older = report(
        "Succeeded",
        fromSlot=None,
        toSlot="a",
        toRevision="r1",
        timestamps={"started": T0},
        durations={"total": 4.0, "startToReady": 3.0},
    )
    lines = tables.history_lines(shard(history=[newest, older], lastRoll=newest), checklist.ASCII)
    assert lines[0].split() == [
        "#",
        "RESULT",
        "STARTED",
        "SLOT",
        "REVISION",
        "SHAPE",
        "TOTAL",
        "START-TO-READY",
        "REASON",
    ]
    assert lines[1].split() == [
        "1",
        "Failed",
        "2026-03-02",
        "09:00:00",
        "b->a",
        "r2->r3",
        "BlueGreen",
        "3.20s",
        "ProbeFailed",
    ]
    assert lines[2].split() == [
        "2",
        "Succeeded",
        "2026-03-01",
        "10:00:00",
        "a",
        "r1",
        "BlueGreen",
        "4.00s",
        "3.00s",
    ]
    only_last = tables.history_lines(shard(lastRoll=older))
    assert len(only_last) == 2 and only_last[1].split()[1] == "Succeeded"
    assert tables.history_reports(shard()) == []


def test_list_table_as_kubectl_lays_it_out() -> None:
    a = shard(
        conditions=READY, activeSlot="a", activeRevision="r1", activeSpec={"kcp": {"version": "v0.32.1"}}
    )
    b = shard(conditions=ROLLING, rollout=rollout("Probing"))
    b["metadata"] = {**b["metadata"], "name": "beta", "namespace": "team"}
    lines = tables.list_lines([b, a], NOW, all_namespaces=True)
    assert lines[0].split() == [
        "NAMESPACE",
        "NAME",
        "STATUS",
        "SERVING",
        "REVISION",
        "VERSION",
        "STEP",
        "AGE",
    ]
    assert lines[1].split() == ["default", "root", "Healthy", "a", "r1", "v0.32.1", "<none>", "9s"]
    assert lines[2].split() == ["team", "beta", "Progressing", "<none>", "<none>", "<none>", "Probing", "9s"]
    # a shard held before its roll starts shows why in STEP
    held = shard(conditions=[cond("Reconciling", "True", "WaitingForRootShard", "waiting for root shard")])
    assert tables.list_lines([held], NOW)[1].split()[-2] == "WaitingForRootShard"
    # columns start where their header does
    assert lines[1].index("Healthy") == lines[0].index("STATUS")
    assert tables.list_lines([a], NOW)[0].split()[0] == "NAME"


# ----- the command line -----------------------------------------------------------------------------


def test_durations_on_the_command_line() -> None:
    assert [cli.duration(t) for t in ("90", "90s", "5m", "1h30m", "2m30s", "500ms", "0")] == [
        90, 90, 300, 5400, 150, 0.5, 0,
    ]  # fmt: skip
    for bad in ("5 m", "m", "5d", "1h-3m"):
        with pytest.raises(argparse.ArgumentTypeError):
            cli.duration(bad)


def test_wait_outcome() -> None:
    assert commands.wait_outcome(shard(conditions=READY)) == (
        0,
        "kcpshard root is healthy: slot a serves revision r1",
    )
    code, message = commands.wait_outcome(shard(conditions=STALLED)) or (None, "")
    assert code == 3 and message.startswith("kcpshard root stalled: slot a serves")
    assert commands.wait_outcome(shard(observed=1, conditions=ROLLING, rollout=rollout("Probing"))) is None
    assert commands.wait_outcome(shard(generation=3, observed=2, conditions=STALLED)) is None


def test_help_lists_the_exit_codes() -> None:
    text = cli.parser().format_help()
    for line in ("0    done", "3    with --wait: the roll stalled", "4    with --wait: the --timeout passed"):
        assert line in text


# ----- the screen -----------------------------------------------------------------------------------


def test_plain_output_appends_each_changed_view_as_a_block() -> None:
    out = io.StringIO()
    screen = live.Screen(out, live=False)
    screen.show(["Status: ◌ Progressing", "x"])
    screen.show(["Status: ◌ Progressing", "x"])  # unchanged: not again
    screen.show(["Status: ✔ Healthy"])
    assert out.getvalue() == "Status: ◌ Progressing\nx\n\nStatus: ✔ Healthy\n"


def test_terminal_output_redraws_in_place_with_colour() -> None:
    out = io.StringIO()
    screen = live.Screen(out, live=True, color=True)
    screen.show(["a", "◌ b"])
    screen.show(["a", "✔ b", "c"])
    text = out.getvalue()
    first, second = text.split("\x1b[2F\x1b[J")  # back over the two lines shown, clear below
    assert first == "a\n\x1b[33m◌\x1b[0m b\n"
    assert second == "a\n\x1b[32m✔\x1b[0m b\nc\n"


def test_glyphs_follow_the_output_encoding() -> None:
    utf8 = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    latin = io.TextIOWrapper(io.BytesIO(), encoding="latin-1")
    assert live.glyphs_for(utf8) is checklist.UNICODE
    assert live.glyphs_for(latin) is checklist.ASCII
