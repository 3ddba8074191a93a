"""`kcpshard dev up` / `dev down`: the whole development environment in one process.

It starts the emulated API server (with this package's CRDs), real etcd, and the
local workload runner playing the kubelet of one node, writes `<dir>/env.json` with
what clients need (kubeconfig path, etcd endpoint), and runs until SIGTERM/SIGINT.
Stopping it stops every process it started.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from pathlib import Path

from kcpshard.api import crds
from kcpshard.k8s.api import ApiClient
from kcpshard.testing.apiserver import EmulatedApiServer
from kcpshard.testing.etcd import EtcdServer
from kcpshard.testing.runner import WorkloadRunner

NODE_NAME = "local-node"


@dataclass(frozen=True)
class DevEnvInfo:
    kubeconfig: str
    api_url: str
    etcd_endpoint: str
    node: str
    sandbox: str
    pid: int

    @classmethod
    def load(cls, directory: Path) -> DevEnvInfo:
        return cls(**json.loads((directory / "env.json").read_text()))


def _tool_path() -> str:
    """PATH for workload processes: this interpreter's bin first, so `kcpshard` and the fake kcp resolve."""
    bin_dir = str(Path(sys.executable).parent)
    return os.pathsep.join([bin_dir, os.environ.get("PATH", "/usr/bin:/bin")])


@contextlib.asynccontextmanager
async def dev_environment(
    directory: Path, *, extra_env: dict[str, str] | None = None
) -> AsyncIterator[DevEnvInfo]:
    """Start everything; stop everything on exit, in reverse order."""
    directory.mkdir(parents=True, exist_ok=True)
    crd_dir = crds.write(directory / "crds")
    etcd = EtcdServer(directory / "etcd")
    await etcd.start()
    server = EmulatedApiServer(directory / "apiserver", crd_paths=crd_dir)
    runner_task: asyncio.Task[None] | None = None
    runner: WorkloadRunner | None = None
    api: ApiClient | None = None
    try:
        await server.start()
        api = ApiClient.from_kubeconfig(server.kubeconfig_path)
        env = {"KUBECONFIG": str(server.kubeconfig_path), "PATH": _tool_path(), **(extra_env or {})}
        runner = WorkloadRunner(api, directory / "sandbox", node_name=NODE_NAME, extra_env=env)
        runner_task = asyncio.create_task(runner.run())
        info = DevEnvInfo(
            kubeconfig=str(server.kubeconfig_path),
            api_url=server.url,
            etcd_endpoint=etcd.endpoint,
            node=NODE_NAME,
            sandbox=str(directory / "sandbox"),
            pid=os.getpid(),
        )
        (directory / "env.json").write_text(json.dumps(asdict(info), indent=2))
        yield info
    finally:
        (directory / "env.json").unlink(missing_ok=True)
        if runner is not None:
            await runner.stop()
        if runner_task is not None:
            runner_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await runner_task
        if api is not None:
            await api.aclose()
        await server.stop()
        await etcd.stop()


async def _serve(directory: Path) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with dev_environment(directory) as info:
        print(f"kubeconfig: {info.kubeconfig}", flush=True)
        print(f"etcd:       {info.etcd_endpoint}", flush=True)
        print(f"try:        KUBECONFIG={info.kubeconfig} kubectl get kcpshards,kcpslots -A", flush=True)
        print("ready; stop with Ctrl-C or `kcpshard dev down`", flush=True)
        await stop.wait()
    print("stopped", flush=True)


def _dir_arg(argv: list[str], prog: str) -> Path:
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--dir", default=".dev", help="state folder of the environment (default: .dev)")
    return Path(parser.parse_args(argv).dir).resolve()


def up(argv: list[str]) -> int:
    directory = _dir_arg(argv, "kcpshard dev up")
    try:
        asyncio.run(_serve(directory))
    except Exception as exc:  # a clear line, not a traceback, for a person at a terminal
        print(f"kcpshard dev up: {exc}", file=sys.stderr)
        return 1
    return 0


def down(argv: list[str]) -> int:
    directory = _dir_arg(argv, "kcpshard dev down")
    try:
        info = DevEnvInfo.load(directory)
    except FileNotFoundError:
        print(f"no development environment running in {directory}")
        return 0
    os.kill(info.pid, signal.SIGTERM)
    print(f"sent SIGTERM to the development environment (pid {info.pid})")
    return 0
