"""The status writer against a recording API: each record is one resourceVersion-guarded
read-modify-write (retried on 409), other writers' fields survive it, and its Events."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from fakes import LOG, RecordedEvents, RecordingApi, observed
from kcpshard.api import conditions as cond
from kcpshard.api.models import KcpShardStatus, RolloutStatus, SlotName
from kcpshard.controller.status_writer import StatusWriter
from kcpshard.k8s.api import KCPSHARDS, KCPSLOTS, ApiError, Conflict
from kcpshard.roll import ending
from kcpshard.roll.actions import (
    Abort,
    Advance,
    Event,
    Flip,
    Record,
    ReportFrontRestarts,
    RequestDrain,
    SlotMark,
    StartRoll,
    Step,
    Verdict,
)
from kcpshard.roll.observed import Observed

STAMP = "2026-12-01T12:00:00.000000Z"
READ_WRITE = [("get", "kcpshards", "root"), ("replace", "kcpshards/status", "root")]


def writer(api: RecordingApi) -> tuple[StatusWriter, RecordedEvents]:
    events = RecordedEvents()
    return StatusWriter(api, "default", "root", LOG, events), events


def rollout(step: Step, **kw: Any) -> RolloutStatus:
    kw.setdefault("from_slot", "a")
    kw.setdefault("from_revision", "old")
    return RolloutStatus(step=step.value, to_slot="b", target_revision="new", started_at=STAMP, **kw)


def during(api: RecordingApi, ro: RolloutStatus, **status: Any) -> Observed:
    """The shard stored mid-roll, and the round's observation of it."""
    current = KcpShardStatus(rollout=ro, active_slot="a", active_revision="old", **status)
    obs = observed(api, current)
    api.touch(
        KCPSHARDS,
        "root",
        lambda o: o.update(status=current.model_dump(mode="json", by_alias=True, exclude_none=True)),
    )
    api.requests.clear()
    return obs


def status(api: RecordingApi) -> dict[str, Any]:
    return api.stored(KCPSHARDS, "root")["status"]


def condition(api: RecordingApi, type_: str) -> tuple[str, str]:
    found = cond.find(status(api).get("conditions"), type_)
    assert found is not None, type_
    return found["status"], found["reason"]


async def test_first_sight_writes_ready_unknown_once() -> None:
    api = RecordingApi()
    w, events = writer(api)
    obs = observed(api)
    await w.first_sight(obs)
    await w.first_sight(obs)
    assert api.requests == [*READ_WRITE, ("get", "kcpshards", "root")]  # the second time: nothing to write
    assert condition(api, "Ready") == ("Unknown", "Observed")
    assert events.posted == []


async def test_a_write_starts_from_the_shard_the_round_read() -> None:
    api = RecordingApi()
    w, _ = writer(api)
    obs = observed(api)
    w.known(copy.deepcopy(api.stored(KCPSHARDS, "root")))
    await w.first_sight(obs)
    assert api.requests == [("replace", "kcpshards/status", "root")]  # no GET: the round read it
    assert condition(api, "Ready") == ("Unknown", "Observed")


async def test_a_stale_read_meets_409_and_the_write_reads_again() -> None:
    api = RecordingApi()
    w, _ = writer(api)
    obs = observed(api)
    w.known(copy.deepcopy(api.stored(KCPSHARDS, "root")))
    # The front agent writes its part after the round read the shard: the round's copy is stale.
    api.touch(KCPSHARDS, "root", lambda o: o.setdefault("status", {}).update(front={"serving": "a"}))
    await w.first_sight(obs)
    assert api.requests == [("replace", "kcpshards/status", "root"), *READ_WRITE]
    assert condition(api, "Ready") == ("Unknown", "Observed")
    assert status(api)["front"] == {"serving": "a"}  # the other writer's field survives


async def test_a_stale_read_that_says_nothing_to_write_asks_the_server() -> None:
    api = RecordingApi()
    w, _ = writer(api)
    obs = observed(api)
    await w.first_sight(obs)
    before = copy.deepcopy(api.stored(KCPSHARDS, "root"))
    # Someone cleared the conditions after this writer's copy: its copy alone would say "already there".
    api.touch(KCPSHARDS, "root", lambda o: o["status"].update(conditions=[]))
    w.known(before)
    api.requests.clear()
    await w.first_sight(obs)
    assert api.requests == READ_WRITE
    assert condition(api, "Ready") == ("Unknown", "Observed")


