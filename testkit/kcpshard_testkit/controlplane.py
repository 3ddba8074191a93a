"""The real Kubernetes control plane for tests and `kcpshard-dev up`: etcd, apiserver, controller-manager.

Started as controller-runtime's envtest starts it (`pkg/internal/testing/controlplane`), from the binaries
of `make tools` (`hack/tools/bin`):

- etcd 3.6 on free loopback ports (`--unsafe-no-fsync`), the API server's alone;
- kube-apiserver on a free loopback port, serving a certificate of a CA made here (`pki.py`), users from
  client certificates of that CA (`--client-ca-file`: the CN is the user, O the groups), RBAC (and the
  Node authorizer), service account tokens signed with a key made here and issued by
  `https://127.0.0.1:<port>/`; with a node (`for_node`) it serves on the `kubernetes` Service's address,
  so pods reach it in-cluster with the token the ServiceAccount admission mounts;
- kube-controller-manager with the controllers a workload needs (Job, Deployment, ReplicaSet, garbage
  collector, namespace, service accounts and their tokens, disruption budgets), each with its own
  service account (`--use-service-account-credentials`), as `system:kube-controller-manager`.

Files in `workdir`: `ca.crt`; `admin.kubeconfig` (user `kcpshard-admin` in `system:masters`) and
`controller-manager.kubeconfig`, both 0600; keys 0600; one log per process (`etcd.log`,
`kube-apiserver.log`, `kube-controller-manager.log`). Every process dies with the process that started it.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import random
import shutil
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path

import httpx

from kcpshard.k8s.api import ApiClient, ApiError
from kcpshard_testkit import tools
from kcpshard_testkit.daemon import Daemon, DaemonError
from kcpshard_testkit.etcd import EtcdServer
from kcpshard_testkit.identity import SERVICEACCOUNTS
from kcpshard_testkit.pki import CertificateAuthority, Issued, service_account_key, write_private
from kcpshard_testkit.tcp import free_port
from kcpshard_testkit.tls import write_kubeconfig

log = logging.getLogger(__name__)

ADMIN_USER = "kcpshard-admin"
CONTROLLERS = (
    "job-controller",
    "garbage-collector-controller",
    "deployment-controller",
    "replicaset-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "namespace-controller",
    "disruption-controller",  # PodDisruptionBudgets' status, which evictions (a drain) read
)
# With a real node: the not-ready taint lifted (and a lost node's pods evicted), the cluster CA published in
# every namespace (`kube-root-ca.crt`, part of each pod's ServiceAccount token volume), and, as in any
# cluster, pods bound to a node that does not exist deleted after 40 s (a front on a misspelt `spec.node`),
# so deleting their shard can finish.
NODE_CONTROLLERS = (
    "node-lifecycle-controller",
    "root-ca-certificate-publisher-controller",
    "pod-garbage-collector-controller",
)
# A kubelet that stops reporting is judged after this, not the default 50 s (its lease is renewed every
# 10 s): a test that stops it waits less.
NODE_MONITOR_GRACE = "30s"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
APISERVER_START_TIMEOUT = 120.0
# The API-request bench (hack/api_requests.py) turns on kube-apiserver's audit log with this.
AUDIT_ENV = "KCPSHARD_APISERVER_AUDIT"
AUDIT_LOG = "audit.log"
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: RequestResponse  # a list's response too: what each list returned (objects, bytes)
    verbs: ["list"]
  - level: Metadata
"""
CONTROLLER_MANAGER_START_TIMEOUT = 60.0


Setup = Callable[["ControlPlane"], Awaitable[None]]


IN_CLUSTER_NAMES = ("kubernetes", "kubernetes.default", "kubernetes.default.svc")


def service_ip() -> str:
    """127.0.N.1 with port 443 free: the `kubernetes` Service's address of a cluster with a real node."""
    for third in random.sample(range(2, 255), 40):
        address = f"127.0.{third}.1"
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((address, 443))
            except OSError:
                continue
        return address
    raise ControlPlaneError("no loopback address 127.0.N.1 has port 443 free")


class ControlPlaneError(RuntimeError):
    """The control plane could not start (the message names the process and its log)."""


