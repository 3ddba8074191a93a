"""`kcpshard-dev up` / `kcpshard-dev down`: the whole development environment in one process.

`--api real` (the default once `make tools` built kube-apiserver): the real control plane
(`controlplane.py`: etcd, kube-apiserver, kube-controller-manager) with this package's CRDs and the RBAC of
`deploy/` applied by the real kubectl, the operator's identity (a token of the ServiceAccount
`kcpshard-system/kcpshard-operator`, in `<dir>/operator/kubeconfig`) and the local workload runner as the
kubelet of one node, giving each pod the identity of its ServiceAccount.

`--api emulated`: the emulated API server (`apiserver/`), which has no RBAC: everyone is admin; the
runner also plays the Job and Deployment controllers.

Both: a separate etcd for the shards (3.6 from `make tools` when built), workload processes with
`hack/tools/bin` (etcdctl 3.6) and this interpreter's bin (`kcpshard`, the stand-in kcp) first on PATH;
`<dir>/env.json` with what clients need; runs until SIGTERM/SIGINT; stopping it stops every process it
started.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from kcpshard.api import crds
from kcpshard.k8s.api import ApiClient
from kcpshard_testkit import tools
from kcpshard_testkit.apiserver import EmulatedApiServer
from kcpshard_testkit.controlplane import ControlPlane
from kcpshard_testkit.etcd import EtcdServer
from kcpshard_testkit.identity import Token, ca_pem, keep_fresh, request_token, write_token_kubeconfig
from kcpshard_testkit.incluster import install_operator
from kcpshard_testkit.kubectl import kubectl
from kcpshard_testkit.node import NODE_NAME as REAL_NODE_NAME
from kcpshard_testkit.node import Node
from kcpshard_testkit.runner import WorkloadRunner
from kcpshard_testkit.waiting import wait_for

NODE_NAME = "local-node"
OPERATOR_NAMESPACE = "kcpshard-system"
OPERATOR_ACCOUNT = "kcpshard-operator"
DEPLOY = tools.REPO / "deploy"
ApiKind = Literal["real", "emulated"]
NodeKind = Literal["runner", "real"]
RUNNER_READY_TIMEOUT = 60.0


@dataclass(frozen=True)
class DevEnvInfo:
    kubeconfig: str  # admin
    operator_kubeconfig: str  # the operator's ServiceAccount (real); admin (emulated)
    api: str  # "real" or "emulated"
    api_url: str
    etcd_endpoint: str  # for the shards' store
    node: str
    sandbox: str
    pid: int
    start_seconds: float  # from `dev up` to ready

    @classmethod
    def load(cls, directory: Path) -> DevEnvInfo:
        return cls(**json.loads((directory / "env.json").read_text()))


def default_api() -> ApiKind:
    """`real` once kube-apiserver is built, else `emulated`."""
    return "real" if tools.has_tool("kube-apiserver") else "emulated"


def _tool_path() -> str:
    """PATH for workload processes: the built tools (etcdctl 3.6), then this interpreter's bin."""
    first = [str(tools.tools_bin()), str(Path(sys.executable).parent)]
    return os.pathsep.join([*first, os.environ.get("PATH", "/usr/bin:/bin")])


async def apply_manifests(kubeconfig: Path, crd_dir: Path) -> None:
    """The CRDs and `deploy/`'s RBAC, as a cluster admin applies them (README "In a cluster")."""
    await kubectl(
        kubeconfig,
        "apply",
        "-f",
        str(crd_dir),
        "-f",
        str(DEPLOY / "base" / "namespace.yaml"),
    )
    # deploy/base's kustomization puts these in kcpshard-system; -n does the same without the Deployment.
    await kubectl(
        kubeconfig,
        "apply",
        "-n",
        OPERATOR_NAMESPACE,
        "-f",
        str(DEPLOY / "base" / "rbac-operator.yaml"),
    )
    names = [f"crd/{path.stem}.kcpshard.dev" for path in sorted(crd_dir.glob("*.yaml"))]
    await kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", *names)