async def test_a_stall_is_written_and_told_once() -> None:
    api = RecordingApi()
    w, events = writer(api)
    obs = observed(api)
    await w.stall(obs, "InvalidSpec", "spec.node: bad")
    await w.stall(obs, "InvalidSpec", "spec.node: bad")
    assert api.writes() == [("replace", "kcpshards/status", "root")]
    assert condition(api, "Stalled") == ("True", "InvalidSpec")
    assert status(api)["observedGeneration"] == 2
    assert events.posted == [("InvalidSpec", "spec.node: bad", True)]


async def test_a_hold_says_reconciling_with_its_reason_once_and_is_not_a_stall() -> None:
    api = RecordingApi()
    w, events = writer(api)
    obs = observed(api)
    await w.stall(obs, "InvalidSpec", "spec.node: bad")
    await w.hold(obs, "WaitingForRootShard", "waiting for root shard default/root")
    await w.hold(obs, "WaitingForRootShard", "waiting for root shard default/root")
    assert len(api.writes()) == 2  # the same hold again writes nothing
    assert condition(api, "Reconciling") == ("True", "WaitingForRootShard")
    assert condition(api, "Stalled")[0] == "False"
    assert condition(api, "Ready") == ("False", "WaitingForRootShard")
    assert events.posted[-1] == ("WaitingForRootShard", "waiting for root shard default/root", False)
    assert len(events.posted) == 2


async def test_a_write_that_meets_another_writer_is_read_again_and_keeps_its_fields() -> None:
    api = RecordingApi()
    w, _ = writer(api)
    obs = observed(api)
    api.touch(KCPSHARDS, "root", lambda o: o.update(status={"front": {"observedBackend": "a"}}))
    api.fail("replace", "kcpshards/status", error=Conflict(409, "Conflict", "modified"))
    await w.steady(obs, "slot a serves revision r")
    assert api.requests == READ_WRITE * 2
    assert status(api)["front"] == {"observedBackend": "a"}  # the front agent's report survives
    assert condition(api, "Ready") == ("True", "Serving")


async def test_start_roll_records_the_rollout_once_and_says_so() -> None:
    api = RecordingApi()
    w, events = writer(api)
    obs = observed(api)
    ro = rollout(Step.STARTING)
    started = Event("RollStarted", "rolling from slot a")
    await w.start_roll(obs, StartRoll(ro, started))
    await w.start_roll(obs, StartRoll(ro.model_copy(update={"id": "another"}), started))  # a no-op
    assert status(api)["rollout"]["step"] == "Starting" and "id" not in status(api)["rollout"]
    assert condition(api, "Reconciling") == ("True", "Progressing")
    assert events.reasons == ["RollStarted", "RollStarted"]


async def test_advance_marks_the_slots_first_and_a_failed_step_write_is_redone_whole() -> None:
    api = RecordingApi()
    api.put(KCPSLOTS, {"metadata": {"name": "root-b"}, "status": {}})
    w, events = writer(api)
    obs = during(api, rollout(Step.FLIPPING, target_spec={"node": "n1"}))
    mark = SlotMark("b", "Flipped", "True", "FrontServes", "the front serves slot b")
    action = Advance(Step.STOPPING_OLD, "the front serves slot b", marks=(mark,), active_spec={"node": "n1"})
    api.fail("replace", "kcpshards/status")
    with pytest.raises(ApiError):
        await w.advance(obs, action)
    assert api.writes() == [("replace", "kcpslots/status", "root-b"), ("replace", "kcpshards/status", "root")]
    assert status(api)["rollout"]["step"] == "Flipping"  # the step is not recorded: the round is redone
    await w.advance(obs, action)
    assert status(api)["rollout"]["step"] == "StoppingOld"
    assert "flipped" in status(api)["rollout"]["timestamps"]
    assert status(api)["activeSpec"] == {"node": "n1"}
    assert cond.is_true(api.stored(KCPSLOTS, "root-b")["status"]["conditions"], "Flipped")
    assert events.reasons == ["StoppingOld"]


