"""`store.kine`: each slot runs its own kine (k3s-io/kine, built by `make tools`) beside real kcp, on one
SQLite database; a blue/green roll goes from one kine and kcp to the next with a client through the front
counting failures, and what the old kcp wrote is there for the new one. The DSN reaches kine from its
Secret through the Job's env: it is on no command line and in no log.

Real kcp, because the stand-in reaches etcd through etcd's JSON gateway, which kine does not serve.
"""

from __future__ import annotations

import base64

import pytest

from kcpshard.k8s.api import KCPSHARDS, SECRETS
from kcpshard.kcp.client import KcpClient
from kcpshard_testkit import scenario
from kcpshard_testkit.realkcp import NEWER, on_the_node, put_on_node, real_kcp
from kcpshard_testkit.stack import Stack
from kcpshard_testkit.tools import tool

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(600)]

READY_TIMEOUT = 300


async def _workspaces(stack: Stack, port: int) -> list[str]:
    admin = await stack.shard_admin("root")
    async with KcpClient(f"https://127.0.0.1:{port}", admin.ca_pem, admin.token) as kcp:
        return await kcp.list_workspaces()


async def _create_workspace(stack: Stack, port: int, name: str) -> None:
    admin = await stack.shard_admin("root")
    async with KcpClient(f"https://127.0.0.1:{port}", admin.ca_pem, admin.token) as kcp:
        await kcp.create_workspace(name)


async def test_a_blue_green_roll_on_kine_keeps_the_data_and_every_request(stack: Stack) -> None:
    kcp = real_kcp(NEWER)
    database = stack.workload_root / "kine" / "state.db"  # on the node, where the slots reach it
    database.parent.mkdir(parents=True)
    dsn = f"sqlite://{database}?_journal=WAL&cache=shared&_busy_timeout=30000"
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "kine-dsn"},
        "data": {"endpoint": base64.b64encode(dsn.encode()).decode()},
    }
    await stack.api.create(SECRETS, stack.namespace, secret)
    store = {"kine": {"endpointSecretRef": {"name": "kine-dsn"}, "binary": put_on_node(tool("kine"), "kine")}}
    port = await scenario.create_shard(
        stack, kcp={"version": kcp.version, "binary": on_the_node(kcp)}, store=store
    )
    await scenario.wait_ready(stack, timeout=READY_TIMEOUT)
    await _create_workspace(stack, port, "written-before-the-roll")
    async with scenario.traffic(stack, port) as load:
        await stack.api.patch(KCPSHARDS, stack.namespace, "root", {"spec": {"shutdownDelaySeconds": 3}})
        shard = await scenario.wait_last_roll(stack, "root", timeout=READY_TIMEOUT)
        await scenario.more_requests(load)
    last = shard["status"]["lastRoll"]
    print(last, load.report.summary())
    assert last["result"] == "Succeeded", last
    assert shard["status"]["activeSlot"] == "b"
    assert load.report.failed == 0, load.report.failures
    assert "written-before-the-roll" in await _workspaces(stack, port)
    # The DSN is on no command line (kine's and kcp's included) and in no log of the shard's pods.
    commands = scenario.processes(stack)
    assert any(b"kine" in arg for args in commands.values() for arg in args), commands
    assert not any(dsn.encode() in b" ".join(args) for args in commands.values())
    logs = stack.pod_logs("root-")
    assert "kine" in logs and dsn not in logs