async def _wait_runner(runner: WorkloadRunner, task: asyncio.Task[None]) -> None:
    """Until the runner registered its node and listed its pods; a clear error when it died instead."""

    async def ready_or_dead() -> bool:
        return task.done() or runner.ready.is_set()

    await wait_for("the workload runner", ready_or_dead, RUNNER_READY_TIMEOUT)
    if task.done():
        error = "cancelled" if task.cancelled() else task.exception()
        raise RuntimeError(f"the workload runner stopped: {error}")


@contextlib.asynccontextmanager
async def dev_environment(
    directory: Path,
    *,
    api: ApiKind | None = None,
    extra_env: dict[str, str] | None = None,
    node: NodeKind = "runner",
    images: Sequence[Path] = (),
    operator_image: str | None = None,
) -> AsyncIterator[DevEnvInfo]:
    """Start everything; stop everything on exit, in reverse order.

    `node="real"`: containerd, the kubelet and the scheduler (`node.py`) instead of the workload runner,
    with `images` (docker-archive tars) imported into the node's containerd; with `operator_image`, the
    operator runs there as deploy/base's Deployment (`incluster.py`), its agents from the same image."""
    started = time.monotonic()
    kind = api or default_api()
    if node == "real" and kind != "real":
        raise ValueError("a real node needs the real control plane (--api real)")
    directory.mkdir(parents=True, exist_ok=True)
    crd_dir = directory / "crds"
    crds.write(crd_dir)
    async with contextlib.AsyncExitStack() as stack:
        etcd = EtcdServer(directory / "etcd")
        await etcd.start()
        stack.push_async_callback(etcd.stop)
        env = {"PATH": _tool_path(), **(extra_env or {})}
        token: Token | None = None
        runner: WorkloadRunner | None = None
        if kind == "real":
            plane = ControlPlane(directory / "controlplane", for_node=node == "real")
            stack.push_async_callback(plane.stop)

            async def install(plane: ControlPlane) -> None:
                await apply_manifests(plane.admin_kubeconfig, crd_dir)

            await plane.start(before_controllers=install)
            admin, url = plane.admin_kubeconfig, plane.url
            api_client = ApiClient.from_kubeconfig(admin)
            stack.push_async_callback(api_client.aclose)
            token = await request_token(api_client, OPERATOR_NAMESPACE, OPERATOR_ACCOUNT)
            operator = write_token_kubeconfig(
                directory / "operator", url, ca_pem(api_client.credentials), token, OPERATOR_NAMESPACE
            )
            if node == "real":
                assert plane.ca is not None
                real_node = Node(directory / "node", url=url, ca=plane.ca, ca_path=plane.ca_path)
                await real_node.start(api_client, tuple(images))
                stack.push_async_callback(real_node.stop)
                if operator_image is not None:
                    await install_operator(admin, directory / "operator-overlay", image=operator_image)
            else:
                runner = WorkloadRunner(
                    api_client, directory / "sandbox", node_name=NODE_NAME, extra_env=env, kubelet_only=True
                )
        else:
            server = EmulatedApiServer(directory / "apiserver", crd_paths=crd_dir)
            stack.push_async_callback(server.stop)
            await server.start()
            admin = operator = server.kubeconfig_path
            url = server.url
            api_client = ApiClient.from_kubeconfig(admin)
            stack.push_async_callback(api_client.aclose)
            env["KUBECONFIG"] = str(admin)
            runner = WorkloadRunner(api_client, directory / "sandbox", node_name=NODE_NAME, extra_env=env)
        if runner is not None:
            runner_task = asyncio.create_task(runner.run())
            stack.push_async_callback(_stop_runner, runner, runner_task)
            await _wait_runner(runner, runner_task)
        if token is not None:

            async def renew() -> Token:
                return await request_token(api_client, OPERATOR_NAMESPACE, OPERATOR_ACCOUNT)

            renewal = asyncio.create_task(keep_fresh(operator.parent, token, renew, "the operator's token"))
            stack.callback(renewal.cancel)
        info = DevEnvInfo(
            kubeconfig=str(admin),
            operator_kubeconfig=str(operator),
            api=kind,
            api_url=url,
            etcd_endpoint=etcd.endpoint,
            node=REAL_NODE_NAME if node == "real" else NODE_NAME,
            sandbox=str(directory / "sandbox"),
            pid=os.getpid(),
            start_seconds=round(time.monotonic() - started, 2),
        )
        # written aside, then renamed: a reader that waits for env.json never sees it half-written
        partial = directory / "env.json.part"
        partial.write_text(json.dumps(asdict(info), indent=2))
        partial.rename(directory / "env.json")
        stack.callback((directory / "env.json").unlink, missing_ok=True)
        yield info