def client_kubeconfig(path: Path, url: str, ca_path: Path, issued: Issued) -> Path:
    """A kubeconfig (0600) for a client-certificate user."""
    user = {
        "client-certificate-data": base64.b64encode(issued.cert).decode(),
        "client-key-data": base64.b64encode(issued.key).decode(),
    }
    write_kubeconfig(path, url, ca_path, user=user)
    return path


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager; `start()`, then `url` and `admin_kubeconfig`."""

    def __init__(
        self, workdir: Path, *, controllers: Sequence[str] = CONTROLLERS, for_node: bool = False
    ) -> None:
        self.workdir = Path(workdir)
        self.controllers = (*controllers, *NODE_CONTROLLERS) if for_node else tuple(controllers)
        # With a real node: pods get their ServiceAccount token mounted and reach this API server in-cluster.
        self.for_node = for_node
        self.service_ip = ""
        self.ca: CertificateAuthority | None = None
        self.url = ""
        self.port = 0
        self.ca_path = self.workdir / "ca.crt"
        self.admin_kubeconfig = self.workdir / "admin.kubeconfig"
        self.controller_manager_kubeconfig = self.workdir / "controller-manager.kubeconfig"
        self.sa_key_path = self.workdir / "sa.key"
        self.etcd = EtcdServer(self.workdir, name="etcd")
        self.apiserver: Daemon | None = None
        self.controller_manager: Daemon | None = None
        self._admin_tls: ssl.SSLContext | None = None

    # --- lifecycle ---------------------------------------------------------------------------------
    async def start(
        self, before_controllers: Callable[[ControlPlane], Awaitable[None]] | None = None
    ) -> None:
        """Start etcd, the API server and the controller manager; `before_controllers` runs in between.

        What a cluster has before its controllers see it goes there: kube-controller-manager's garbage
        collector reads the served kinds at start and refreshes them only every 30 s, so owner references
        to a CRD applied later are not followed until then.
        """
        binaries = {name: tools.tool(name) for name in ("kube-apiserver", "kube-controller-manager", "etcd")}
        self.etcd.binary = str(binaries["etcd"])
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.workdir.chmod(0o700)
        # A fresh cluster each time: the CA and the keys are new, tokens and pods of an old run are stale.
        shutil.rmtree(self.etcd.data_dir, ignore_errors=True)
        ca = self.ca = CertificateAuthority("kcpshard-dev-ca")
        self.ca_path.write_bytes(ca.cert_pem)
        if self.for_node:
            self.service_ip = service_ip()
        in_cluster = (self.service_ip,) if self.service_ip else ()
        serving_cert, serving_key = ca.serving(ips=in_cluster, names=IN_CLUSTER_NAMES).write(
            self.workdir / "apiserver.crt", self.workdir / "apiserver.key"
        )
        # kube-apiserver's client identity towards the kubelet (`kubectl logs`, `exec`).
        ca.client("kube-apiserver-kubelet-client", "system:masters").write(
            self.workdir / "kubelet-client.crt", self.workdir / "kubelet-client.key"
        )
        write_private(self.sa_key_path, service_account_key())
        admin = ca.client(ADMIN_USER, "system:masters")
        admin_cert, admin_key = admin.write(self.workdir / "admin.crt", self.workdir / "admin.key")
        self._admin_tls = ssl.create_default_context(cafile=str(self.ca_path))
        self._admin_tls.load_cert_chain(str(admin_cert), str(admin_key))
        controller_manager = ca.client("system:kube-controller-manager")
        try:
            await self.etcd.start()
            await self._start_apiserver(binaries["kube-apiserver"], serving_cert, serving_key)
            client_kubeconfig(self.admin_kubeconfig, self.url, self.ca_path, admin)
            client_kubeconfig(self.controller_manager_kubeconfig, self.url, self.ca_path, controller_manager)
            if before_controllers is not None:
                await before_controllers(self)
            await self._start_controller_manager(binaries["kube-controller-manager"])
        except BaseException:
            await self.stop()
            raise

    async def _start_apiserver(self, binary: Path, cert: Path, key: Path) -> None:
        last_error = ""
        for _ in range(3):  # a port picked free can be taken before the server binds it
            # With a node, the API server serves on the `kubernetes` Service's own address and port: the
            # kubelet hands pods KUBERNETES_SERVICE_HOST/PORT from it, and no kube-proxy runs here.
            self.port = 443 if self.service_ip else free_port()
            self.url = f"https://{self.service_ip or '127.0.0.1'}:{self.port}"
            self.apiserver = Daemon(
                "kube-apiserver", self._apiserver_args(binary, cert, key), self.workdir / "kube-apiserver.log"
            )
            self.apiserver.start()
            try:
                await self.apiserver.wait_ready("/readyz", self._apiserver_ready, APISERVER_START_TIMEOUT)
                return
            except DaemonError as exc:
                last_error = str(exc)
                await self.apiserver.astop()
                if "address already in use" not in last_error:
                    break
        raise ControlPlaneError(f"kube-apiserver did not become ready: {last_error}")

    def _apiserver_args(self, binary: Path, cert: Path, key: Path) -> list[str]:
        return [
            str(binary),
            f"--etcd-servers={self.etcd.endpoint}",
            f"--secure-port={self.port}",
            f"--bind-address={self.service_ip or '127.0.0.1'}",
            f"--advertise-address={self.service_ip or '127.0.0.1'}",
            f"--cert-dir={self.workdir}",
            f"--tls-cert-file={cert}",
            f"--tls-private-key-file={key}",
            f"--client-ca-file={self.ca_path}",
            f"--service-account-issuer={self.url}/",
            f"--service-account-key-file={self.sa_key_path}",
            f"--service-account-signing-key-file={self.sa_key_path}",
            "--authorization-mode=Node,RBAC",
            f"--kubelet-client-certificate={self.workdir / 'kubelet-client.crt'}",
            f"--kubelet-client-key={self.workdir / 'kubelet-client.key'}",
            *self._node_args(),
            "--allow-privileged=true",
            # The `kubernetes` Service's endpoints would name 127.0.0.1, which the reconciler refuses.
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            *self._audit_args(),
        ]

    def _node_args(self) -> list[str]:
        if not self.for_node:  # the API alone: no kubelet to reach, no pod that runs
            return [f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}"]
        # The real kubelet: reached by its Hostname address (the node is named `localhost`: the kubelet
        # refuses a loopback node IP); the `kubernetes` Service is this server's own loopback address.
        return [
            "--kubelet-preferred-address-types=Hostname",
            f"--service-cluster-ip-range={self.service_ip.rsplit('.', 1)[0]}.0/24",
        ]

    def _audit_args(self) -> list[str]:
        """With KCPSHARD_APISERVER_AUDIT set (the API-request bench): every request's metadata (and each
        list's response), one JSON line each, in <workdir>/audit.log. Off for the tests: it costs a write
        per request."""
        if not os.environ.get(AUDIT_ENV):
            return []
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text(AUDIT_POLICY)
        return [f"--audit-policy-file={policy}", f"--audit-log-path={self.workdir / AUDIT_LOG}"]

    async def _apiserver_ready(self) -> bool:
        assert self._admin_tls is not None
        try:
            async with httpx.AsyncClient(verify=self._admin_tls, timeout=5.0) as client:
                resp = await client.get(f"{self.url}/readyz")
        except httpx.HTTPError:
            return False
        return resp.status_code == 200

    async def _start_controller_manager(self, binary: Path) -> None:
        args = [
            str(binary),
            f"--kubeconfig={self.controller_manager_kubeconfig}",
            f"--controllers={','.join(self.controllers)}",
            f"--service-account-private-key-file={self.sa_key_path}",
            f"--root-ca-file={self.ca_path}",
            "--use-service-account-credentials=true",
            "--leader-elect=false",
            "--secure-port=0",
            "--profiling=false",
        ]
        if self.for_node:
            args.append(f"--node-monitor-grace-period={NODE_MONITOR_GRACE}")
        self.controller_manager = Daemon(
            "kube-controller-manager", args, self.workdir / "kube-controller-manager.log"
        )
        self.controller_manager.start()
        # No health endpoint (--secure-port=0): its service account controller at work says it runs.
        async with ApiClient.from_kubeconfig(self.admin_kubeconfig) as api:

            async def default_service_account() -> bool:
                try:
                    await api.get(SERVICEACCOUNTS, "default", "default")
                except ApiError:
                    return False
                return True

            try:
                await self.controller_manager.wait_ready(
                    "the default ServiceAccount", default_service_account, CONTROLLER_MANAGER_START_TIMEOUT
                )
            except DaemonError as exc:
                raise ControlPlaneError(f"kube-controller-manager did not start: {exc}") from None

    async def stop(self) -> None:
        """Stop every process, newest first; safe to call more than once."""
        for daemon in (self.controller_manager, self.apiserver):
            if daemon is not None:
                await daemon.astop()
        await self.etcd.stop()

    async def __aenter__(self) -> ControlPlane:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


@contextlib.asynccontextmanager
async def control_plane(workdir: Path) -> AsyncIterator[ControlPlane]:
    """A started control plane, stopped on exit; logs how long the start took."""
    started = time.monotonic()
    plane = ControlPlane(workdir)
    async with plane:
        log.info("control plane up in %.1f s at %s", time.monotonic() - started, plane.url)
        yield plane
