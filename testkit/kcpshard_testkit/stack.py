"""The whole local stack: the development environment (`kcpshard-dev up`) and the operator.

Used by the end-to-end tests, `make demo` and the benchmarks. The control plane and the node are real
(`devenv.py`); the operator runs on the node as deploy/base's Deployment, or as a process beside the
cluster (`start_operator`) talking HTTPS to the API server as its ServiceAccount; either way its pods
(slot and front agents, which start kcp and HAProxy) run in containers on the node.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kcpshard.k8s import names
from kcpshard.k8s.api import KCPSHARDS, SECRETS, ApiClient
from kcpshard.k8s.builders import STATE_ROOT
from kcpshard.kcp.kubeconfig import ShardAdmin, shard_admin
from kcpshard_testkit.devenv import DevEnvInfo, dev_command
from kcpshard_testkit.faultproxy import FaultProxy
from kcpshard_testkit.kubectl import kubectl_binary
from kcpshard_testkit.tls import namespaced_kubeconfig
from kcpshard_testkit.waiting import wait_for

ENV_TIMEOUT = 300.0  # the real control plane starts in about 10 s alone; a node imports its images


@dataclass(frozen=True)
class NodeImages:
    """What a real node runs: image tars to import, and the operator's (and agents') image among them."""

    tars: tuple[Path, ...]
    operator: str


def kcpshard_command() -> list[str]:
    return [sys.executable, "-m", "kcpshard.cli"]


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def stop(self, timeout: float = 20.0) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()
        return int(self.popen.returncode)


def start_process(name: str, argv: list[str], log: Path, env: dict[str, str] | None = None) -> Process:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        popen = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    return Process(name, popen, log)


@dataclass
class Stack:
    directory: Path
    info: DevEnvInfo
    api: ApiClient
    devenv: Process
    operator: Process | None = None
    agent_image: str | None = None  # the image of the pods an operator process makes
    namespace: str = "default"  # of the shards this stack's tests make (`in_namespace`)

    @property
    def workload_root(self) -> Path:
        """The namespace's folder of the node's state (the slots' hostPath)."""
        return Path(STATE_ROOT) / self.namespace

    def pod_logs(self, pod: str) -> str:
        """What the containers of the pods whose name contains `pod` have logged, as the node keeps it
        (while the pod exists)."""
        root = self.directory / "env" / "node" / "pod-logs"
        prefix = f"{self.namespace}_"
        return "\n".join(
            log.read_text(errors="replace")
            for log in sorted(root.rglob("*.log"))
            if pod in str(log.relative_to(root)) and str(log.relative_to(root)).startswith(prefix)
        )

    def in_namespace(self, namespace: str) -> Stack:
        """This stack for tests in `namespace`: its helpers, and kubectl through a kubeconfig whose
        context names it (the plugin too), default to it."""
        admin = Path(self.info.kubeconfig)
        path = namespaced_kubeconfig(admin, namespace, admin.with_name(f"kubeconfig-{namespace}"))
        info = dataclasses.replace(self.info, kubeconfig=str(path))
        return dataclasses.replace(self, info=info, namespace=namespace)

    def start_operator(
        self,
        *extra: str,
        kubeconfig: str | None = None,
        log: str = "operator.log",
        env: dict[str, str] | None = None,
    ) -> Process:
        """The operator as a subprocess (its own process group), as its ServiceAccount; `kubeconfig` e.g.
        through a FaultProxy; `env` e.g. POD_NAME, as the Deployment sets it. Its pods run the stack's
        agent image."""
        if self.agent_image is None:
            raise RuntimeError("this stack has no node: an operator here would make pods that never run")
        agents = ["--image", self.agent_image]
        self.operator = start_process(
            "operator",
            [*kcpshard_command(), "operator", "--standalone", "--all-namespaces", *agents, *extra],
            self.directory / log,
            env={"KUBECONFIG": kubeconfig or self.info.operator_kubeconfig, **(env or {})},
        )
        return self.operator

    def manifest(self, name: str, front_port: int, **spec: Any) -> dict[str, Any]:
        """A shard of this stack: its store, namespace and node."""
        spec.setdefault("node", self.info.node)
        return shard_manifest(
            name, etcd=self.info.etcd_endpoint, front_port=front_port, namespace=self.namespace, **spec
        )

    def fault_proxy(self, workdir: Path) -> FaultProxy:
        """A FaultProxy in front of the API server for the operator: it forwards the operator's own token
        and serves the API server's certificate (next to the admin kubeconfig in both kinds of stack)."""
        serving = Path(self.info.kubeconfig).parent
        return FaultProxy(
            Path(self.info.operator_kubeconfig),
            workdir,
            cert_path=serving / "apiserver.crt",
            key_path=serving / "apiserver.key",
        )

    async def shard(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        return await self.api.get(KCPSHARDS, namespace or self.namespace, name)

    async def shard_admin(self, name: str, namespace: str | None = None) -> ShardAdmin:
        secret = await self.api.get(SECRETS, namespace or self.namespace, names.shared_secret_name(name))
        return shard_admin(base64.b64decode(secret["data"]["admin.kubeconfig"]))

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """The real kubectl as the admin."""
        return subprocess.run(
            [kubectl_binary(), *args],
            env={**os.environ, "KUBECONFIG": self.info.kubeconfig},
            capture_output=True,
            text=True,
            check=check,
            timeout=60,
        )


def shard_manifest(
    name: str,
    *,
    etcd: str,
    front_port: int,
    version: str = "v0.32.1",
    namespace: str = "default",
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "KcpShard",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "kcp": {"version": version, "binary": "kcpshard-fake-kcp"},
            "node": "local-node",
            # A key prefix per shard: the operator refuses two shards on one etcd keyspace.
            "store": {"etcd": {"endpoints": [etcd], "prefix": f"/shards/{namespace}/{name}"}},
            "front": {"address": "127.0.0.1", "port": front_port},
            "shard": {"name": "root", "root": True},
            "shutdownDelaySeconds": 2,
            **spec,
        },
    }


@contextlib.asynccontextmanager
async def running_stack(
    directory: Path,
    *,
    operator: bool = True,
    node: NodeImages | None = None,
) -> AsyncIterator[Stack]:
    """The development environment as a subprocess; stopped on exit.

    With `node`, the pods run in containers on a real kubelet (`node.py`) from those images, and the
    operator (`operator=True`) as deploy/base's Deployment there. Without, the control plane alone (no
    operator: nothing would run its pods)."""
    if node is None and operator:
        raise ValueError("an operator needs a node: pass node= or operator=False")
    directory.mkdir(parents=True, exist_ok=True)
    env_dir = directory / "env"
    argv = [*dev_command(), "up", "--dir", str(env_dir)]
    if node is None:
        argv.append("--no-node")
    else:
        argv += [f"--image-tar={tar}" for tar in node.tars]
        if operator:
            argv.append(f"--operator-image={node.operator}")
    devenv = start_process("devenv", argv, directory / "devenv.log")
    client: ApiClient | None = None
    stack: Stack | None = None
    try:

        async def env_ready_or_exited() -> bool:
            return devenv.popen.poll() is not None or (env_dir / "env.json").exists()

        await wait_for("the development environment", env_ready_or_exited, timeout=ENV_TIMEOUT)
        if devenv.popen.poll() is not None:
            tail = "\n".join(devenv.log.read_text(errors="replace").splitlines()[-10:])
            raise RuntimeError(f"the development environment exited ({devenv.log}):\n{tail}")
        info = DevEnvInfo.load(env_dir)
        client = ApiClient.from_kubeconfig(info.kubeconfig)
        stack = Stack(
            directory,
            info,
            client,
            devenv,
            agent_image=node.operator if node is not None else None,
        )
        yield stack
    finally:
        if stack is not None and stack.operator is not None:
            stack.operator.stop()
        if client is not None:
            await client.aclose()
        devenv.stop(timeout=60)


def processes_under(sandbox: Path) -> Iterator[int]:
    """Pids of live processes whose command line mentions the sandbox (for leak checks)."""
    needle = str(sandbox).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline:
            yield int(entry.name)
