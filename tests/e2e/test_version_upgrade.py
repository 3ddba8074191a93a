"""Version-aware rolls.

A non-root shard rolled across v0.33.0, the kcp release that deprecates `--root-shard-kubeconfig-file`
(it reads the core APIExport identities from the cache server): the new slot runs without the flag, and
the `identitycache` ConfigMap the old version kept in `default` of `system:shard` is deleted once, by the
roll that crossed the release.

The kcp-admin kubeconfig (its token is new on every kcp start) is published in `<shard>-kcp-admin` for
consumers, without the shard-admin user, and follows the serving slot across a roll.
"""

from __future__ import annotations

import base64
import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from kcpshard.api.models import KcpShardSpec
from kcpshard.k8s.api import JOBS, KCPSHARDS, SECRETS
from kcpshard.kcp.kubeconfig import ShardAdmin
from kcpshard.roll.revision import revision_of
from kcpshard_testkit import scenario
from kcpshard_testkit.kcpbin import make_kcp
from kcpshard_testkit.stack import Stack
from kcpshard_testkit.waiting import wait_for

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(300)]

FAST = scenario.FAST
IDENTITY_CACHE = "/clusters/system:shard/api/v1/namespaces/default/configmaps/identitycache"
ROOT_SHARD_FLAG = "--root-shard-kubeconfig-file"

# The stand-in only needs the files to exist; a real kcp would dial these servers.
KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: {name}
  cluster:
    server: https://127.0.0.1:6443/clusters/root
    insecure-skip-tls-verify: true
users:
- name: {name}
  user:
    token: not-a-real-token
contexts:
- name: {name}
  context:
    cluster: {name}
    user: {name}
