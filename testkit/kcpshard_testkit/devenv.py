"""`kcpshard-dev up` / `kcpshard-dev down`: the whole development environment in one process.

The real control plane (`controlplane.py`: etcd, kube-apiserver, kube-controller-manager) with this
package's CRDs and the RBAC of `deploy/` applied by the real kubectl, the operator's identity (a token of
the ServiceAccount `kcpshard-system/kcpshard-operator`, in `<dir>/operator/kubeconfig`), a separate etcd
for the shards (3.6 from `make tools`), and a real node (`node.py`: containerd, the kubelet, the
scheduler) with the product and test images of `make image test-image` imported (`--image-tar` names
others; with `--operator-image` the operator runs there as deploy/base's Deployment). `--no-node`: the
control plane alone, for tests that only talk to the API. `<dir>/env.json` holds what clients need; it
runs until SIGTERM/SIGINT; stopping it stops every process it started.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from kcpshard.api import crds
from kcpshard.k8s.api import ApiClient
from kcpshard_testkit import tools
from kcpshard_testkit.controlplane import ControlPlane
from kcpshard_testkit.etcd import EtcdServer
from kcpshard_testkit.identity import Token, ca_pem, keep_fresh, request_token, write_token_kubeconfig
from kcpshard_testkit.image import build_image
from kcpshard_testkit.incluster import OPERATOR_NAMESPACE, install_operator
from kcpshard_testkit.kubectl import kubectl
from kcpshard_testkit.node import NODE_NAME, Node

OPERATOR_ACCOUNT = "kcpshard-operator"
DEPLOY = tools.REPO / "deploy"


@dataclass(frozen=True)
class DevEnvInfo:
    kubeconfig: str  # admin
    operator_kubeconfig: str  # the operator's ServiceAccount
    api_url: str
    etcd_endpoint: str  # for the shards' store
    node: str  # the node's name; "" with --no-node
    pid: int
    start_seconds: float  # from `dev up` to ready

    @classmethod
    def load(cls, directory: Path) -> DevEnvInfo:
        return cls(**json.loads((directory / "env.json").read_text()))


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


@contextlib.asynccontextmanager
async def dev_environment(
    directory: Path,
    *,
    node: bool = True,
    images: Sequence[Path] = (),
    operator_image: str | None = None,
) -> AsyncIterator[DevEnvInfo]:
    """Start everything; stop everything on exit, in reverse order.

    `node`: containerd, the kubelet and the scheduler (`node.py`) with `images` (docker-archive tars)
    imported into the node's containerd; with `operator_image`, the operator runs there as deploy/base's
    Deployment (`incluster.py`), its agents from the same image."""
    started = time.monotonic()
    if operator_image is not None and not node:
        raise ValueError("--operator-image runs the operator on the node: leave out --no-node")
    directory.mkdir(parents=True, exist_ok=True)
    crd_dir = directory / "crds"
    crds.write(crd_dir)
    async with contextlib.AsyncExitStack() as stack:
        etcd = EtcdServer(directory / "etcd")
        await etcd.start()
        stack.push_async_callback(etcd.stop)
        plane = ControlPlane(directory / "controlplane", for_node=node)
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
        if node:
            assert plane.ca is not None
            real_node = Node(directory / "node", url=url, ca=plane.ca, ca_path=plane.ca_path)
            await real_node.start(api_client, tuple(images))
            stack.push_async_callback(real_node.stop)
            if operator_image is not None:
                await install_operator(admin, directory / "operator-overlay", image=operator_image)

        async def renew() -> Token:
            return await request_token(api_client, OPERATOR_NAMESPACE, OPERATOR_ACCOUNT)

        renewal = asyncio.create_task(keep_fresh(operator.parent, token, renew, "the operator's token"))
        stack.callback(renewal.cancel)
        info = DevEnvInfo(
            kubeconfig=str(admin),
            operator_kubeconfig=str(operator),
            api_url=url,
            etcd_endpoint=etcd.endpoint,
            node=NODE_NAME if node else "",
            pid=os.getpid(),
            start_seconds=round(time.monotonic() - started, 2),
        )
        # written aside, then renamed: a reader that waits for env.json never sees it half-written
        partial = directory / "env.json.part"
        partial.write_text(json.dumps(asdict(info), indent=2))
        partial.rename(directory / "env.json")
        stack.callback((directory / "env.json").unlink, missing_ok=True)
        yield info


async def _serve(
    directory: Path, node: bool, images: Sequence[Path] = (), operator_image: str | None = None
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with dev_environment(directory, node=node, images=images, operator_image=operator_image) as info:
        print(f"api:        {info.api_url}, up in {info.start_seconds:.1f} s", flush=True)
        print(f"kubeconfig: {info.kubeconfig}", flush=True)
        print(f"operator:   KUBECONFIG={info.operator_kubeconfig} kcpshard operator --standalone", flush=True)
        print(f"etcd:       {info.etcd_endpoint}", flush=True)
        print(
            f"try:        KUBECONFIG={info.kubeconfig} kubectl get nodes,kcpshards,jobs,pods -A", flush=True
        )
        print("ready; stop with Ctrl-C or `kcpshard-dev down`", flush=True)
        await stop.wait()
    print("stopped", flush=True)


def _default_images() -> tuple[list[Path], str]:
    """The product and test images (`make image test-image`; built first when not cached) and the
    product image's name, which the operator runs."""
    print("kcpshard-dev up: the product and test images (hack/image.sh, cached)", flush=True)
    product, test = build_image("product"), build_image("test")
    print(f"images:     {product.name} (the operator's), {test.name} (+ the stand-in kcp)", flush=True)
    return [product.tar, test.tar], product.name


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--dir", default=".dev", help="state folder of the environment (default: .dev)")
    return parser