async def _stop_runner(runner: WorkloadRunner, task: asyncio.Task[None]) -> None:
    await runner.stop()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


async def _serve(
    directory: Path,
    api: ApiKind | None,
    node: NodeKind = "runner",
    images: Sequence[Path] = (),
    operator_image: str | None = None,
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if api is None and default_api() == "emulated":
        print(
            f"kcpshard-dev up: {tools.tools_bin() / 'kube-apiserver'} is not built (`make tools`): "
            "using the emulated API server",
            flush=True,
        )
    async with dev_environment(
        directory, api=api, node=node, images=images, operator_image=operator_image
    ) as info:
        print(f"api:        {info.api} ({info.api_url}), up in {info.start_seconds:.1f} s", flush=True)
        print(f"kubeconfig: {info.kubeconfig}", flush=True)
        print(f"operator:   KUBECONFIG={info.operator_kubeconfig} kcpshard operator --standalone", flush=True)
        print(f"etcd:       {info.etcd_endpoint}", flush=True)
        print(
            f"try:        KUBECONFIG={info.kubeconfig} kubectl get nodes,kcpshards,jobs,pods -A", flush=True
        )
        print("ready; stop with Ctrl-C or `kcpshard-dev down`", flush=True)
        await stop.wait()
    print("stopped", flush=True)


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--dir", default=".dev", help="state folder of the environment (default: .dev)")
    return parser


def up(argv: Sequence[str]) -> int:
    parser = _parser("kcpshard-dev up")
    parser.add_argument(
        "--api",
        choices=["real", "emulated"],
        default=None,
        help="the real control plane (default when `make tools` built it) or the emulated API server",
    )
    parser.add_argument(
        "--node",
        choices=["runner", "real"],
        default="runner",
        help="the real kubelet with containerd, or the workload runner that plays it (default)",
    )
    parser.add_argument(
        "--image-tar", action="append", default=[], help="an image tar to import into the real node"
    )
    parser.add_argument(
        "--operator-image", default=None, help="run the operator on the real node from this imported image"
    )
    args = parser.parse_args(argv)
    directory = Path(args.dir).resolve()
    try:
        tars = [Path(p) for p in args.image_tar]
        asyncio.run(_serve(directory, args.api, args.node, tars, args.operator_image))
    except Exception as exc:  # a clear line, not a traceback, for a person at a terminal
        print(f"kcpshard-dev up: {exc}", file=sys.stderr)
        return 1
    return 0


def down(argv: Sequence[str]) -> int:
    directory = Path(_parser("kcpshard-dev down").parse_args(argv).dir).resolve()
    try:
        info = DevEnvInfo.load(directory)
    except FileNotFoundError:
        print(f"no development environment running in {directory}")
        return 0
    os.kill(info.pid, signal.SIGTERM)
    print(f"sent SIGTERM to the development environment (pid {info.pid})")
    return 0


def dev_command() -> list[str]:
    """How to run `kcpshard-dev` with this interpreter (tests and the bench start it as a process)."""
    return [sys.executable, "-m", "kcpshard_testkit.devenv"]


def main(argv: Sequence[str] | None = None) -> int:
    """`kcpshard-dev up|down [--dir DIR]`."""
    args = list(sys.argv[1:] if argv is None else argv)
    commands = {"up": up, "down": down}
    if not args or args[0] not in commands:
        print("usage: kcpshard-dev up|down [--dir DIR] (up: [--api real|emulated])", file=sys.stderr)
        return 2
    return commands[args[0]](args[1:])


if __name__ == "__main__":
    sys.exit(main())
