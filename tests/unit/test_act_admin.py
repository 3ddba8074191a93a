"""Publishing the serving slot's kcp-admin kubeconfig, against a recording API."""

from __future__ import annotations

import pytest

from fakes import RecordingApi, act_context, observed
from kcpshard.api.models import KcpShardStatus
from kcpshard.controller.act.admin import Published, publish_admin_kubeconfig
from kcpshard.k8s.api import SECRETS, ApiError

SERVING = KcpShardStatus(active_slot="b", active_revision="r")


def slot_secret(api: RecordingApi, data: str) -> None:
    api.put(SECRETS, {"metadata": {"name": "root-b-kcp-admin"}, "data": {"kubeconfig": data}})


async def test_nothing_to_publish_before_a_slot_serves_or_its_agent_wrote_the_secret() -> None:
    api = RecordingApi()
    assert await publish_admin_kubeconfig(act_context(api), observed(api)) is None
    assert api.requests == []
    assert await publish_admin_kubeconfig(act_context(api), observed(api, SERVING)) is None
    assert api.requests == [("get", "secrets", "root-b-kcp-admin")]


async def test_the_kubeconfig_is_copied_then_left_alone_while_it_is_the_same() -> None:
    api = RecordingApi()
    slot_secret(api, "a2NwLTE=")
    published = await publish_admin_kubeconfig(act_context(api), observed(api, SERVING))
    assert published == Published("root-kcp-admin", changed=True)
    assert api.requests == [
        ("get", "secrets", "root-b-kcp-admin"),
        ("get", "secrets", "root-kcp-admin"),
        ("create", "secrets", "root-kcp-admin"),
    ]
    assert await publish_admin_kubeconfig(act_context(api), observed(api, SERVING)) == Published(
        "root-kcp-admin", changed=False
    )
    assert api.writes() == [("create", "secrets", "root-kcp-admin")]


async def test_a_new_token_replaces_the_copy() -> None:
    api = RecordingApi()
    slot_secret(api, "a2NwLTE=")
    await publish_admin_kubeconfig(act_context(api), observed(api, SERVING))
    slot_secret(api, "a2NwLTI=")  # kcp started again: a new kcp-admin token
    api.requests.clear()
    published = await publish_admin_kubeconfig(act_context(api), observed(api, SERVING))
    assert published == Published("root-kcp-admin", changed=True)
    assert api.writes() == [("replace", "secrets", "root-kcp-admin")]
    assert api.stored(SECRETS, "root-kcp-admin")["data"] == {"kubeconfig": "a2NwLTI="}


async def test_a_failed_copy_leaves_the_old_one_for_the_next_round() -> None:
    api = RecordingApi()
    slot_secret(api, "a2NwLTE=")
    api.fail("create", "secrets", "root-kcp-admin")
    with pytest.raises(ApiError):
        await publish_admin_kubeconfig(act_context(api), observed(api, SERVING))
    assert "root-kcp-admin" not in api.names(SECRETS)
