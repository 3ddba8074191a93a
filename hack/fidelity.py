"""`make fidelity`: the stand-in kcp measured against real kcp, side by side.

Runs the same measurements on each kcp (the stand-in `kcpshard-fake-kcp`, and every real kcp built in
hack/tools/bin) against its own etcd 3.6, and prints one table:
start to ready (fresh root, and again on the seeded root as a later slot starts), SIGTERM to exit with a
2 s shutdown delay, what `/readyz` and a normal request answer during the shutdown (and whether a 429
with Retry-After is seen), lease pick-up after the controller lease is deleted, workspace Ready time, the
files in the root folder, the admin kubeconfig's contexts and users, and RSS when ready.
Figures, not assertions. RUNS (default 3) repeats the timed parts; the table shows the median.
"""

from __future__ import annotations

import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from kcpshard.kcp.client import OWNER_ANNOTATION, PROBE_OWNER
from kcpshard_testkit.etcd import EtcdServer
from kcpshard_testkit.fakekcp import binary_path
from kcpshard_testkit.fakekcp.process import KcpProcess
from kcpshard_testkit.tcp import free_port

TOOLS = Path(__file__).resolve().parent / "tools" / "bin"
LEASE = "/clusters/system:admin/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kcp-controllers"
WORKSPACES = "/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces"
SHUTDOWN_DELAY = 2


@dataclass
class Figures:
    name: str
    start_fresh: list[float] = field(default_factory=list)
    start_seeded: list[float] = field(default_factory=list)
    sigterm_exit: list[float] = field(default_factory=list)
    lease_pickup: list[float] = field(default_factory=list)
    workspace_ready: list[float] = field(default_factory=list)
    rss_mib: list[float] = field(default_factory=list)
    shutdown_answers: str = ""
    root_files: str = ""
    contexts: str = ""
    users: str = ""
    identity: str = ""
    error: str = ""


