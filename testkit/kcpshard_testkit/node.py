"""A real node for the test cluster: containerd, the kubelet and the scheduler as local processes.

The shape of Kubernetes' `hack/local-up-cluster.sh`: Debian's containerd and runc, the CNI plugins of
Debian's `containernetworking-plugins`, and kubelet and kube-scheduler v1.37.2 built by `make tools`.
Everything lives under the node's own folder: containerd's config, root, state and socket (never the
machine's `/etc/containerd` or `/var/lib/containerd`), the kubelet's root, its pod logs, certificates and
cgroup parent (`/kcpshard-<id>`), so two nodes on one machine keep apart.

What this machine needs (and why), each said again where it is set:
- cgroup v1 is mounted: the kubelet runs `cgroupDriver: cgroupfs` with `failCgroupV1: false`;
- root may not lower `oom_score_adj` here: containerd's CRI `restrict_oom_score_adj = true`;
- no registry is reachable: the sandbox image is made here (`pause.py`) and every image is imported with
  `ctr images import`; pods use `imagePullPolicy: Never` or `IfNotPresent`.

The node's name resolves to loopback (`localhost`): kube-apiserver reaches the kubelet (`kubectl logs`,
`exec`) by the node's Hostname address, and the kubelet refuses a loopback `--node-ip`.
Pods that are not hostNetwork get an address on an isolated bridge of their own node (CNI `bridge`, no
gateway, no masquerade): containerd's CRI wants an address for every sandbox, but nothing routes to or
from that network, so such a pod reaches neither the API server nor anything else; every pod of this
project runs on the host network, as the agents do in a real cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
from pathlib import Path

from kcpshard.k8s.api import NODES, ApiClient, ApiError
from kcpshard_testkit import tools
from kcpshard_testkit.controlplane import client_kubeconfig
from kcpshard_testkit.daemon import Daemon, DaemonError
from kcpshard_testkit.pause import PAUSE_IMAGE, pause_image
from kcpshard_testkit.pki import CertificateAuthority
from kcpshard_testkit.tcp import free_port

log = logging.getLogger(__name__)

NODE_NAME = "localhost"
CONTAINERD_START_TIMEOUT = 60.0
NODE_READY_TIMEOUT = 120.0
CNI_BIN_DIR = "/usr/lib/cni"
POD_SUBNET = "10.88.0.0/24"  # on a bridge with no gateway: reachable from nowhere


class NodeError(RuntimeError):
    """The node could not start (the message names the part and its log)."""


def containerd_config(root: Path) -> str:
    """containerd 1.6's config (version 2): all state under `root`, the CRI plugin set for this machine."""
    return f"""version = 2
root = "{root / "root"}"
state = "{root / "state"}"
# Plugins that want folders outside `root` or hardware this node does not have.
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = "{root / "containerd.sock"}"

[ttrpc]
  address = "{root / "containerd.sock.ttrpc"}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # Root here may not lower oom_score_adj; without this runc fails every sandbox.
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{root / "cni"}"
"""


def cni_config(bridge: str, ipam_dir: Path) -> str:
    """An isolated pod network: a bridge with no gateway; host-local addresses kept under the node."""
    network = {
        "cniVersion": "1.0.0",
        "name": "kcpshard-pods",
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": False,
                "ipMasq": False,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET}]],
                    "dataDir": str(ipam_dir),
                },
            },
            {"type": "loopback"},
        ],
    }
    return json.dumps(network, indent=2)


def kubelet_config(
    *,
    port: int,
    healthz_port: int,
    ca: Path,
    cert: Path,
    key: Path,
    runtime: Path,
    cgroup_root: str,
    logs: Path,
) -> str:
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": "127.0.0.1",
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "tlsCertFile": str(cert),
        "tlsPrivateKeyFile": str(key),
        # kube-apiserver presents its kubelet client certificate (CA below); nobody else gets in.
        "authentication": {
            "x509": {"clientCAFile": str(ca)},
            "webhook": {"enabled": False},
            "anonymous": {"enabled": False},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": f"unix://{runtime}",
        # This machine mounts cgroup v1; the kubelet refuses it unless told otherwise.
        "cgroupDriver": "cgroupfs",
        "maxPods": 250,  # the scale bench: 50 shards rolling run 150 pods (a front, two slots each)
        "failCgroupV1": False,
        "failSwapOn": False,
        "cgroupRoot": cgroup_root,
        "podLogsDir": str(logs),
        # A test machine's disk is not a reason to evict the shard under test.
        "evictionHard": {"imagefs.available": "0%", "nodefs.available": "0%", "nodefs.inodesFree": "0%"},
        "imageGCHighThresholdPercent": 100,
        "makeIPTablesUtilChains": False,
        "localStorageCapacityIsolation": False,
        "serializeImagePulls": False,
        "resolvConf": "/etc/resolv.conf",
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
        "nodeStatusUpdateFrequency": "5s",
        "shutdownGracePeriod": "0s",
    }
    return json.dumps(config, indent=2)


