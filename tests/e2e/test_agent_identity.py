"""Shards in a namespace nobody prepared, each with its agents' own identity: both serve, and the real
API server (RBAC, `kubectl auth can-i` as each shard's ServiceAccount) lets one shard's agents reach its
own Secrets, Job and status and nothing of the other shard's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kcpshard.k8s.api import JOBS, KCPSHARDS
from kcpshard_testkit import scenario
from kcpshard_testkit.kcpbin import make_kcp
from kcpshard_testkit.stack import Stack
from kcpshard_testkit.tcp import free_port
from kcpshard_testkit.waiting import wait_for

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(300)]

SHARDS = ("alpha", "beta")


async def _ready(stack: Stack, name: str) -> dict[str, Any]:
    async def ready() -> dict[str, Any] | None:
        shard = await stack.shard(name)
        return shard if scenario.condition(shard, "Ready").get("status") == "True" else None

    return await wait_for(f"shard {stack.namespace}/{name} Ready", ready, timeout=90)


async def _slot_job(stack: Stack, name: str) -> str:
    listed = await stack.api.list(
        JOBS, stack.namespace, label_selector=f"kcpshard.dev/shard={name},kcpshard.dev/component=slot"
    )
    [job] = [j["metadata"]["name"] for j in listed["items"]]
    return str(job)


def _allowed(stack: Stack, shard: str, verb: str, what: str, *more: str) -> bool:
    done = stack.kubectl(
        "auth", "can-i", verb, what, *more, "-n", stack.namespace,
        f"--as=system:serviceaccount:{stack.namespace}:{shard}-agent", check=False,
    )  # fmt: skip
    answer = done.stdout.strip()
    assert answer in ("yes", "no"), done.stdout + done.stderr
    return answer == "yes"


async def test_shards_in_a_fresh_namespace_serve_and_each_agent_reaches_only_its_own_shard(
    stack: Stack,
    bin_dir: Path,
) -> None:
    # The test's namespace is new: no ServiceAccount, Role or binding of ours is in it.
    kcp = {
        "version": "v0.32.1",
        "binary": make_kcp(bin_dir, "kcp-1", rsa_bits=scenario.FAST["rsa_bits"]),
    }
    for name in SHARDS:
        manifest = stack.manifest(name, free_port(), kcp=kcp)
        await stack.api.create(KCPSHARDS, stack.namespace, manifest)
    for name in SHARDS:
        shard = await _ready(stack, name)
        assert shard["status"]["lastRoll"]["result"] == "Succeeded"
    jobs = {name: await _slot_job(stack, name) for name in SHARDS}

    for own, other in (("alpha", "beta"), ("beta", "alpha")):
        # Its own: the root material, the status it reports, its slots.
        assert _allowed(stack, own, "get", f"secret/{own}-shared")
        assert _allowed(stack, own, "update", f"secret/{own}-a-kcp-admin")
        assert _allowed(stack, own, "patch", f"kcpshards.kcpshard.dev/{own}", "--subresource=status")
        assert _allowed(stack, own, "get", f"kcpslots.kcpshard.dev/{own}-a")
        # The other shard's: none of it.
        assert not _allowed(stack, own, "get", f"secret/{other}-shared")
        assert not _allowed(stack, own, "get", f"secret/{other}-a-kcp-admin")
        assert not _allowed(stack, own, "patch", f"job/{jobs[other]}")
        assert not _allowed(stack, own, "patch", f"kcpshards.kcpshard.dev/{other}", "--subresource=status")
        assert not _allowed(stack, own, "patch", f"kcpslots.kcpshard.dev/{other}-a", "--subresource=status")
        # Nor any Secret by listing, nor its own slot's Job (no backup Job runs).
        assert not _allowed(stack, own, "list", "secrets")
        assert not _allowed(stack, own, "patch", f"job/{jobs[own]}")
