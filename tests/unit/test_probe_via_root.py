"""A non-root shard's probe goes through its root shard: real kcp serves the `root` workspace only on the
root shard (a non-root shard answers 404 to POST /clusters/root/.../workspaces), so the probe workspace is
made there, placed on the non-root shard by its Shard's `name` label, as the root's shard-admin."""

from __future__ import annotations

import json
from typing import Any

import httpx
from tests.unit.test_kcp_client_mocked import CA, TOKEN
from tests.unit.test_roll_plan import NON_ROOT, REV, SPEC, URL, during, next_of, rollout, slot

from fakes import LOG, RecordingApi, RecordingKcp
from kcpshard.api.models import KcpShardStatus
from kcpshard.controller.act import probe as probe_handlers
from kcpshard.controller.act.context import ActContext
from kcpshard.controller.config import OperatorConfig
from kcpshard.controller.kcp_access import KcpConnect
from kcpshard.kcp.client import WORKSPACES_PATH, KcpClient
from kcpshard.roll import plan
from kcpshard.roll.actions import PROBE_PREFIX, SHARD_PROBE_PREFIX, Probe, ProbeVia
from kcpshard.roll.outcomes import ProbeReady

ROOT_URL = "https://10.0.0.9:7443"


def probe_of(spec: Any, root: plan.RootShardView | None) -> plan.Action:
    status: KcpShardStatus = during(rollout(plan.Step.PROBING), active_slot="b")
    return next_of(status, slot(plan.SlotName.B), spec=spec, root_shard=root)


def test_a_non_root_shard_probes_through_its_root_shard_onto_itself() -> None:
    action = probe_of(NON_ROOT, plan.RootShardView("root", True, "v0.32.1", front_url=ROOT_URL))
    assert isinstance(action, Probe), action
    via = action.via
    assert via is not None and (via.shard, via.url, action.location) == ("root", ROOT_URL, "beta")
    assert action.leftovers.startswith(SHARD_PROBE_PREFIX) and action.prefix == f"{action.leftovers}{REV[:8]}"
    # the root's own clean-up (by PROBE_PREFIX) can never take this shard's probe under way
    assert not action.prefix.startswith(PROBE_PREFIX) and len(action.prefix) <= 56
    assert action.url == URL  # its own front, for the identitycache clean-up


def test_a_root_shard_or_a_non_root_one_without_a_known_root_probes_through_its_own_front() -> None:
    root_view = plan.RootShardView("root", True, "v0.32.1", front_url=ROOT_URL)
    for spec, view in ((SPEC, root_view), (NON_ROOT, None), (NON_ROOT, plan.RootShardView("root", True))):
        action = probe_of(spec, view)
        assert isinstance(action, Probe) and action.via is None, action
        assert action.prefix == f"{PROBE_PREFIX}{REV[:8]}" and action.leftovers == PROBE_PREFIX
        # placed on the shard itself: a root's probe never lands on a non-root shard that is rolling
        assert action.location == spec.shard.name


async def test_the_probe_via_root_uses_the_roots_credentials_and_its_own_front_for_the_identity_cache() -> (
    None
):
    own, root = RecordingKcp(), LocatedKcp()
    connected: list[str] = []

    def kcp_of(shard: str) -> KcpConnect:
        connected.append(shard)
        return root.connect  # type: ignore[return-value]

    ctx = ActContext(RecordingApi(), "default", "beta", OperatorConfig(), own.connect, LOG, kcp_of)  # type: ignore[arg-type]
    action = Probe(
        URL,
        "kcpshard-shard-probe-abc123-r",
        9.0,
        leftovers="kcpshard-shard-probe-abc123-",
        stale_identity_cache="v0.33.0",
        via=ProbeVia("root", ROOT_URL),
        location="beta",
    )
    outcome = await probe_handlers.probe(ctx, action)
    assert isinstance(outcome, ProbeReady) and outcome.identity_cache_deleted
    assert connected == ["root"] and root.urls == [ROOT_URL] and own.urls == [URL]
    assert root.calls[:2] == [
        ("delete_workspaces", "kcpshard-shard-probe-abc123-"),
        ("probe", "kcpshard-shard-probe-abc123-r", 9.0, "beta"),
    ]
    assert own.calls == [("delete_configmap", "system:shard", "default", "identitycache"), ("close",)]


class LocatedKcp(RecordingKcp):
    async def probe(
        self, name_prefix: str, timeout: float, poll: float = 0.2, location: str | None = None
    ) -> Any:
        result = await super().probe(name_prefix, timeout, poll)
        self.calls[-1] = (*self.calls[-1], location)
        return result


async def test_a_located_workspace_selects_its_shard_by_the_name_label() -> None:
    bodies: list[dict[str, Any]] = []

    def handler(req: httpx.Request) -> httpx.Response:
        assert req.method == "POST" and req.url.path == WORKSPACES_PATH
        bodies.append(json.loads(req.content))
        return httpx.Response(201, json=bodies[-1])

    async with KcpClient(ROOT_URL, CA, TOKEN, transport=httpx.MockTransport(handler)) as c:
        await c.create_workspace("w1", location="beta")
        await c.create_workspace("w2")
    assert bodies[0]["spec"] == {"location": {"selector": {"matchLabels": {"name": "beta"}}}}
    assert bodies[1]["spec"] == {}