def _cgroup_parents(cgroup_root: str) -> None:
    """cgroupfs: the kubelet wants its cgroup root to exist in every hierarchy it uses."""
    base = Path("/sys/fs/cgroup")
    for hierarchy in base.iterdir():
        if hierarchy.is_dir() and not hierarchy.is_symlink() and (hierarchy / "cgroup.procs").exists():
            with contextlib.suppress(OSError):
                (hierarchy / cgroup_root.lstrip("/")).mkdir(exist_ok=True)


class Node:
    """containerd + kubelet + kube-scheduler for the control plane at `url`; `start()`, `stop()`."""

    def __init__(
        self, workdir: Path, *, url: str, ca: CertificateAuthority, ca_path: Path, name: str = NODE_NAME
    ) -> None:
        self.workdir = Path(workdir)
        self.url = url
        self.ca = ca
        self.ca_path = ca_path
        self.name = name
        self.containerd_dir = self.workdir / "containerd"
        self.socket = self.containerd_dir / "containerd.sock"
        self.kubelet_dir = self.workdir / "kubelet"
        tag = hashlib.sha256(str(self.workdir).encode()).hexdigest()[:8]
        self.cgroup_root = f"/kcpshard-{tag}"
        self.bridge = f"kcps{tag[:8]}"  # at most 15 characters, one per node
        self.containerd: Daemon | None = None
        self.kubelet: Daemon | None = None
        self.scheduler: Daemon | None = None

    # --- containerd --------------------------------------------------------------------------------
    def ctr(self, *args: str, timeout: float = 300.0) -> str:
        """Debian's `ctr` against this node's containerd, in the CRI's namespace (`k8s.io`)."""
        result = subprocess.run(
            ["ctr", "--address", str(self.socket), "--namespace", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if result.returncode != 0:
            raise NodeError(f"ctr {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def import_image(self, tar: Path) -> None:
        """A docker-archive or OCI tar into the node's images (what `ctr images import` does)."""
        self.ctr("images", "import", "--no-unpack=false", str(tar))

    async def _start_containerd(self) -> None:
        self.containerd_dir.mkdir(parents=True, exist_ok=True)
        (self.containerd_dir / "cni").mkdir(exist_ok=True)
        (self.containerd_dir / "cni" / "10-pods.conflist").write_text(
            cni_config(self.bridge, self.workdir / "cni-ipam")
        )
        config = self.containerd_dir / "config.toml"
        config.write_text(containerd_config(self.containerd_dir))
        self.containerd = Daemon(
            "containerd", ["containerd", "--config", str(config)], self.workdir / "containerd.log"
        )
        self.containerd.start()

        async def serving() -> bool:
            if not self.socket.exists():
                return False
            probe = await asyncio.create_subprocess_exec(
                "ctr", "--address", str(self.socket), "version",
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            return await probe.wait() == 0

        try:
            await self.containerd.wait_ready("its socket", serving, CONTAINERD_START_TIMEOUT)
        except DaemonError as exc:
            raise NodeError(f"containerd did not start: {exc}") from None
        await asyncio.to_thread(self.import_image, pause_image())

    # --- kubelet -----------------------------------------------------------------------------------
    def _kubelet_args(self) -> list[str]:
        certs = self.kubelet_dir / "pki"
        certs.mkdir(parents=True, exist_ok=True)
        serving_cert, serving_key = self.ca.serving(cn=self.name).write(
            certs / "kubelet.crt", certs / "kubelet.key"
        )
        # The Node authorizer knows a kubelet by this name and group.
        identity = self.ca.client(f"system:node:{self.name}", "system:nodes")
        kubeconfig = client_kubeconfig(self.kubelet_dir / "kubeconfig", self.url, self.ca_path, identity)
        _cgroup_parents(self.cgroup_root)
        config = self.kubelet_dir / "config.json"
        config.write_text(
            kubelet_config(
                port=free_port(),
                healthz_port=free_port(),
                ca=self.ca_path,
                cert=serving_cert,
                key=serving_key,
                runtime=self.socket,
                cgroup_root=self.cgroup_root,
                logs=self.workdir / "pod-logs",
            )
        )
        return [
            str(tools.tool("kubelet")),
            f"--config={config}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={self.kubelet_dir / 'root'}",
            f"--cert-dir={certs}",
            f"--hostname-override={self.name}",
            "--v=1",
        ]

    async def _wait_node_ready(self, api: ApiClient) -> None:
        async def ready() -> bool:
            try:
                node = await api.get(NODES, None, self.name)
            except ApiError:
                return False
            conditions = (node.get("status") or {}).get("conditions") or []
            return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

        assert self.kubelet is not None
        try:
            await self.kubelet.wait_ready(f"node {self.name} Ready", ready, NODE_READY_TIMEOUT)
        except DaemonError as exc:
            raise NodeError(f"the kubelet did not bring node {self.name} to Ready: {exc}") from None

    # --- the scheduler -----------------------------------------------------------------------------
    def _scheduler_args(self) -> list[str]:
        identity = self.ca.client("system:kube-scheduler")
        kubeconfig = client_kubeconfig(
            self.workdir / "scheduler.kubeconfig", self.url, self.ca_path, identity
        )
        return [
            str(tools.tool("kube-scheduler")),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            "--profiling=false",
        ]

    # --- lifecycle ---------------------------------------------------------------------------------
    async def start(self, api: ApiClient, images: tuple[Path, ...] = ()) -> None:
        """containerd (with the sandbox image and `images`), the scheduler, the kubelet; until Ready."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            await self._start_containerd()
            for image in images:
                await asyncio.to_thread(self.import_image, image)
            self.scheduler = Daemon(
                "kube-scheduler", self._scheduler_args(), self.workdir / "kube-scheduler.log"
            )
            self.scheduler.start()
            self.kubelet = Daemon("kubelet", self._kubelet_args(), self.workdir / "kubelet.log")
            self.kubelet.start()
            await self._wait_node_ready(api)
            self.scheduler.check_running()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """The kubelet first (it stops no pod by itself), then every container, then containerd."""
        for daemon in (self.kubelet, self.scheduler):
            if daemon is not None:
                await daemon.astop()
        if self.containerd is not None and self.containerd.returncode is None:
            await asyncio.to_thread(self._kill_containers)
            await self.containerd.astop()
        await asyncio.to_thread(self._release_host)

    def _release_host(self) -> None:
        """What the node left on the machine: its shims and their containers (they outlive containerd by
        design), its mounts (pod volumes, sandboxes), its bridge, its cgroups."""
        for pid in _shims_of(self.socket):
            for victim in (*_children(pid), pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(victim, signal.SIGKILL)
        mounts = [
            line.split()[4]
            for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split()[4].startswith(str(self.workdir) + "/")
        ]
        for mount in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", mount], capture_output=True, check=False)
        subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True, check=False)
        # The imported images, packed and unpacked (about 0.7 GB a node): a suite that kept them ran a CI
        # machine out of disk. The logs stay.
        shutil.rmtree(self.containerd_dir / "root", ignore_errors=True)
        for hierarchy in Path("/sys/fs/cgroup").iterdir():
            root = hierarchy / self.cgroup_root.lstrip("/")
            if root.is_dir():
                for cgroup in sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                    if cgroup.is_dir():
                        with contextlib.suppress(OSError):
                            cgroup.rmdir()
                with contextlib.suppress(OSError):
                    root.rmdir()

    def _kill_containers(self) -> None:
        """Every task this containerd runs, killed: pods on the host network must not outlive the node."""
        with contextlib.suppress(NodeError, subprocess.TimeoutExpired):
            for line in self.ctr("tasks", "list", "-q", timeout=30).split():
                with contextlib.suppress(NodeError, subprocess.TimeoutExpired):
                    self.ctr("tasks", "kill", "--all", "--signal", "SIGKILL", line, timeout=30)


def _shims_of(socket: Path) -> list[int]:
    """containerd-shim processes started by the containerd listening on `socket`."""
    needle = str(socket).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                cmdline = (entry / "cmdline").read_bytes()
                if b"containerd-shim" in cmdline and needle in cmdline:
                    found.append(int(entry.name))
    return found


def _children(pid: int) -> list[int]:
    """Every descendant of `pid` (a shim's containers), deepest last."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                parents.setdefault(ppid, []).append(int(entry.name))
    result, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            result.append(child)
            todo.append(child)
    return result