def up(argv: Sequence[str]) -> int:
    parser = _parser("kcpshard-dev up")
    parser.add_argument(
        "--no-node", action="store_true", help="the control plane alone: no containerd, kubelet or scheduler"
    )
    parser.add_argument(
        "--image-tar",
        action="append",
        default=[],
        help="an image tar to import into the node (default: the product and test images, and the "
        "operator from the product image)",
    )
    parser.add_argument(
        "--operator-image", default=None, help="run the operator on the real node from this imported image"
    )
    args = parser.parse_args(argv)
    directory = Path(args.dir).resolve()
    try:
        node, tars, operator_image = not args.no_node, [Path(p) for p in args.image_tar], args.operator_image
        if node and not tars:  # a person's `make dev`: the project's images, the operator in the cluster
            tars, product = _default_images()
            operator_image = operator_image or product
        asyncio.run(_serve(directory, node, tars, operator_image))
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


@contextlib.contextmanager
def control_plane_process(directory: Path, timeout: float = 120.0) -> Iterator[DevEnvInfo]:
    """`kcpshard-dev up --no-node` as a process, for tests that only talk to the API (synchronous: a
    session-wide pytest fixture has no event loop); stopped on exit, its log in `directory/devenv.log`."""
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "devenv.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*dev_command(), "up", "--no-node", "--dir", str(directory / "env")],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout
        while not (directory / "env" / "env.json").exists():
            if process.poll() is not None or time.monotonic() > deadline:
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-10:])
                raise RuntimeError(f"the control plane did not start ({log}):\n{tail}")
            time.sleep(0.1)  # polling the file the process writes once it is ready
        yield DevEnvInfo.load(directory / "env")
    finally:
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def main(argv: Sequence[str] | None = None) -> int:
    """`kcpshard-dev up|down [--dir DIR]`."""
    args = list(sys.argv[1:] if argv is None else argv)
    commands = {"up": up, "down": down}
    if not args or args[0] not in commands:
        print(
            "usage: kcpshard-dev up|down [--dir DIR] "
            "(up: [--no-node] [--image-tar TAR] [--operator-image IMAGE])",
            file=sys.stderr,
        )
        return 2
    return commands[args[0]](args[1:])


if __name__ == "__main__":
    sys.exit(main())