current-context: {name}
"""


def _client(server: str, ca_pem: bytes, token: str) -> httpx.AsyncClient:
    context = ssl.create_default_context(cadata=ca_pem.decode())
    return httpx.AsyncClient(
        base_url=server, verify=context, headers={"Authorization": f"Bearer {token}"}, timeout=10
    )


async def _status_of(admin: ShardAdmin, port: int, path: str) -> int:
    """HTTP status of a GET through the front with the shard-admin credentials."""
    async with _client(f"https://127.0.0.1:{port}", admin.ca_pem, admin.token) as client:
        return (await client.get(path)).status_code


async def _job_command(stack: Stack, shard: str) -> list[str]:
    (name,) = await scenario.slot_jobs(stack, shard)
    job = await stack.api.get(JOBS, stack.namespace, name)
    return list(job["spec"]["template"]["spec"]["containers"][0]["command"])


def _count(events: list[dict[str, Any]], reason: str) -> int:
    return sum(int(e.get("count") or 1) for e in events if e.get("reason") == reason)


async def _secret(stack: Stack, name: str, data: dict[str, str]) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": stack.namespace},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }
    await stack.api.create(SECRETS, stack.namespace, body)


async def _beta_on_v032(stack: Stack, bin_dir: Path, root_ref: str | None = None) -> int:
    """A non-root shard `beta` serving kcp v0.32.1 (which keeps `identitycache`); returns the front port."""
    await _secret(stack, "cache-kc", {"kubeconfig": KUBECONFIG.format(name="cache")})
    await _secret(stack, "root-kc", {"kubeconfig": KUBECONFIG.format(name="root-shard")})
    port = await scenario.create_shard(
        stack,
        "beta",
        kcp={"version": "v0.32.1", "binary": make_kcp(bin_dir, "kcp-0321", version="v0.32.1", **FAST)},
        shard={
            "name": "beta",
            "root": False,
            "cacheKubeconfigSecretRef": {"name": "cache-kc"},
            "rootShardKubeconfigSecretRef": {"name": "root-kc"},
        }
        | ({"rootShardRef": {"name": root_ref}} if root_ref else {}),
    )
    await scenario.wait_ready(stack, "beta")
    return port


async def _roll_beta(stack: Stack, binary: str, version: str | None = None, **roll: Any) -> dict[str, Any]:
    kcp = {"binary": binary} | ({"version": version} if version else {})
    spec: dict[str, Any] = {"kcp": kcp} | ({"roll": roll} if roll else {})
    await stack.api.patch(KCPSHARDS, stack.namespace, "beta", {"spec": spec})
    return await scenario.wait_last_roll(stack, "beta")


async def test_non_root_shard_rolled_into_v033_drops_the_flag_and_the_stale_identity_cache(
    stack: Stack,
    bin_dir: Path,
) -> None:
    port = await _beta_on_v032(stack, bin_dir)
    old_command = await _job_command(stack, "beta")
    assert any(arg.startswith(f"{ROOT_SHARD_FLAG}=") for arg in old_command), old_command
    assert any(arg.startswith("--cache-kubeconfig=") for arg in old_command), old_command
    admin = await stack.shard_admin("beta")
    assert await _status_of(admin, port, IDENTITY_CACHE) == 200  # v0.32 keeps it

    async with scenario.traffic(stack, port, name="beta") as load:
        v033 = make_kcp(bin_dir, "kcp-0330", version="v0.33.0", **FAST)
        shard = await _roll_beta(stack, v033, "v0.33.0")
        await scenario.more_requests(load)
    assert shard["status"]["lastRoll"]["result"] == "Succeeded", shard["status"]["lastRoll"]
    assert shard["status"]["activeSlot"] == "b"
    await scenario.wait_settled(stack, "beta")
    new_command = await _job_command(stack, "beta")
    assert new_command[new_command.index("--slot") + 1] == "beta-b"  # slot b's Job
    assert not any(arg.startswith(ROOT_SHARD_FLAG) for arg in new_command), new_command
    assert any(arg.startswith("--cache-kubeconfig=") for arg in new_command), new_command
    assert await _status_of(admin, port, IDENTITY_CACHE) == 404
    deleted = await scenario.wait_event(stack, "beta", "IdentityCacheDeleted")
    assert "identitycache" in deleted["message"] and "v0.33.0" in deleted["message"], deleted["message"]
    assert _count(await scenario.events(stack, "beta"), "IdentityCacheDeleted") == 1
    assert load.report.failed == 0, load.report.failures

    # Another v0.33 binary: an ordinary roll, with nothing left to clean.
    shard = await _roll_beta(stack, make_kcp(bin_dir, "kcp-0330-again", version="v0.33.0", **FAST))
    assert shard["status"]["lastRoll"]["result"] == "Succeeded"
    assert shard["status"]["activeSlot"] == "a"
    await scenario.wait_settled(stack, "beta")
    assert not any(arg.startswith(ROOT_SHARD_FLAG) for arg in await _job_command(stack, "beta"))
    assert _count(await scenario.events(stack, "beta"), "IdentityCacheDeleted") == 1
    assert await _status_of(admin, port, IDENTITY_CACHE) == 404


async def test_identity_cache_is_cleaned_by_the_next_roll_when_the_crossing_roll_failed_after_the_flip(
    stack: Stack,
    bin_dir: Path,
) -> None:
    port = await _beta_on_v032(stack, bin_dir)
    admin = await stack.shard_admin("beta")
    assert await _status_of(admin, port, IDENTITY_CACHE) == 200
    # v0.33 whose workspace controller never runs: the probe fails after the flip; the roll never flips
    # back, so the shard now runs v0.33 and the stale ConfigMap is still there.
    broken = make_kcp(bin_dir, "kcp-0330-broken", version="v0.33.0", controller_period_seconds=3600, **FAST)
    shard = await _roll_beta(stack, broken, "v0.33.0", probeTimeoutSeconds=4)
    assert shard["status"]["lastRoll"]["result"] == "Failed"
    assert shard["status"]["lastRoll"]["reason"] == "ProbeFailed"
    assert shard["status"]["activeSlot"] == "b"
    assert await _status_of(admin, port, IDENTITY_CACHE) == 200
    # The fix: a working v0.33 binary. Its roll succeeds, and the stale ConfigMap must go now.
    shard = await _roll_beta(stack, make_kcp(bin_dir, "kcp-0330-fixed", version="v0.33.0", **FAST))
    assert shard["status"]["lastRoll"]["result"] == "Succeeded", shard["status"]["lastRoll"]
    assert await _status_of(admin, port, IDENTITY_CACHE) == 404
    assert _count(await scenario.events(stack, "beta"), "IdentityCacheDeleted") == 1


def _kcp_admin(secret: dict[str, Any]) -> tuple[str, bytes, str, dict[str, Any]]:
    """(server, CA, token, the whole kubeconfig) of the published Secret."""
    doc = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
    context = next(c for c in doc["contexts"] if c["name"] == doc["current-context"])["context"]
    cluster = next(c for c in doc["clusters"] if c["name"] == context["cluster"])["cluster"]
    user = next(u for u in doc["users"] if u["name"] == context["user"])["user"]
    return cluster["server"], base64.b64decode(cluster["certificate-authority-data"]), user["token"], doc


async def _published_token(stack: Stack, other_than: str | None = None) -> dict[str, Any]:
    async def published() -> dict[str, Any] | None:
        shard = await stack.shard("root")
        if (shard.get("status") or {}).get("adminKubeconfigSecret") != "root-kcp-admin":
            return None
        secret = await stack.api.get(SECRETS, stack.namespace, "root-kcp-admin")
        return secret if _kcp_admin(secret)[2] != other_than else None

    return await wait_for("the kcp-admin kubeconfig in Secret root-kcp-admin", published, timeout=30)


async def test_kcp_admin_kubeconfig_is_published_and_follows_the_roll(stack: Stack, bin_dir: Path) -> None:
    port, _ = await scenario.serving_shard(stack, bin_dir)
    secret = await _published_token(stack)
    assert sorted(secret["data"]) == ["kubeconfig"]
    server, ca, token, doc = _kcp_admin(secret)
    assert server == f"https://127.0.0.1:{port}/clusters/root"  # the front, not a slot's port
    assert [u["name"] for u in doc["users"]] == ["kcp-admin"]  # no shard-admin
    shard_admin = await stack.shard_admin("root")
    assert shard_admin.token not in base64.b64decode(secret["data"]["kubeconfig"]).decode()
    async with _client(server, ca, token) as client:
        answer = await client.get("/api/v1/namespaces")
    assert answer.status_code == 200, answer.text
    assert "default" in [n["metadata"]["name"] for n in answer.json()["items"]]

    await stack.api.patch(
        KCPSHARDS, stack.namespace, "root", {"spec": {"kcp": {"binary": make_kcp(bin_dir, "kcp-2", **FAST)}}}
    )
    shard = await scenario.wait_last_roll(stack, "root")
    assert shard["status"]["lastRoll"]["result"] == "Succeeded"
    assert shard["status"]["activeSlot"] == "b"
    await scenario.wait_settled(stack)
    secret = await _published_token(stack, other_than=token)
    new_server, new_ca, new_token, new_doc = _kcp_admin(secret)
    assert new_token != token  # a new kcp process, a new kcp-admin token
    assert new_server == server
    assert [u["name"] for u in new_doc["users"]] == ["kcp-admin"]
    async with _client(new_server, new_ca, new_token) as client:
        answer = await client.get("/api/v1/namespaces")
    assert answer.status_code == 200, answer.text
    # The old token died with the old kcp process.
    async with _client(server, ca, token) as client:
        stale = await client.get("/api/v1/namespaces")
    assert stale.status_code == 401, stale.text


async def test_a_non_root_shard_waits_for_its_root_then_rolls_by_itself(stack: Stack, bin_dir: Path) -> None:
    """docs/design.md#root-shard-first: a non-root shard never runs a newer kcp than its root serves."""
    v033 = make_kcp(bin_dir, "kcp-0330", version="v0.33.0", **FAST)
    v032 = make_kcp(bin_dir, "kcp-root-0321", version="v0.32.1", **FAST)
    await scenario.create_shard(stack, "root", kcp={"version": "v0.32.1", "binary": v032})
    await scenario.wait_ready(stack, "root")
    port = await _beta_on_v032(stack, bin_dir, root_ref="root")
    (beta_job,) = await scenario.slot_jobs(stack, "beta")

    async def waiting_for_root() -> dict[str, Any] | None:
        shard = await stack.shard("beta")
        reconciling = scenario.condition(shard, "Reconciling")
        return shard if reconciling.get("reason") == "WaitingForRootShard" else None

    async with scenario.traffic(stack, port, name="beta") as load:
        patched = await stack.api.patch(
            KCPSHARDS, stack.namespace, "beta", {"spec": {"kcp": {"version": "v0.33.0", "binary": v033}}}
        )
        target = revision_of(KcpShardSpec.model_validate(patched["spec"]))
        held = await wait_for("beta waiting for its root", waiting_for_root, timeout=60)
        reconciling = scenario.condition(held, "Reconciling")
        assert reconciling["status"] == "True", reconciling
        assert (
            f"root shard {stack.namespace}/root to serve kcp v0.33.0 or newer (it serves kcp v0.32.1)"
            in (reconciling["message"])
        ), reconciling
        assert scenario.condition(held, "Stalled")["status"] == "False"
        assert not held["status"].get("rollout")
        assert await scenario.slot_jobs(stack, "beta") == [beta_job]  # nothing started
        await scenario.wait_event(stack, "beta", "WaitingForRootShard")

        await stack.api.patch(
            KCPSHARDS, stack.namespace, "root", {"spec": {"kcp": {"version": "v0.33.0", "binary": v033}}}
        )
        root = await scenario.wait_last_roll(stack, "root", timeout=180)
        assert root["status"]["lastRoll"]["result"] == "Succeeded", root["status"]["lastRoll"]
        # By itself; it may begin before the root's roll ends (the root serves v0.33.0 from its flip).
        beta = await scenario.wait_last_roll(stack, "beta", to_revision=target, timeout=180)
        await scenario.more_requests(load)
    assert beta["status"]["lastRoll"]["result"] == "Succeeded", beta["status"]["lastRoll"]
    assert beta["status"]["activeSpec"]["kcp"]["version"] == "v0.33.0"
    assert load.report.failed == 0, load.report.failures