async def test_advance_of_a_step_already_left_writes_nothing() -> None:
    api = RecordingApi()
    w, _ = writer(api)
    obs = during(api, rollout(Step.STARTING))
    api.touch(KCPSHARDS, "root", lambda o: o["status"]["rollout"].update(step="WaitingReady"))
    await w.advance(obs, Advance(Step.WAITING_READY, "slot b created"))
    assert api.writes() == []


async def test_advance_records_the_stamps_seen_inside_the_step() -> None:
    api = RecordingApi()
    w, _ = writer(api)
    obs = during(api, rollout(Step.PROBING))
    stamps = (
        ("probeCreated", "2026-12-01T12:00:00.100000Z"),
        ("probeWorkspaceReady", "2026-12-01T12:00:00.700000Z"),
    )
    await w.advance(obs, Advance(Step.DRAINING, "probed", stamps=stamps))
    written = status(api)["rollout"]["timestamps"]
    assert {k: written[k] for k in ("probeCreated", "probeWorkspaceReady")} == dict(stamps)
    assert "probed" in written


async def test_flip_writes_the_record_and_the_desired_backend_together() -> None:
    api = RecordingApi()
    w, events = writer(api)
    obs = during(api, rollout(Step.FLIPPING), front={"drain": "a"})
    await w.flip(obs, Flip(SlotName.B, 4321, "new"))
    assert api.writes() == [("replace", "kcpshards/status", "root")]
    assert (status(api)["activeSlot"], status(api)["activeRevision"]) == ("b", "new")
    front = status(api)["front"]
    assert (front["desiredBackend"], front["desiredPort"], front.get("drain")) == ("b", 4321, None)
    assert events.reasons == ["Flip"]


@pytest.mark.parametrize("withdraw", [False, True], ids=["blue-green", "single"])
async def test_a_drain_request_withdraws_the_ask_to_serve_the_slot_only_in_single(withdraw: bool) -> None:
    api = RecordingApi()
    w, events = writer(api)
    obs = during(api, rollout(Step.STOPPING_OLD), front={"desiredBackend": "a", "desiredPort": 4321})
    await w.request_drain(obs, RequestDrain(SlotName.A, withdraw=withdraw))
    front = status(api)["front"]
    assert front["drain"] == "a"
    asked = (front.get("desiredBackend"), front.get("desiredPort"))
    assert asked == ((None, None) if withdraw else ("a", 4321))
    assert events.reasons == ["Drain"]


async def test_a_promoted_roll_is_progressing_again_once_it_flips() -> None:
    api = RecordingApi()
    w, _ = writer(api)
    obs = during(api, rollout(Step.FLIPPING))
    await w.hold(obs, "WaitingForPromotion", "slot b is ready")
    assert condition(api, "Reconciling") == ("True", "WaitingForPromotion")
    await w.flip(during(api, rollout(Step.FLIPPING)), Flip(SlotName.B, 4321, "new"))
    assert condition(api, "Reconciling") == ("True", "Progressing")
    assert condition(api, "Ready") == ("False", "Progressing")


async def test_finish_writes_the_report_and_clears_the_roll() -> None:
    api = RecordingApi()
    w, events = writer(api)
    obs = during(api, rollout(Step.RETIRING, timestamps={"started": STAMP}))
    assert obs.status.rollout is not None
    await w.finish(obs, ending.finish(obs, obs.status.rollout, "slot b serves revision new"))
    last = status(api)["lastRoll"]
    assert "rollout" not in status(api) and last["result"] == "Succeeded" and "total" in last["durations"]
    assert condition(api, "Ready") == ("True", "Serving")
    assert events.reasons == ["RollSucceeded"]


