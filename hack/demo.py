"""`make demo`: a full blue/green roll of a kcp shard on this machine, shown step by step.

Starts a cluster on this machine (the real control plane and a real node: containerd, the kubelet, the
scheduler), the operator in it as deploy/base's Deployment from the image the Dockerfile builds, applies
examples/kcpshard.yaml with the real kubectl, waits until the shard serves through the front, changes its
spec, shows the roll as it advances, prints the roll report, and shuts everything down.
`REAL=1` (`make demo REAL=1`) rolls real kcp from v0.30.0 to v0.31.2, its binaries put where the README
tells users to (/var/lib/kcpshard/bin/kcp-<version>, the slots' hostPath). Otherwise the stand-in kcp
(from the test image) rolls v0.32.1 -> v0.32.2. `FLEET=1` upgrades a sharded kcp on real binaries instead
(hack/demo_fleet.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml

from kcpshard.api import conditions as cond
from kcpshard.api.conditions import SLOT_STEPS
from kcpshard.k8s.api import KCPSHARDS, KCPSLOTS
from kcpshard_testkit.image import build_image
from kcpshard_testkit.load import KubeStyleLoad
from kcpshard_testkit.realkcp import NEWER, OLDER, on_the_node, real_kcp
from kcpshard_testkit.stack import NodeImages, Stack, running_stack
from kcpshard_testkit.tcp import free_port
from kcpshard_testkit.waiting import wait_for

REPO = Path(__file__).resolve().parents[1]
NAME = "root"


def say(text: str) -> None:
    print(f"\n=== {text}", flush=True)


def show(stack: Stack, *args: str) -> None:
    print(f"$ kubectl {' '.join(args)}", flush=True)
    result = stack.kubectl(*args, check=False)
    print((result.stdout + result.stderr).rstrip(), flush=True)


REAL = os.environ.get("REAL") == "1"
# (kcp spec of the first slot, kcp spec rolled to, how long a step may take)
if REAL:
    try:
        FROM, TO = (real_kcp(OLDER), real_kcp(NEWER))
    except FileNotFoundError as exc:
        sys.exit(f"demo: {exc}")
    KCP_FROM = {"version": FROM.version, "binary": on_the_node(FROM)}
    KCP_TO = {"version": TO.version, "binary": on_the_node(TO)}
    TIMEOUT = 600.0
else:
    KCP_FROM, KCP_TO, TIMEOUT = {"version": "v0.32.1"}, {"version": "v0.32.2"}, 180.0


def manifest(stack: Stack, front_port: int, test_image: str) -> str:
    doc = yaml.safe_load((REPO / "examples" / "kcpshard.yaml").read_text())
    doc["spec"]["store"]["etcd"]["endpoints"] = [stack.info.etcd_endpoint]
    doc["spec"]["front"]["port"] = front_port
    doc["spec"]["node"] = stack.info.node
    doc["spec"]["kcp"].update(KCP_FROM)
    if not REAL:  # the stand-in kcp is in the test image, not on the node
        doc["spec"]["kcp"]["image"] = test_image
    return yaml.safe_dump(doc)


def _state(shard: dict[str, Any], slots: list[dict[str, Any]]) -> str:
    status = shard.get("status") or {}
    step = (status.get("rollout") or {}).get("step", "-")
    parts = [f"step={step:<16} active={status.get('activeSlot')}"]
    for slot in sorted(slots, key=lambda s: s["spec"]["slot"]):
        conditions = (slot.get("status") or {}).get("conditions")
        done = [t for t in SLOT_STEPS if cond.is_true(conditions, t)]
        parts.append(f"slot {slot['spec']['slot']}: {','.join(done) or '-'}")
    return " | ".join(parts)


async def follow(stack: Stack, until: str, timeout: float) -> dict[str, Any]:
    """Print each change of the roll's step and the slots' conditions until `until` holds."""
    start = time.monotonic()
    last, last_step = "", ""
    while time.monotonic() - start < timeout:
        shard = await stack.api.get(KCPSHARDS, "default", NAME)
        slots = (await stack.api.list(KCPSLOTS, "default"))["items"]
        state = _state(shard, slots)
        if state != last:
            print(f"  +{time.monotonic() - start:5.1f}s  {state}", flush=True)
            last = state
        status = shard.get("status") or {}
        step = (status.get("rollout") or {}).get("step", "")
        if step != last_step and step:
            # What a person sees with kubectl at each step (in a thread: the client keeps sending).
            args = ("get", "kcpshards,kcpslots", "--no-headers")
            table = await asyncio.to_thread(stack.kubectl, *args, check=False)
            for line in table.stdout.splitlines():
                print(f"           | {line}", flush=True)
            last_step = step
        if not status.get("rollout") and (status.get("lastRoll") or {}).get("toSlot") == until:
            return shard
        await asyncio.sleep(0.2)
    raise TimeoutError(f"the roll to slot {until} did not finish in {timeout:.0f}s")


def print_report(shard: dict[str, Any]) -> None:
    report = shard["status"]["lastRoll"]
    print(
        f"result: {report['result']}  {report.get('fromSlot')} -> {report['toSlot']}  "
        f"({report.get('fromRevision')} -> {report['toRevision']})"
    )
    for key, value in report.get("durations", {}).items():
        print(f"  {key:<16} {value:8.3f} s")


async def demo(workdir: Path) -> None:
    say("the images from the Dockerfile (hack/image.sh; cached by a key of what goes in)")
    started = time.monotonic()
    product, test = build_image("product"), build_image("test")
    print(f"{product.name} and {test.name} in {time.monotonic() - started:.1f} s", flush=True)
    say(
        "starting the cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd, "
        "the kubelet, and the operator as deploy/base's Deployment"
    )
    node = NodeImages(tars=(product.tar, test.tar), operator=product.name)
    async with running_stack(workdir, node=node) as stack:
        print(f"KUBECONFIG={stack.info.kubeconfig}  (up in {stack.info.start_seconds:.1f} s)")
        show(stack, "get", "nodes", "-o", "wide")
        front_port = free_port()
        path = workdir / "kcpshard.yaml"
        path.write_text(manifest(stack, front_port, test.name))

        say("kubectl apply -f examples/kcpshard.yaml (etcd endpoint and front port filled in)")
        show(stack, "apply", "-f", str(path))
        await follow(stack, "a", timeout=TIMEOUT)
        show(stack, "get", "kcpshards,kcpslots")
        show(stack, "get", "pods", "-A", "-o", "wide")

        admin = await stack.shard_admin(NAME)
        load = KubeStyleLoad(f"https://127.0.0.1:{front_port}", admin.token, admin.ca_pem)
        await load.start()
        await wait_for("traffic through the front", lambda: _served(load), timeout=30)
        say(
            f"the shard serves through the front at https://127.0.0.1:{front_port}; a client now sends "
            "requests without pause"
        )

        say(f"changing the spec (kcp {KCP_FROM['version']} -> {KCP_TO['version']}): a blue/green roll starts")
        show(
            stack,
            "patch",
            "kshard",
            NAME,
            "--type",
            "merge",
            "-p",
            json.dumps({"spec": {"kcp": KCP_TO}}),
        )
        shard = await follow(stack, "b", timeout=TIMEOUT)
        report = await load.stop()

        say("after the roll")
        show(stack, "get", "kcpshards,kcpslots", "-o", "wide")
        show(
            stack,
            "get",
            "kcpslot",
            f"{NAME}-b",
            "-o",
            'jsonpath={range .status.conditions[*]}{.type}={.status} ({.reason}) {.message}{"\\n"}{end}',
        )
        say("roll report (status.lastRoll)")
        print_report(shard)
        say(f"client through the front during the roll: {report.summary()}")
        if report.failed:
            raise SystemExit(f"client requests failed: {report.failures}")
    say("stopped everything")


async def _served(load: KubeStyleLoad) -> bool:
    return load.report.ok >= 5


def run(demo_of: Callable[[Path], Awaitable[None]], prefix: str) -> int:
    """Run a demo in a fresh folder (or DEMO_DIR); a failure is one line and exit code 1."""
    workdir = Path(os.environ.get("DEMO_DIR") or tempfile.mkdtemp(prefix=prefix))
    try:
        asyncio.run(demo_of(workdir))
    except (TimeoutError, RuntimeError, FileNotFoundError) as exc:
        print(f"demo failed: {exc}; logs in {workdir}", file=sys.stderr)
        return 1
    print(f"logs: {workdir}")
    return 0


def main() -> int:
    if os.environ.get("FLEET") == "1":  # `make demo FLEET=1`: a sharded kcp upgraded from one apply
        import demo_fleet

        return run(demo_fleet.demo, "kcpshard-demo-fleet-")
    return run(demo, "kcpshard-demo-")


if __name__ == "__main__":
    sys.exit(main())
