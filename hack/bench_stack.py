"""The benchmarks' cluster: the real control plane and a real node (containerd and the kubelet) whose pods
run the product image, the operator as a process beside it (so its CPU and memory are read by pid, and
stopStart can pause it), and a namespace of the bench's own: its shards' folders on the node
(`/var/lib/kcpshard/<namespace>`) stay apart from those of other clusters on this machine.

Real kcp goes where the README tells users to put it (`on_the_node`); the stand-in kcp lives in the test
image, so a shard on it names that image (`spec.kcp.image`) and a wrapper in the node's binary folder.
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from kcpshard.k8s.builders import STATE_ROOT
from kcpshard_testkit import scenario
from kcpshard_testkit.controlplane import AUDIT_LOG
from kcpshard_testkit.image import ImageRef, build_image
from kcpshard_testkit.kcpbin import NODE_BIN, make_kcp
from kcpshard_testkit.namespaces import open_namespace
from kcpshard_testkit.realkcp import RealKcp, on_the_node
from kcpshard_testkit.stack import NodeImages, Stack, running_stack

STAND_IN_VERSION = "v0.32.1"
FAST_KCP = scenario.FAST["rsa_bits"]  # the stand-in kcp's quick key, as scenario.serving_shard makes it


@functools.cache
def images() -> tuple[ImageRef, ImageRef]:
    """The product and the test image (built once; cached by hack/image.sh across runs)."""
    return build_image("product"), build_image("test")


def _bin_dir(namespace: str) -> Path:
    return NODE_BIN / "bench" / namespace


def stand_in_kcp(stack: Stack, name: str = "kcp-1") -> dict[str, str]:
    """`spec.kcp` for the stand-in: a wrapper `name` in the node's binary folder, run by the test image."""
    binary = make_kcp(_bin_dir(stack.namespace), name, rsa_bits=FAST_KCP)
    return {"version": STAND_IN_VERSION, "binary": binary, "image": images()[1].name}


def real_kcp_spec(kcp: RealKcp) -> dict[str, str]:
    """`spec.kcp` for real kcp: its binary on the node (`/var/lib/kcpshard/bin/kcp-<version>`)."""
    return {"version": kcp.version, "binary": on_the_node(kcp)}


@contextlib.asynccontextmanager
async def bench_stack(workdir: Path, operator_env: dict[str, str] | None = None) -> AsyncIterator[Stack]:
    """A cluster with a real node, the operator as a process (`operator_env` e.g. another PYTHONPATH), in a
    fresh namespace; its folders on the node are removed once the node has stopped its containers."""
    product, test = images()
    node = NodeImages(tars=(product.tar, test.tar), operator=product.name)
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        async with running_stack(workdir, operator=False, node=node) as cluster:
            stack = await open_namespace(cluster, namespace)
            stack.start_operator(env=operator_env)
            try:
                yield stack
            finally:
                # in_namespace made a copy: the cluster's teardown does not see this operator
                if stack.operator is not None:
                    stack.operator.stop()
    finally:
        shutil.rmtree(Path(STATE_ROOT) / namespace, ignore_errors=True)
        shutil.rmtree(_bin_dir(namespace), ignore_errors=True)


def find_audit(workdir: Path) -> Path:
    """kube-apiserver's audit log under the stack's folder (the control plane's folder first: a node's
    containerd root holds tens of thousands of files)."""
    found = next(workdir.glob(f"env/*/{AUDIT_LOG}"), None) or next(workdir.rglob(AUDIT_LOG), None)
    if found is None:
        raise SystemExit(f"no {AUDIT_LOG} under {workdir}: the control plane did not write one")
    return found
