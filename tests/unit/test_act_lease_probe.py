"""The kcp handlers (lease watch, lease handover, probe) against a recording kcp: their calls in order,
what they return, and a call failing halfway. Which holder is new is the plan's rule (test_roll_lease)."""

from __future__ import annotations

import dataclasses

import pytest

from fakes import RecordingApi, RecordingKcp, act_context, lease
from kcpshard.controller.act import lease as lease_handlers
from kcpshard.controller.act import probe as probe_handlers
from kcpshard.controller.kcp_access import NoRootMaterial, lease_reading
from kcpshard.kcp.errors import KcpError, KcpTimeout
from kcpshard.roll.actions import FreeLease, Probe, WatchLeaseHolder
from kcpshard.roll.outcomes import Failed, HolderSeen, LeaseWatched, NoNewHolder, ProbeNotReady, ProbeReady

URL = "https://127.0.0.1:6443"
RENEWED = "2026-12-01T12:00:02.000000Z"


async def test_free_lease_deletes_then_waits_for_another_holder() -> None:
    kcp = RecordingKcp(new_holder="new-kcp")
    outcome = await lease_handlers.free_lease(
        act_context(RecordingApi(), kcp), FreeLease(URL, "old", True, 30.0)
    )
    assert outcome == HolderSeen("new-kcp")
    assert kcp.urls == [URL]
    assert kcp.calls == [("delete_lease",), ("wait_for_holder", "old", 30.0), ("close",)]


async def test_free_lease_without_a_lease_only_waits() -> None:
    kcp = RecordingKcp()
    await lease_handlers.free_lease(act_context(RecordingApi(), kcp), FreeLease(URL, None, False, 5.0))
    assert kcp.calls == [("wait_for_holder", None, 5.0), ("close",)]


async def test_free_lease_says_what_it_saw_when_nobody_takes_the_lease() -> None:
    kcp = RecordingKcp(new_holder=None)
    outcome = await lease_handlers.free_lease(
        act_context(RecordingApi(), kcp), FreeLease(URL, "old", True, 4.0)
    )
    assert isinstance(outcome, NoNewHolder) and outcome.waited == 4.0
    assert "timed out after 4s waiting for a new controller leader" in outcome.detail


async def test_free_lease_failing_at_the_delete_passes_the_error_on_and_waits_for_nobody() -> None:
    kcp = RecordingKcp(errors={"delete_lease": KcpError("connection refused")})
    with pytest.raises(KcpError):
        await lease_handlers.free_lease(act_context(RecordingApi(), kcp), FreeLease(URL, "old", True, 4.0))
    assert kcp.calls == [("delete_lease",), ("close",)]  # the loop retries the step


async def test_kcp_without_root_material_is_a_failure() -> None:
    async def no_material(url: str) -> None:
        raise NoRootMaterial("Secret root-shared has no admin.kubeconfig")

    ctx = dataclasses.replace(act_context(RecordingApi()), kcp=no_material)
    outcome = await lease_handlers.free_lease(ctx, FreeLease(URL, "old", True, 4.0))
    assert outcome == Failed("NoRootMaterial", "Secret root-shared has no admin.kubeconfig")
    assert isinstance(await probe_handlers.probe(ctx, Probe(URL, "p", 4.0)), Failed)


async def test_watch_returns_as_soon_as_the_lease_changes() -> None:
    kcp = RecordingKcp(leases=[lease("h"), lease("h"), lease("h", RENEWED)])
    outcome = await lease_handlers.watch_holder(act_context(RecordingApi(), kcp), WatchLeaseHolder(URL, 5.0))
    assert outcome == LeaseWatched(lease_reading(lease("h", RENEWED)))
    assert kcp.calls == [("get_lease",)] * 3 + [("close",)]


async def test_watch_of_a_silent_lease_ends_with_the_window() -> None:
    kcp = RecordingKcp(leases=[lease("h")])
    outcome = await lease_handlers.watch_holder(act_context(RecordingApi(), kcp), WatchLeaseHolder(URL, 0.3))
    assert outcome == LeaseWatched(lease_reading(lease("h")))
    assert kcp.calls.count(("get_lease",)) >= 2 and ("delete_lease",) not in kcp.calls  # never deleted


async def test_probe_clears_leftovers_then_probes() -> None:
    kcp = RecordingKcp(leftovers=["kcpshard-probe-old-1"])
    outcome = await probe_handlers.probe(
        act_context(RecordingApi(), kcp), Probe(URL, "kcpshard-probe-r", 9.0)
    )
    at = "2026-12-01T12:00:00.000000Z"  # the fake's workspace was created and Ready then
    stamps = (("probeCreated", at), ("probeWorkspaceReady", at))
    assert outcome == ProbeReady("kcpshard-probe-r-abc123", 0.5, stamps=stamps)
    assert kcp.calls == [
        ("delete_workspaces", "kcpshard-probe-"),
        ("probe", "kcpshard-probe-r", 9.0),
        ("close",),
    ]


async def test_probe_deletes_the_identity_cache_when_the_action_says_so() -> None:
    kcp = RecordingKcp()
    action = Probe(URL, "kcpshard-probe-r", 9.0, stale_identity_cache="v0.33.0")
    outcome = await probe_handlers.probe(act_context(RecordingApi(), kcp), action)
    assert isinstance(outcome, ProbeReady) and outcome.identity_cache_deleted
    assert ("delete_configmap", "system:shard", "default", "identitycache") in kcp.calls
    kcp = RecordingKcp(identity_cache=False)  # deleted by an earlier roll
    outcome = await probe_handlers.probe(act_context(RecordingApi(), kcp), action)
    assert isinstance(outcome, ProbeReady) and not outcome.identity_cache_deleted


async def test_a_probe_not_ready_in_time_is_reported_and_nothing_more_is_done() -> None:
    kcp = RecordingKcp(probe_error=KcpTimeout("workspace w to be Ready", 4.0, "phase Initializing"))
    action = Probe(URL, "kcpshard-probe-r", 4.0, stale_identity_cache="v0.33.0")
    outcome = await probe_handlers.probe(act_context(RecordingApi(), kcp), action)
    assert isinstance(outcome, ProbeNotReady) and "phase Initializing" in outcome.detail
    assert [c[0] for c in kcp.calls] == ["delete_workspaces", "probe", "close"]


async def test_probe_failing_at_the_leftover_cleanup_passes_the_error_on() -> None:
    kcp = RecordingKcp(errors={"delete_workspaces": KcpError("503")})
    with pytest.raises(KcpError):
        await probe_handlers.probe(act_context(RecordingApi(), kcp), Probe(URL, "p", 4.0))
    assert [c[0] for c in kcp.calls] == ["delete_workspaces", "close"]
