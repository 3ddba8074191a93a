"""What a kubelet does beyond running pods: register its Node, heartbeat, and give pods their identity.

- Node registration (``pkg/kubelet/kubelet_node_status.go`` ``registerWithAPIServer``): the ``Node`` with
  its addresses, capacity and ``nodeInfo``, then its status with ``Ready=True`` (reason ``KubeletReady``).
- Heartbeat (``pkg/kubelet/nodelease``): the ``Lease`` ``kube-node-lease/<node>``, owned by the Node,
  renewed every ``heartbeat`` seconds (a kubelet: 10 s for a 40 s lease).
- Pod identity (``pkg/kubelet/token/token_manager.go``): a token of the pod's ``serviceAccountName``
  bound to the pod, renewed at 80 % of its life (none for a pod that names no account). A kubelet
  projects it as a file for in-cluster config; here it is a kubeconfig file in the pod's folder and
  ``KUBECONFIG`` names it, since the pods' programs reach the API server through a kubeconfig (there
  is no ``KUBERNETES_SERVICE_HOST`` on this machine). ``automountServiceAccountToken: false`` gets none.
"""

from __future__ import annotations

import asyncio
import logging
import os
import platform
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kcpshard.api.conditions import now as timestamp
from kcpshard.k8s.api import NODES, ApiClient, ApiError, Conflict, NotFound, ResourceRef
from kcpshard_testkit.identity import (
    TOKEN_SECONDS,
    Token,
    ca_pem,
    keep_fresh,
    request_token,
    write_token_kubeconfig,
)
from kcpshard_testkit.runner.envs import POD_IP, ConfigError

log = logging.getLogger(__name__)

NODE_LEASES = ResourceRef("coordination.k8s.io", "v1", "leases")
LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40
HEARTBEAT_SECONDS = 10.0
RUNNER_VERSION = "v0.0.0-kcpshard-local-runner"


def micro_time(moment: datetime | None = None) -> str:
    """metav1.MicroTime as the API server writes it."""
    return (moment or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _arch() -> str:
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def node_object(name: str, kubelet_port: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": _arch(),
            },
        },
        "spec": {},
        "status": node_status(kubelet_port),
    }


def node_status(kubelet_port: int = 0) -> dict[str, Any]:
    """The Node's status; `kubelet_port` is where its container logs are served (0: nowhere)."""
    now = timestamp()
    resources = {"cpu": str(os.cpu_count() or 1), "memory": _memory(), "pods": "110"}
    return {
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "the local workload runner is posting ready status",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        ],
        "addresses": [
            {"type": "InternalIP", "address": POD_IP},
            {"type": "Hostname", "address": platform.node() or "localhost"},
        ],
        "capacity": resources,
        "allocatable": resources,
        "nodeInfo": {
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
            "kernelVersion": platform.release(),
            "osImage": "local processes",
            "containerRuntimeVersion": "local://",
            "kubeletVersion": RUNNER_VERSION,
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": _arch(),
        },
    }


def _memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{line.split()[1]}Ki"
    except OSError:
        pass
    return "0"


class NodeAgent:
    """Registers the Node and keeps its Lease fresh."""

    def __init__(self, api: ApiClient, name: str, heartbeat: float = HEARTBEAT_SECONDS) -> None:
        self.api = api
        self.name = name
        self.heartbeat = heartbeat
        self.node_uid = ""
        self.kubelet_port = 0  # the LogServer's, set before register()

    async def register(self) -> None:
        try:
            node = await self.api.create(NODES, None, node_object(self.name, self.kubelet_port))
        except Conflict:  # registered before (a restarted runner)
            node = await self.api.get(NODES, None, self.name)
        self.node_uid = str(node["metadata"]["uid"])
        # The create may keep or drop the status; writing it through the subresource is certain.
        status = node_status(self.kubelet_port)
        await self.api.patch(NODES, None, self.name, {"status": status}, subresource="status")
        await self.renew()

    async def renew(self) -> None:
        spec = {
            "holderIdentity": self.name,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": micro_time(),
        }
        try:
            await self.api.patch(NODE_LEASES, LEASE_NAMESPACE, self.name, {"spec": spec})
        except NotFound:
            owner = {"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": self.node_uid}
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": LEASE_NAMESPACE, "ownerReferences": [owner]},
                "spec": spec,
            }
            await self.api.create(NODE_LEASES, LEASE_NAMESPACE, lease)

    async def heartbeat_forever(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat)
            try:
                await self.renew()
            except ApiError as exc:
                log.warning(
                    "node %s: lease renewal failed (next try in %s s): %s", self.name, self.heartbeat, exc
                )


class PodIdentity:
    """Service account tokens for pods, written as kubeconfig files."""

    def __init__(self, api: ApiClient, seconds: int = TOKEN_SECONDS) -> None:
        self.api = api
        self.seconds = seconds
        self._ca = ca_pem(api.credentials)

    @staticmethod
    def service_account(pod: Mapping[str, Any]) -> str | None:
        """The pod's service account, or None when it gets no token.

        Without the ServiceAccount admission plugin (off, as in envtest) a pod that names no account keeps
        an empty `serviceAccountName` and gets no token volume, so a kubelet gives it no identity; the
        API server would refuse a token of `default` bound to it anyway ("pod running with different
        serviceaccount name")."""
        spec = pod.get("spec") or {}
        if spec.get("automountServiceAccountToken") is False or not spec.get("serviceAccountName"):
            return None
        return str(spec["serviceAccountName"])

    async def _token(self, pod: Mapping[str, Any], account: str) -> Token:
        namespace = str((pod.get("metadata") or {}).get("namespace"))
        try:
            return await request_token(self.api, namespace, account, seconds=self.seconds, bound_pod=pod)
        except NotFound:
            raise ConfigError(f'serviceaccount "{account}" not found') from None
        except ApiError as exc:
            raise ConfigError(f"cannot get a token of service account {account}: {exc}") from None

    async def kubeconfig(self, pod: Mapping[str, Any], pod_dir: Path) -> tuple[Path, Token] | None:
        """`<pod_dir>/serviceaccount/kubeconfig` of the pod's account, or None; `ConfigError` if refused."""
        account = self.service_account(pod)
        if account is None:
            return None
        token = await self._token(pod, account)
        namespace = str((pod.get("metadata") or {}).get("namespace"))
        path = write_token_kubeconfig(
            pod_dir / "serviceaccount", self.api.credentials.server, self._ca, token, namespace
        )
        return path, token

    async def keep_fresh(self, pod: Mapping[str, Any], pod_dir: Path, token: Token) -> None:
        """Renew the pod's token at 80 % of its life, for as long as the pod runs (cancel to stop)."""
        account = self.service_account(pod)
        assert account is not None
        name = (pod.get("metadata") or {}).get("name")
        await keep_fresh(pod_dir / "serviceaccount", token, lambda: self._token(pod, account), f"pod {name}")