def _poll(what: str, probe: Callable[[], Any], timeout: float, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _start(binary: str, root: Path, etcd: str, prefix: str, log: Path) -> tuple[KcpProcess, float]:
    os.environ["KCP_BINARY"] = binary
    # A fixed port here (a slot binds a free one): kcp schedules workspaces to its shard's base URL,
    # which must reach it; the operator points that URL at the front instead.
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    args = [
        f"--secure-port={port}",
        "--bind-address=127.0.0.1",
        f"--shard-base-url={url}",
        f"--shard-external-url={url}",
        f"--shard-virtual-workspace-url={url}",
        f"--etcd-servers={etcd}",
        f"--etcd-prefix={prefix}",
        "--enable-leader-election",
        f"--shutdown-delay-duration={SHUTDOWN_DELAY}s",
        "--shutdown-send-retry-after=false",  # as the operator passes it
    ]
    begin = time.monotonic()
    kcp = KcpProcess(root, args, log_path=log).start()
    kcp.wait_ready(timeout=180)
    return kcp, time.monotonic() - begin


def _shutdown(kcp: KcpProcess) -> tuple[float, str]:
    """SIGTERM, then sample /readyz and an authenticated GET until the process exits."""
    url, token = kcp.url, kcp.token()
    seen: list[str] = []
    with httpx.Client(verify=False, timeout=1.0) as client:
        begin = time.monotonic()
        kcp.signal(signal.SIGTERM)
        while kcp.exit_code() is None and time.monotonic() - begin < 60:
            try:
                ready = client.get(f"{url}/readyz").status_code
                resp = client.get(
                    f"{url}/clusters/root/api/v1/namespaces", headers={"Authorization": f"Bearer {token}"}
                )
                answer = f"readyz {ready}, GET {resp.status_code}"
                if resp.status_code == 429:
                    answer += f" Retry-After={resp.headers.get('retry-after')}"
            except httpx.HTTPError as exc:
                answer = type(exc).__name__
            if not seen or seen[-1] != answer:
                seen.append(answer)
            time.sleep(0.05)
        kcp.wait_exit(timeout=60)
        return time.monotonic() - begin, " -> ".join(seen)


def _lease_pickup(kcp: KcpProcess) -> tuple[float, str]:
    with kcp.client() as c:
        first = _poll("a lease holder", lambda: c.get(LEASE).status_code == 200 and c.get(LEASE).json(), 90)
        holder = first["spec"]["holderIdentity"]
        begin = time.monotonic()
        c.delete(LEASE)

        def new_holder() -> str | None:
            resp = c.get(LEASE)
            return resp.json()["spec"].get("holderIdentity") if resp.status_code == 200 else None

        _poll("the lease taken again", new_holder, 90)
        return time.monotonic() - begin, str(holder)


def _workspace_ready(kcp: KcpProcess, name: str) -> float:
    meta = {"name": name, "annotations": {OWNER_ANNOTATION: PROBE_OWNER}}  # as the operator's probe
    body = {"apiVersion": "tenancy.kcp.io/v1alpha1", "kind": "Workspace", "metadata": meta}
    with kcp.client(timeout=10) as c:
        begin = time.monotonic()
        resp = c.post(WORKSPACES, json=body)
        resp.raise_for_status()

        def ready() -> bool:
            ws = c.get(f"{WORKSPACES}/{name}")
            return ws.status_code == 200 and (ws.json().get("status") or {}).get("phase") == "Ready"

        _poll(f"workspace {name} Ready", ready, 120)
        took = time.monotonic() - begin
        c.delete(f"{WORKSPACES}/{name}")
        return took


def measure(name: str, binary: str, work: Path, etcd: str, runs: int) -> Figures:
    fig = Figures(name)
    try:
        for run in range(runs):
            root = work / f"{name}-{run}"
            root.mkdir(parents=True)
            prefix = f"/fidelity/{name}-{run}"
            kcp, took = _start(binary, root, etcd, prefix, work / f"{name}-{run}-1.log")
            try:
                fig.start_fresh.append(took)
                fig.rss_mib.append(_rss_mib(kcp.pid))
                if run == 0:
                    fig.root_files = " ".join(sorted(p.name for p in root.iterdir()))
                    doc = yaml.safe_load((root / "admin.kubeconfig").read_text())
                    fig.contexts = " ".join(sorted(c["name"] for c in doc["contexts"]))
                    fig.users = " ".join(sorted(u["name"] for u in doc["users"]))
                pickup, holder = _lease_pickup(kcp)
                fig.lease_pickup.append(pickup)
                fig.identity = holder
                fig.workspace_ready.append(_workspace_ready(kcp, f"fidelity-{run}"))
                exit_took, answers = _shutdown(kcp)
                fig.sigterm_exit.append(exit_took)
                fig.shutdown_answers = answers
            finally:
                kcp.stop()
            # A later slot: the same root material, the same store.
            kcp, took = _start(binary, root, etcd, prefix, work / f"{name}-{run}-2.log")
            fig.start_seeded.append(took)
            kcp.stop()
    except Exception as exc:  # a kcp that cannot be measured is reported, not hidden
        fig.error = f"{type(exc).__name__}: {exc}"
    return fig


def _med(values: list[float]) -> str:
    if not values:
        return "n/a"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def table(figs: list[Figures]) -> str:
    rows: list[tuple[str, Callable[[Figures], str]]] = [
        ("start to ready, fresh root (s)", lambda f: _med(f.start_fresh)),
        ("start to ready, seeded root (s)", lambda f: _med(f.start_seeded)),
        (f"SIGTERM to exit, {SHUTDOWN_DELAY}s delay (s)", lambda f: _med(f.sigterm_exit)),
        ("answers during shutdown", lambda f: f.shutdown_answers),
        ("lease pick-up after delete (s)", lambda f: _med(f.lease_pickup)),
        ("lease holder identity", lambda f: f.identity),
        ("workspace Ready (s)", lambda f: _med(f.workspace_ready)),
        ("root folder files", lambda f: f.root_files),
        ("admin.kubeconfig contexts", lambda f: f.contexts),
        ("admin.kubeconfig users", lambda f: f.users),
        ("RSS when ready (MiB)", lambda f: _med(f.rss_mib)),
        ("error", lambda f: f.error or "-"),
    ]
    out = ["| measurement | " + " | ".join(f.name for f in figs) + " |", "|---" * (len(figs) + 1) + "|"]
    for label, get in rows:
        out.append(f"| {label} | " + " | ".join(get(f).replace("|", "/") for f in figs) + " |")
    return "\n".join(out)


def main() -> int:
    runs = int(os.environ.get("RUNS", "3"))
    kcps = [("stand-in", binary_path())]
    for binary in sorted(TOOLS.glob("kcp*")):
        kcps.append((binary.name, str(binary)))
    if len(kcps) == 1:
        print("no real kcp in hack/tools/bin: run `make tools` first", file=sys.stderr)
    work = Path(tempfile.mkdtemp(prefix="kcpshard-fidelity-"))
    os.environ.setdefault("ETCD_BINARY", str(TOOLS / "etcd"))
    figs = []
    with EtcdServer(work / "etcd") as etcd:
        for name, binary in kcps:
            print(f"measuring {name} ({binary}) ...", file=sys.stderr, flush=True)
            figs.append(measure(name, binary, work, etcd.endpoint, runs))
    print(table(figs))
    print(f"\nruns: {runs}; logs: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
