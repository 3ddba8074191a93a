"""A sharded kcp on real binaries: the operator's shards (a root and non-root ones, `KcpShard`s) with kcp's
cache server and kcp's front-proxy beside them, as processes on the host (the node is this machine).

What kcp's own `cmd/sharded-test-server` sets up, reduced to what a blue/green roll needs:

- the cache server, which every shard replicates to and reads from (`--cache-kubeconfig`, in a Secret
  the shards' specs name); the root too: without it a root runs an in-process cache no other shard reads;
- kcp's front-proxy, the fleet's one address: it finds each workspace's shard in the `Shard` objects of
  the root workspace and proxies to the shard's base URL, which is the shard's front (the address a
  blue/green roll keeps); it authenticates clients itself (a token here) and passes the user on in
  `X-Remote-*` headers with a certificate of a request-header CA every shard trusts;
- a client CA every shard, the cache server and the front-proxy trust (`--client-ca-file`): the
  credentials of the parts to each other, as in sharded-test-server.

A shard serves kcp's self-signed certificate (root material the operator keeps; `--tls-cert-file` is
reserved), unknown until its first slot started. Yet the root must reach every shard from its first start
(its workspace scheduler creates the LogicalCluster on the chosen shard), and a non-root shard the root.
So every shard also serves a certificate of the fleet's serving CA to clients that ask for `SNI_NAME`
(`--tls-sni-cert-key`), and kcp's own kubeconfigs name it (`tls-server-name`); the operator and the slots'
agents name no server and still get the shard's own. The front-proxy cannot name one (it proxies to the
base URL as it is, and replaces a kubeconfig's server): it starts once every shard has its root material,
trusting the shards' own CAs. Until then no workspace becomes Ready: kcp's workspace controller reads a
workspace's LogicalCluster through the front-proxy (`--external-logical-cluster-admin-kubeconfig`).
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from kcpshard.k8s.api import SECRETS
from kcpshard_testkit import scenario
from kcpshard_testkit.daemon import Daemon
from kcpshard_testkit.load import kube_client
from kcpshard_testkit.pki import CertificateAuthority, Issued, write_private
from kcpshard_testkit.realkcp import TOOLS_BIN
from kcpshard_testkit.stack import Stack
from kcpshard_testkit.tcp import free_port
from kcpshard_testkit.tls import kubeconfig_document, new_token
from kcpshard_testkit.waiting import wait_for

SNI_NAME = "shards.fleet.kcp"  # not in any DNS: only kcp's own clients name it, to get the shared cert
CACHE_SECRET = "fleet-cache-kubeconfig"
SHUTDOWN_DELAY_SECONDS = 0  # see Fleet.manifest
ROOT_SHARD_SECRET = "fleet-root-shard-kubeconfig"
START_TIMEOUT = 180.0
SHARD_TIMEOUT = 600.0  # a real kcp starts in tens of seconds on a busy 2-core machine; three at once
WORKSPACES = "/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces"
SHARDS = "/clusters/root/apis/core.kcp.io/v1alpha1/shards"
# kcp's bootstrap groups (pkg/authorization/bootstrap/policy.go): admin in every workspace, and the
# logical-cluster admins its workspace controller uses directly and through the front-proxy.
KCP_ADMIN_GROUP = "system:kcp:admin"
LOGICAL_CLUSTER_ADMIN = "system:kcp:logical-cluster-admin"
EXTERNAL_LOGICAL_CLUSTER_ADMIN = "system:kcp:external-logical-cluster-admin"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig(
    server: str, ca: bytes, user: Issued, *, context: str = "fleet", server_name: str | None = None
) -> bytes:
    """A kubeconfig of a client certificate, everything inline (a Secret or a file on the node carries it)."""
    credentials = {"client-certificate-data": _b64(user.cert), "client-key-data": _b64(user.key)}
    return kubeconfig_document(server, ca, credentials, context=context, server_name=server_name)


@dataclass
class Fleet:
    """One fleet in the stack's namespace: its shared material, its shards and its two host processes."""

    stack: Stack
    workdir: Path  # the host processes' files and logs
    shards: tuple[str, ...] = ("root", "beta", "gamma")  # the first is the root
    serving_ca: CertificateAuthority = field(default_factory=lambda: CertificateAuthority("fleet-serving"))
    client_ca: CertificateAuthority = field(default_factory=lambda: CertificateAuthority("fleet-clients"))
    header_ca: CertificateAuthority = field(default_factory=lambda: CertificateAuthority("fleet-headers"))
    cache_port: int = field(default_factory=free_port)
    proxy_port: int = field(default_factory=free_port)
    token: str = field(default_factory=new_token)  # kcp-admin, as the front-proxy knows it
    ports: dict[str, int] = field(default_factory=dict)  # each shard's front
    cache: Daemon | None = None
    proxy: Daemon | None = None

    def __post_init__(self) -> None:
        self.ports = {name: free_port() for name in self.shards}
        self.workdir.mkdir(parents=True, exist_ok=True)

    @property
    def root(self) -> str:
        return self.shards[0]

    def front(self, shard: str) -> str:
        """A shard's base URL: its front, which stays where it is through a roll."""
        return f"https://127.0.0.1:{self.ports[shard]}"

    @property
    def url(self) -> str:
        """kcp's front-proxy: where the fleet's clients go (token `token`, CA `ca_pem`)."""
        return f"https://127.0.0.1:{self.proxy_port}"

    @property
    def ca_pem(self) -> bytes:
        """The CA of the front-proxy's and the cache server's serving certificates."""
        return self.serving_ca.cert_pem

    @property
    def node_dir(self) -> Path:
        """Files the shards' kcp reads: the namespace's folder of the node, which the slots see."""
        return self.stack.workload_root / "fleet"

    def _masters(self, name: str) -> Issued:
        # system:masters, as sharded-test-server gives the front-proxy and the shards to each other
        return self.client_ca.client(name, "system:masters")

    # --- the shards ---

    def shard_args(self) -> list[str]:
        """extraArgs of every shard of the fleet (the operator reserves none of these flags)."""
        d = self.node_dir
        return [
            f"--client-ca-file={d / 'client-ca.crt'}",
            f"--requestheader-client-ca-file={d / 'requestheader-ca.crt'}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--tls-sni-cert-key={d / 'sni.crt'},{d / 'sni.key'}:{SNI_NAME}",
            f"--logical-cluster-admin-kubeconfig={d / 'logical-cluster-admin.kubeconfig'}",
            f"--external-logical-cluster-admin-kubeconfig={d / 'external-logical-cluster-admin.kubeconfig'}",
        ]

    def manifest(self, name: str, kcp: dict[str, str]) -> dict[str, Any]:
        """A shard of the fleet on `kcp` ({version, binary})."""
        shard: dict[str, Any] = {
            "name": name,
            "root": name == self.root,
            "cacheKubeconfigSecretRef": {"name": CACHE_SECRET},
        }
        if name != self.root:
            shard |= {
                "rootShardKubeconfigSecretRef": {"name": ROOT_SHARD_SECRET},
                "rootShardRef": {"name": self.root},
            }
        # The first probes wait for the front-proxy, which waits for every shard's root material.
        roll = {"probeTimeoutSeconds": 300}
        # No shutdown delay: kcp closes its quota admission at SIGTERM yet serves on through the delay, so a
        # create that kcp's front-proxy sends on its connection to the old kcp in that window fails (one per
        # shard roll with 2 s; fewer with 0, but not none). The front has flipped before the old kcp stops,
        # so the delay buys nothing.
        manifest = self.stack.manifest(
            name,
            self.ports[name],
            kcp=kcp,
            shard=shard,
            extraArgs=self.shard_args(),
            roll=roll,
            shutdownDelaySeconds=SHUTDOWN_DELAY_SECONDS,
        )
        return manifest

    async def apply(self, kcp: dict[str, str]) -> None:
        """Every shard on `kcp`, in one `kubectl apply` of one file, as a person (or Argo CD) does."""
        path = self.workdir / "fleet.yaml"
        path.write_text(yaml.safe_dump_all([self.manifest(name, kcp) for name in self.shards]))
        await asyncio.to_thread(self.stack.kubectl, "apply", "-f", str(path))

    def _write_node_files(self) -> None:
        d = self.node_dir
        d.mkdir(parents=True, exist_ok=True)
        (d / "client-ca.crt").write_bytes(self.client_ca.cert_pem)
        (d / "requestheader-ca.crt").write_bytes(self.header_ca.cert_pem)
        self.serving_ca.serving("fleet-shard", names=(SNI_NAME,)).write(d / "sni.crt", d / "sni.key")
        # The scheduler replaces the server with the chosen shard's base URL; the server name stays.
        direct = self.client_ca.client("logical-cluster-admin", LOGICAL_CLUSTER_ADMIN)
        write_private(
            d / "logical-cluster-admin.kubeconfig",
            kubeconfig(self.front(self.root), self.ca_pem, direct, server_name=SNI_NAME),
        )
        external = self.client_ca.client("external-logical-cluster-admin", EXTERNAL_LOGICAL_CLUSTER_ADMIN)
        write_private(
            d / "external-logical-cluster-admin.kubeconfig", kubeconfig(self.url, self.ca_pem, external)
        )

    async def _create_secrets(self) -> None:
        """The cache server's kubeconfig (every shard) and the root shard's (non-root shards up to kcp v0.32,
        which read its `shard-base` context)."""
        cache = kubeconfig(f"https://127.0.0.1:{self.cache_port}", self.ca_pem, self._masters("fleet-cache"))
        root = kubeconfig(
            self.front(self.root),
            self.ca_pem,
            self._masters("fleet-shard"),
            context="shard-base",
            server_name=SNI_NAME,
        )
        for name, data in ((CACHE_SECRET, cache), (ROOT_SHARD_SECRET, root)):
            meta = {"name": name, "namespace": self.stack.namespace}
            body = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": meta,
                "data": {"kubeconfig": _b64(data)},
            }
            await self.stack.api.create(SECRETS, self.stack.namespace, body)

    async def start(self, kcp: dict[str, str]) -> None:
        """The whole fleet on `kcp`, every shard Ready and kcp's front-proxy serving."""
        self._write_node_files()
        await self._start_cache_server()
        await self._create_secrets()
        await self.apply(kcp)  # the non-root shards wait for the root to serve (WaitingForRootShard)
        cas = [await self.shard_ca(name) for name in self.shards]
        await self._start_front_proxy(cas)
        await asyncio.gather(
            *(scenario.wait_ready(self.stack, n, timeout=SHARD_TIMEOUT) for n in self.shards)
        )

    async def shard_ca(self, name: str) -> bytes:
        """The shard's own CA (its kcp's self-signed one), once its first slot uploaded its root material."""
        admin = await wait_for(
            f"shard {name}'s root material", lambda: self.stack.shard_admin(name), SHARD_TIMEOUT
        )
        return admin.ca_pem

    async def shard_admin_token(self, name: str) -> tuple[str, bytes]:
        """The shard-admin token and the shard's CA, for a client of the shard's own front."""
        admin = await self.stack.shard_admin(name)
        return admin.token, admin.ca_pem

    # --- the host processes ---

    def _privileged_client(self) -> httpx.AsyncClient:
        """A system:masters client of the cache server and the front-proxy (their own CA)."""
        d = self.workdir
        self._masters("fleet-test").write(d / "test-client.crt", d / "test-client.key")
        tls = ssl.create_default_context(cadata=self.ca_pem.decode())
        tls.load_cert_chain(d / "test-client.crt", d / "test-client.key")
        return httpx.AsyncClient(verify=tls, timeout=5)

    async def _ready(self, daemon: Daemon, url: str) -> None:
        async with self._privileged_client() as http:

            async def ready() -> bool:
                return (await http.get(f"{url}/readyz")).status_code == 200

            await daemon.wait_ready("/readyz", ready, START_TIMEOUT)

    async def cache_view(self) -> dict[str, Counter[str]]:
        """What the cache server holds, per kind: how many objects each shard replicated to it."""
        kinds = {
            "apiexports": "apis.kcp.io/v1alpha1",
            "workspacetypes": "tenancy.kcp.io/v1alpha1",
            "shards": "core.kcp.io/v1alpha1",
            "logicalclusters": "core.kcp.io/v1alpha1",
        }
        view: dict[str, Counter[str]] = {}
        async with self._privileged_client() as http:
            for kind, group in kinds.items():
                url = f"https://127.0.0.1:{self.cache_port}/shards/*/clusters/*/apis/{group}/{kind}"
                items = (await http.get(url)).raise_for_status().json().get("items") or []
                view[kind] = Counter(
                    i["metadata"].get("annotations", {}).get("kcp.io/shard", "?") for i in items
                )
        return view

    async def _start_cache_server(self) -> None:
        """kcp's cache server; its store a prefix of the shards' etcd under the namespace's (the namespace's
        clean-up removes it)."""
        d = self.workdir / "cache-server"
        d.mkdir(parents=True, exist_ok=True)
        self.serving_ca.serving("cache-server").write(d / "apiserver.crt", d / "apiserver.key")
        (d / "client-ca.crt").write_bytes(self.client_ca.cert_pem)
        argv = [
            str(TOOLS_BIN / "cache-server"),
            f"--root-directory={d}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.cache_port}",
            f"--etcd-servers={self.stack.info.etcd_endpoint}",
            f"--etcd-prefix=/shards/{self.stack.namespace}/fleet-cache-server",
            f"--client-ca-file={d / 'client-ca.crt'}",
            f"--tls-cert-file={d / 'apiserver.crt'}",
            f"--tls-private-key-file={d / 'apiserver.key'}",
        ]
        self.cache = Daemon("cache-server", argv, self.workdir / "cache-server.log")
        self.cache.start()
        await self._ready(self.cache, f"https://127.0.0.1:{self.cache_port}")

    async def _start_front_proxy(self, shard_cas: list[bytes]) -> None:
        """kcp's front-proxy; `shard_cas` are the shards' own CAs, which its connections to them check."""
        d = self.workdir / "front-proxy"
        d.mkdir(parents=True, exist_ok=True)
        self.serving_ca.serving("kcp-front-proxy").write(d / "apiserver.crt", d / "apiserver.key")
        self.header_ca.client("kcp-front-proxy").write(d / "requestheader.crt", d / "requestheader.key")
        (d / "client-ca.crt").write_bytes(self.client_ca.cert_pem)
        (d / "shards-ca.crt").write_bytes(b"".join(shard_cas))
        shards_ca, admin, root = b"".join(shard_cas), self._masters("shard-admin"), self.front(self.root)
        write_private(d / "root.kubeconfig", kubeconfig(root, shards_ca, admin))
        # its server is replaced by each Shard's base URL (pkg/proxy/server.go), and with it any server name
        write_private(d / "shards.kubeconfig", kubeconfig(root, shards_ca, admin))
        # A request goes to its workspace's shard (the index), not to this backend, which must be given.
        mapping = {"path": "/clusters/", "backend": root, "backend_server_ca": str(d / "shards-ca.crt")}
        mapping |= {
            "proxy_client_cert": str(d / "requestheader.crt"),
            "proxy_client_key": str(d / "requestheader.key"),
        }
        (d / "mapping.yaml").write_text(yaml.safe_dump([mapping]))
        write_private(d / "tokens.csv", f'{self.token},kcp-admin,kcp-admin,"{KCP_ADMIN_GROUP}"\n'.encode())
        argv = [
            str(TOOLS_BIN / "kcp-front-proxy"),
            "--bind-address=127.0.0.1",
            f"--secure-port={self.proxy_port}",
            f"--root-directory={d}",
            f"--mapping-file={d / 'mapping.yaml'}",
            f"--root-kubeconfig={d / 'root.kubeconfig'}",
            f"--shards-kubeconfig={d / 'shards.kubeconfig'}",
            f"--client-ca-file={d / 'client-ca.crt'}",
            f"--token-auth-file={d / 'tokens.csv'}",
            f"--tls-cert-file={d / 'apiserver.crt'}",
            f"--tls-private-key-file={d / 'apiserver.key'}",
            "--v=2",
        ]
        self.proxy = Daemon("kcp-front-proxy", argv, self.workdir / "kcp-front-proxy.log")
        self.proxy.start()
        await self._ready(self.proxy, self.url)

    async def stop(self) -> None:
        for daemon in (self.proxy, self.cache):
            if daemon is not None:
                await daemon.astop()

    # --- the fleet's clients ---

    def client(self) -> httpx.AsyncClient:
        """kcp-admin through the front-proxy."""
        return kube_client(self.url, self.token, self.ca_pem)

    async def shard_objects(self) -> dict[str, tuple[str, str]]:
        """The root workspace's Shard objects, through the front-proxy: name -> (baseURL, resourceVersion)."""
        async with self.client() as http:
            listed = (await http.get(SHARDS)).raise_for_status().json()
        return {
            s["metadata"]["name"]: (s["spec"]["baseURL"], s["metadata"]["resourceVersion"])
            for s in listed["items"]
        }

    async def workspace(self, name: str, shard: str, timeout: float = 180) -> dict[str, Any]:
        """A workspace in root placed on `shard` (kcp labels each Shard object `name: <shard>`), Ready."""
        spec = {"location": {"selector": {"matchLabels": {"name": shard}}}}
        body = {
            "apiVersion": "tenancy.kcp.io/v1alpha1",
            "kind": "Workspace",
            "metadata": {"name": name},
            "spec": spec,
        }
        async with self.client() as http:
            (await http.post(WORKSPACES, json=body)).raise_for_status()

            async def ready() -> dict[str, Any] | None:
                ws: dict[str, Any] = (await http.get(f"{WORKSPACES}/{name}")).raise_for_status().json()
                return ws if (ws.get("status") or {}).get("phase") == "Ready" else None

            return await wait_for(f"workspace {name} on shard {shard} Ready", ready, timeout, interval=0.5)