async def test_the_writer_writes_the_conditions_and_event_the_plan_chose() -> None:
    api = RecordingApi()
    w, events = writer(api)
    obs = during(api, rollout(Step.RETIRING, timestamps={"started": STAMP}))
    assert obs.status.rollout is not None
    planned = ending.finish(obs, obs.status.rollout, "slot b serves revision new")
    odd = Verdict(("False", "Odd", "m"), ("False", "Odd", ""), ("True", "Odd", "m"))
    await w.finish(obs, dataclasses.replace(planned, verdict=odd, event="Odd", warning=True))
    assert condition(api, "Stalled") == ("True", "Odd") and condition(api, "Ready") == ("False", "Odd")
    assert [(reason, warning) for reason, _, warning in events.posted] == [("Odd", True)]


async def test_abort_puts_the_previous_record_back() -> None:
    api = RecordingApi()
    w, events = writer(api)
    obs = during(api, rollout(Step.FLIPPING), front={"desiredBackend": "b", "desiredPort": 4321})
    api.touch(KCPSHARDS, "root", lambda o: o["status"].update(activeSlot="b", activeRevision="new"))
    assert obs.status.rollout is not None
    end = ending.aborted(obs, obs.status.rollout, "FlipTimeout", "the front did not confirm")
    await w.abort(
        obs, Abort("FlipTimeout", "the front did not confirm", put_back=Record("a", "old", 1111), end=end)
    )
    assert (status(api)["activeSlot"], status(api)["activeRevision"]) == ("a", "old")
    front = status(api)["front"]
    assert (front["desiredBackend"], front["desiredPort"]) == ("a", 1111)
    assert status(api)["lastRoll"]["result"] == "Aborted" and "rollout" not in status(api)
    assert condition(api, "Stalled") == ("True", "FlipTimeout")
    reason, message, warning = events.posted[-1]
    assert reason == "FlipTimeout" and warning and message.startswith("slot a serves revision old")


async def test_fail_ends_the_roll_without_flipping_back() -> None:
    api = RecordingApi()
    w, _ = writer(api)
    obs = during(api, rollout(Step.PROBING))
    await w.fail(obs, ending.fail(obs, "ProbeFailed", "the probe workspace did not become Ready"))
    assert status(api)["activeSlot"] == "a" and status(api)["lastRoll"]["result"] == "Failed"
    assert status(api)["failedRoll"]["reason"] == "ProbeFailed"


async def test_restore_starts_the_old_revision_again_with_the_failed_holder_recorded() -> None:
    api = RecordingApi()
    w, events = writer(api)
    ro = rollout(Step.WAITING_READY, shape="Single", from_slot="b")
    obs = during(api, ro)
    await w.restore(obs, ending.restore(ro, "SlotExited", "slot b exited", "failed-kcp"))
    ro = status(api)["rollout"]
    assert (ro["restoring"], ro["step"], ro["fromHolder"]) == (True, "Starting", "failed-kcp")
    assert events.reasons == ["SlotExited"]


async def test_a_mark_on_a_slot_already_gone_is_no_error() -> None:
    api = RecordingApi()
    w, _ = writer(api)
    await w.mark_slot(SlotMark("a", "Flipped", "False", "FrontMovedOn", "moved"))
    assert api.requests == [("get", "kcpslots", "root-a")]


def test_events_are_about_the_shard_as_read_and_need_it() -> None:
    api = RecordingApi()
    w, events = writer(api)
    obs = observed(api)
    w.event(obs, "Drain", "asked the front")
    w.event(dataclasses.replace(obs, shard={}), "Drain", "nothing to name")
    assert events.posted == [("Drain", "asked the front", False)]


async def test_front_restarts_become_one_warning_event_each_count() -> None:
    api = RecordingApi()
    w, events = writer(api)
    front = {"restarts": 2, "lastRestart": "haproxy-1 exited with signal SIGKILL at t"}
    obs = during(api, rollout(Step.FLIPPING), front=front)
    action = ReportFrontRestarts(total=2, new=2, last=front["lastRestart"])
    await w.front_restarts_reported(obs, action)
    await w.front_restarts_reported(obs, action)  # a round redone: nothing new
    assert status(api)["front"]["restartsReported"] == 2
    assert status(api)["front"]["restarts"] == 2  # the agent's keys stay
    assert [(reason, warning) for reason, _, warning in events.posted] == [("FrontRestarted", True)]
    assert (
        "started again 2 times (2 in all; last: haproxy-1 exited with signal SIGKILL" in events.posted[0][1]
    )
