"""Each shard's agents get an identity of their own that names only that shard's objects."""

from __future__ import annotations

import copy
from typing import Any

from fakes import SHARD_SPEC, RecordingApi, act_context, observed, shard_body
from kcpshard.api.models import KcpShardSpec
from kcpshard.controller.act.identity import ensure_agent_identity
from kcpshard.k8s import agent_identity
from kcpshard.k8s.api import ROLES

SHARD = shard_body("beta")


def _spec(**store: Any) -> KcpShardSpec:
    spec = copy.deepcopy(SHARD_SPEC)
    if store:
        spec["store"] = store
    return KcpShardSpec.model_validate(spec)


def _names(role: dict[str, Any], resource: str, verb: str) -> list[str] | None:
    """The names a verb on a resource is limited to; None when it is not limited."""
    [rule] = [r for r in role["rules"] if r["resources"] == [resource] and verb in r["verbs"]]
    return rule.get("resourceNames")


def test_the_role_names_the_shards_own_objects_and_the_secrets_its_specs_name() -> None:
    tls = _spec(etcd={"endpoints": ["https://127.0.0.1:2379"], "tlsSecretRef": {"name": "etcd-client"}})
    kine = _spec(kine={"endpointSecretRef": {"name": "kine-dsn"}})
    role = agent_identity.role(SHARD, [tls, kine])
    assert _names(role, "kcpshards", "watch") == ["beta"]
    assert _names(role, "kcpshards/status", "patch") == ["beta"]
    assert _names(role, "kcpslots", "get") == ["beta-a", "beta-b"]
    assert _names(role, "kcpslots/status", "update") == ["beta-a", "beta-b"]
    assert _names(role, "secrets", "get") == [
        "beta-a-kcp-admin", "beta-b-kcp-admin", "beta-shared", "etcd-client", "kine-dsn",
    ]  # fmt: skip
    # RBAC cannot limit these by name; neither reads a Secret.
    assert _names(role, "secrets", "create") is None and _names(role, "pods", "list") is None
    # Nor the front's pods (the Deployment names them): their status only, patched, for the readiness gate
    assert _names(role, "pods/status", "patch") is None
    assert [r["verbs"] for r in role["rules"] if r["resources"] == ["pods/status"]] == [["patch"]]
    assert not any(r["resources"] == ["jobs"] for r in role["rules"])  # no Job: no rule, never an empty list
    assert all(r.get("resourceNames", ["x"]) for r in role["rules"])


def test_identity_objects_are_named_after_the_shard_and_go_with_it() -> None:
    account, binding = agent_identity.service_account(SHARD), agent_identity.role_binding(SHARD)
    assert account["metadata"]["name"] == binding["metadata"]["name"] == "beta-agent"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "beta-agent",
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "beta-agent", "namespace": "default"}]
    for obj in (account, binding, agent_identity.role(SHARD, [])):
        assert obj["metadata"]["ownerReferences"][0]["uid"] == "uid-beta"


async def test_the_role_is_replaced_only_when_what_it_names_changes() -> None:
    api = RecordingApi()
    obs = observed(api)
    ctx = act_context(api)
    await ensure_agent_identity(ctx, obs, [obs.spec])
    first = api.stored(ROLES, "root-agent")
    api.requests.clear()
    await ensure_agent_identity(ctx, obs, [obs.spec])
    assert ("replace", "roles", "root-agent") not in api.requests
    # A roll to a spec naming a store TLS Secret: the Role grows to it, at the version it read.
    tls = _spec(etcd={"endpoints": ["https://127.0.0.1:2379"], "tlsSecretRef": {"name": "etcd-client"}})
    await ensure_agent_identity(ctx, obs, [tls])
    assert api.requests[-2:] == [("replace", "roles", "root-agent"), ("create", "rolebindings", "root-agent")]
    assert "etcd-client" in (_names(api.stored(ROLES, "root-agent"), "secrets", "get") or [])
    assert "etcd-client" not in (_names(first, "secrets", "get") or [])
