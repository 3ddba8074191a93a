"""The slot handlers against a recording API: their requests in order, and a request failing halfway."""

from __future__ import annotations

import pytest

from fakes import IDENTITY_KEPT, IDENTITY_MADE, REV, SPEC, RecordingApi, act_context, observed
from kcpshard.api.models import SlotName
from kcpshard.controller.act import slots
from kcpshard.k8s.api import JOBS, KCPSLOTS, ApiError
from kcpshard.roll.actions import CreateSlot, StopSlot

JOB_B = f"root-b-{REV[:8]}-0"


async def test_create_slot_writes_the_slot_then_its_job() -> None:
    api = RecordingApi()
    obs = observed(api)
    job = await slots.create_slot(act_context(api), CreateSlot(SlotName.B, REV, 0, SPEC, roll_id="r1"), obs)
    assert job == JOB_B
    # the identity and the KcpSlot at once, both before the Job (its pod needs the ServiceAccount)
    *before, last = api.requests
    assert sorted(before) == sorted([*IDENTITY_MADE, ("create", "kcpslots", "root-b")])
    assert last == ("create", "jobs", JOB_B)
    slot = api.stored(KCPSLOTS, "root-b")
    assert slot["spec"] == {"shard": "root", "slot": "b", "revision": REV, "start": 0, "roll": "r1"}
    owner = api.stored(JOBS, JOB_B)["metadata"]["ownerReferences"][0]
    assert owner["uid"] == slot["metadata"]["uid"]  # the Job goes with its slot


async def test_create_slot_names_the_job_after_the_start_counter() -> None:
    api = RecordingApi()
    job = await slots.create_slot(act_context(api), CreateSlot(SlotName.B, REV, 3, SPEC), observed(api))
    assert job == f"root-b-{REV[:8]}-3"


async def test_create_slot_stopped_between_its_two_writes_finishes_the_job_the_next_time() -> None:
    api = RecordingApi()
    obs, action = observed(api), CreateSlot(SlotName.B, REV, 0, SPEC, roll_id="r1")
    api.fail("create", "jobs")
    with pytest.raises(ApiError):
        await slots.create_slot(act_context(api), action, obs)
    assert api.names(KCPSLOTS) == ["root-b"] and api.names(JOBS) == []
    # the action again: the slot exists (409), is read back, and its Job is created
    api.requests.clear()
    assert await slots.create_slot(act_context(api), action, obs) == JOB_B
    *before, last = api.requests
    assert sorted(before) == sorted(
        [*IDENTITY_KEPT, ("create", "kcpslots", "root-b"), ("get", "kcpslots", "root-b")]
    )
    assert before.index(("create", "kcpslots", "root-b")) < before.index(("get", "kcpslots", "root-b"))
    assert last == ("create", "jobs", JOB_B)


async def test_create_slot_keeps_an_existing_slots_start_counter() -> None:
    # the KcpSlot written before a restart says start 2: its Job is named so, whatever the action says
    api = RecordingApi()
    obs = observed(api)
    slot = {
        "kind": "KcpSlot",
        "metadata": {"name": "root-b"},
        "spec": {"slot": "b", "revision": REV, "start": 2},
    }
    api.put(KCPSLOTS, slot)
    job = await slots.create_slot(act_context(api), CreateSlot(SlotName.B, REV, 0, SPEC), obs)
    assert job == f"root-b-{REV[:8]}-2"


async def test_create_slot_passes_other_errors_on() -> None:
    api = RecordingApi()
    api.fail("create", "kcpslots", error=ApiError(403, "Forbidden", "no"))
    with pytest.raises(ApiError, match="403"):
        await slots.create_slot(act_context(api), CreateSlot(SlotName.B, REV, 0, SPEC), observed(api))
    assert sorted(api.requests) == sorted([*IDENTITY_MADE, ("create", "kcpslots", "root-b")])  # no Job


async def test_delete_slot_deletes_the_kcpslot_in_the_background_and_a_missing_one_is_fine() -> None:
    api = RecordingApi()
    api.put(KCPSLOTS, {"metadata": {"name": "root-a"}, "spec": {}})
    await slots.delete_slot(act_context(api), SlotName.A)
    await slots.delete_slot(act_context(api), SlotName.A)
    assert api.requests == [("delete", "kcpslots", "root-a"), ("delete", "kcpslots", "root-a")]
    assert api.delete_options[("kcpslots", "root-a")]["propagationPolicy"] == "Background"


async def test_stop_slot_deletes_its_job() -> None:
    api = RecordingApi()
    api.put(JOBS, {"metadata": {"name": "job-a"}})
    await slots.stop_slot(act_context(api), StopSlot(SlotName.A, "job-a"))
    assert api.requests == [("delete", "jobs", "job-a")] and api.names(JOBS) == []
