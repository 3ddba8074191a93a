"""The development environment as a user meets it: `kcpshard-dev up`, the real kubectl, a real
kopf operator, `kcpshard-dev down`. Every part is its own process, talking HTTP."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from kcpshard.k8s.api import KCPSHARDS, NotFound
from kcpshard_testkit.devenv import DevEnvInfo, dev_command
from kcpshard_testkit.kubectl import kubectl_binary
from kcpshard_testkit.stack import processes_under, running_stack, start_process
from kcpshard_testkit.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "kcpshard.yaml"

pytestmark = pytest.mark.timeout(120)


async def test_kubectl_applies_lists_and_refuses(tmp_path: Path) -> None:
    async with running_stack(tmp_path, operator=False) as stack:
        # the sharded example passes the API server's schema too (a server-side dry run)
        fleet = stack.kubectl(
            "apply", "--dry-run=server", "-f", str(EXAMPLE.with_name("fleet.yaml")), check=False
        )
        assert fleet.stdout.count("created (server dry run)") == 3, (fleet.stdout, fleet.stderr)

        applied = stack.kubectl("apply", "-f", str(EXAMPLE))
        assert "kcpshard.kcpshard.dev/root created" in applied.stdout

        table = stack.kubectl("get", "kshard").stdout.splitlines()
        assert table[0].split() == ["NAME", "READY", "ACTIVE", "REVISION", "STEP", "AGE"]
        assert table[1].split()[0] == "root"
        wide = stack.kubectl("get", "kcpshards.kcpshard.dev", "-o", "wide").stdout.splitlines()[0].split()
        assert wide[-2:] == ["AGE", "MESSAGE"] and "VERSION" in wide

        # defaults from the schema were applied by the server
        shard = await stack.api.get(KCPSHARDS, "default", "root")
        assert shard["spec"]["shape"] == "BlueGreen"
        assert shard["spec"]["roll"]["readyTimeoutSeconds"] == 300

        bad = tmp_path / "bad.yaml"
        bad.write_text(
            EXAMPLE.read_text().replace("name: root\n  namespace", "name: bad\n  namespace")
            + "  shape: Purple\n"
        )
        refused = stack.kubectl("apply", "-f", str(bad), check=False)
        assert refused.returncode != 0
        assert (
            'spec.shape: Unsupported value: "Purple": supported values: "BlueGreen", "Single"'
            in refused.stderr
        )
        with pytest.raises(NotFound):
            await stack.api.get(KCPSHARDS, "default", "bad")

        port = tmp_path / "port.yaml"
        port.write_text(
            EXAMPLE.read_text()
            .replace("port: 6443", "port: 70000")
            .replace("name: root\n  namespace", "name: port\n  namespace")
        )
        refused = stack.kubectl("apply", "-f", str(port), check=False)
        assert "spec.front.port: Invalid value: 70000" in refused.stderr


async def test_a_kopf_operator_sees_kcpshards_come_change_and_go(tmp_path: Path) -> None:
    async with running_stack(tmp_path, operator=False) as stack:
        kopf = start_process(
            "kopf",
            [
                sys.executable,
                "-m",
                "kopf",
                "run",
                "--standalone",
                "--all-namespaces",
                str(Path(__file__).parent / "kopf_kcpshard_probe.py"),
            ],
            tmp_path / "kopf.log",
            env={"KUBECONFIG": stack.info.kubeconfig},
        )
        try:
            stack.kubectl("apply", "-f", str(EXAMPLE))

            async def status_says(text: str) -> bool:
                shard = await stack.api.get(KCPSHARDS, "default", "root")
                return (shard.get("status") or {}).get("activeRevision") == text

            await wait_for("kopf's status patch on create", lambda: status_says("create:v0.32.1"), timeout=30)
            stack.kubectl(
                "patch", "kshard", "root", "--type", "merge", "-p", '{"spec":{"kcp":{"version":"v0.32.2"}}}'
            )
            await wait_for("kopf's status patch on update", lambda: status_says("update:v0.32.2"), timeout=30)
            shard = await stack.api.get(KCPSHARDS, "default", "root")
            assert shard["status"]["observedGeneration"] == shard["metadata"]["generation"] == 2

            stack.kubectl("delete", "kshard", "root", "--wait=true")

            async def deleted() -> bool:
                return "probe: deleted root" in (tmp_path / "kopf.log").read_text()

            await wait_for("kopf's delete handler", deleted, timeout=30)
            with pytest.raises(NotFound):
                await stack.api.get(KCPSHARDS, "default", "root")
        finally:
            assert kopf.stop() == 0


async def test_dev_up_and_down_without_a_node(tmp_path: Path) -> None:
    """`--no-node`: the control plane alone (with a node: tests/node/test_real_node.py)."""
    env_dir = tmp_path / "env"
    up = start_process(
        "devenv", [*dev_command(), "up", "--dir", str(env_dir), "--no-node"], tmp_path / "up.log"
    )
    try:
        await wait_for("env.json", lambda: asyncio.sleep(0, (env_dir / "env.json").exists()), timeout=120)
        info = DevEnvInfo.load(env_dir)
        print(f"control plane up in {info.start_seconds:.1f} s")
        assert info.node == ""
        for secret in (info.kubeconfig, info.operator_kubeconfig):
            assert Path(secret).stat().st_mode & 0o777 == 0o600
        namespaces = _kubectl(info.kubeconfig, "get", "ns", "-o", "name")
        assert "namespace/default" in namespaces.stdout
        assert _kubectl(info.kubeconfig, "get", "nodes", "-o", "name").stdout == ""
        who = _kubectl(
            info.operator_kubeconfig, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"
        )
        assert who.stdout == "system:serviceaccount:kcpshard-system:kcpshard-operator"
        # the operator is bound by deploy/'s RBAC, not an admin
        assert _kubectl(info.operator_kubeconfig, "auth", "can-i", "create", "jobs", "-n", "default").ok
        assert not _kubectl(info.operator_kubeconfig, "auth", "can-i", "create", "namespaces").ok
        down = subprocess.run(
            [*dev_command(), "down", "--dir", str(env_dir)],
            capture_output=True,
            text=True,
            check=True,
        )
        assert "SIGTERM" in down.stdout
        assert up.popen.wait(60) == 0
        assert "kubeconfig:" in up.log.read_text()
        assert not (env_dir / "env.json").exists()
    finally:
        up.stop()
    assert list(processes_under(env_dir)) == []


async def test_dev_up_killed_leaves_no_process(tmp_path: Path) -> None:
    """SIGKILL gives `dev up` no chance to stop anything: its processes die with it all the same."""
    env_dir = tmp_path / "env"
    up = start_process(
        "devenv",
        [*dev_command(), "up", "--dir", str(env_dir), "--no-node"],
        tmp_path / "up.log",
    )
    try:
        await wait_for("env.json", lambda: asyncio.sleep(0, (env_dir / "env.json").exists()), timeout=120)
        started = list(processes_under(env_dir))
        assert len(started) >= 4  # etcd for shards, etcd, kube-apiserver, kube-controller-manager
        up.popen.kill()
        up.popen.wait(10)

        async def all_gone() -> bool:
            return not list(processes_under(env_dir))

        await wait_for("every process of the environment to die with it", all_gone, timeout=30)
    finally:
        up.stop()


@dataclass
class Kubectl:
    ok: bool
    stdout: str
    stderr: str


def _kubectl(kubeconfig: str, *args: str) -> Kubectl:
    done = subprocess.run(
        [kubectl_binary(), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "KUBECONFIG": kubeconfig},
        timeout=60,
    )
    return Kubectl(done.returncode == 0, done.stdout, done.stderr)
