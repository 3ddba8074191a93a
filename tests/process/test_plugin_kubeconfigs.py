"""`kubectl kcpshard` with kubeconfigs as people have them, against the REAL kube-apiserver of the test kit:
a user whose credential comes from an exec plugin (a client certificate of the control plane's CA over
client.authentication.k8s.io/v1; a ServiceAccount token from the TokenRequest API over v1beta1), and
`KUBECONFIG=a:b` with the context in the second file; `--context`, `--kubeconfig` and `-n` honoured. The
real kubectl, with the same files, is the reference: the same identity, the same context, the same shards.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from kcpshard.k8s.api import KCPSHARDS, KCPSLOTS, NAMESPACES, ApiClient, ApiError
from kcpshard_testkit.controlplane import ControlPlane
from kcpshard_testkit.identity import SERVICEACCOUNTS, request_token
from kcpshard_testkit.kubectl import kubectl
from kcpshard_testkit.pki import write_private
from kcpshard_testkit.stack import shard_manifest
from kubeconfigs import cluster, exec_user, runs, write_kubeconfig, write_plugin

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]

BIN = Path(sys.executable).parent
KUBECTL = str(BIN / "kubectl")
CRD_DIR = Path(__file__).resolve().parents[2] / "crds"
CRDS = (CRD_DIR / "kcpshards.yaml", CRD_DIR / "kcpslots.yaml")
DECOY = "https://127.0.0.1:9"  # nothing listens there
READER = "system:serviceaccount:default:plugin-reader"
RBAC = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kcpshard-reader}
rules:
  - apiGroups: [kcpshard.dev]
    resources: [kcpshards, kcpslots]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: plugin-reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kcpshard-reader}
subjects: [{kind: ServiceAccount, name: plugin-reader, namespace: default}]
"""


@dataclass
class Result:
    code: int
    out: str
    err: str


@dataclass
class Cluster:
    dir: Path
    cert_config: Path  # exec v1, a client certificate; context namespace "team"
    a: Path  # a decoy cluster and context, no current-context
    b: Path  # exec v1beta1, a ServiceAccount token; context "reader" (namespace "team"), the current one
    runs: Path  # the plugin's run counter

    async def run(self, program: str, *args: str, **env: str) -> Result:
        """`kubectl <args>` (`kcpshard ...` runs the plugin from PATH) with `env` over a clean environment."""
        variables = {
            **{k: v for k, v in os.environ.items() if k != "KUBECONFIG"},
            "HOME": str(self.dir / "home"),
            "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")]),
            **env,
        }
        proc = await asyncio.create_subprocess_exec(
            program, *args, env=variables, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        async with asyncio.timeout(60):
            out, err = await proc.communicate()
        return Result(proc.returncode or 0, out.decode(), err.decode())

    async def plugin(self, *args: str, **env: str) -> Result:
        return await self.run(KUBECTL, "kcpshard", *args, **env)

    async def whoami(self, **env: str) -> tuple[str, str]:
        """Who the real kubectl and this project's ApiClient are, with the same kubeconfig (in `env`)."""
        kubectl_says = await self.run(
            KUBECTL, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}", **env
        )
        assert kubectl_says.code == 0, kubectl_says.err
        script = (
            "import asyncio, json\nfrom kcpshard.k8s.api import ApiClient\n"
            "async def main():\n"
            "    async with await ApiClient.open() as api:\n"
            "        r = await api.request('POST', '/apis/authentication.k8s.io/v1/selfsubjectreviews',"
            " body={'apiVersion': 'authentication.k8s.io/v1', 'kind': 'SelfSubjectReview'})\n"
            "    print(json.dumps(r['status']['userInfo']['username']))\n"
            "asyncio.run(main())\n"
        )
        ours = await self.run(sys.executable, "-c", script, **env)
        assert ours.code == 0, ours.err
        return kubectl_says.out, json.loads(ours.out)


async def caches_ready(api: ApiClient) -> None:
    """Until a new CRD's watch cache is up the API server answers 429 "storage is (re)initializing"; kubectl
    retries that (Retry-After), the plugin's client does not."""
    async with asyncio.timeout(60):
        while True:
            try:
                for ref in (KCPSHARDS, KCPSLOTS):
                    await api.list(ref, "team", label_selector="kcpshard.dev/shard=beta")
                return
            except ApiError as exc:
                if exc.status != 429:
                    raise
            await asyncio.sleep(0.2)


def rows(text: str) -> list[list[str]]:
    return [line.split()[:2] for line in text.splitlines()]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def real(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    work = tmp_path_factory.mktemp("kubeconfigs")
    (work / "home").mkdir()

    async def install(plane: ControlPlane) -> None:
        (work / "rbac.yaml").write_text(RBAC)
        files = [arg for path in (*CRDS, work / "rbac.yaml") for arg in ("-f", str(path))]
        await kubectl(plane.admin_kubeconfig, "apply", *files)
        names = [f"crd/{path.stem}.kcpshard.dev" for path in CRDS]
        await kubectl(plane.admin_kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", *names)

    async with ControlPlane(work / "cp") as plane:
        await install(plane)
        assert plane.ca is not None
        async with ApiClient.from_kubeconfig(plane.admin_kubeconfig) as admin:
            await admin.create(
                NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}
            )
            for name, ns, port in (("root", "default", 6443), ("beta", "team", 6444)):
                body = shard_manifest(name, etcd="http://127.0.0.1:1", front_port=port, namespace=ns)
                await admin.create(KCPSHARDS, ns, body)
            account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "plugin-reader"}}
            await admin.create(SERVICEACCOUNTS, "default", account)
            token = await request_token(admin, "default", "plugin-reader", seconds=600)
            await caches_ready(admin)
        write_private(work / "token", token.value.encode())
        plane.ca.client("exec-cert-user", "system:masters").write(work / "tls.crt", work / "tls.key")
        plugin = write_plugin(work / "bin")
        counter = work / "runs"
        real_cluster = cluster(plane.url, plane.ca_path.read_bytes())
        cert_user = exec_user(
            plugin,
            "v1",
            PLUGIN_RUNS=str(counter),
            PLUGIN_CERT=str(work / "tls.crt"),
            PLUGIN_KEY=str(work / "tls.key"),
        )
        token_user = exec_user(
            plugin, "v1beta1", PLUGIN_RUNS=str(counter), PLUGIN_TOKEN_FILE=str(work / "token")
        )
        yield Cluster(
            dir=work,
            cert_config=write_kubeconfig(
                work / "cert.kubeconfig",
                clusters={"real": real_cluster},
                users={"cert": cert_user},
                contexts={"cert": {"cluster": "real", "user": "cert", "namespace": "team"}},
                current="cert",
            ),
            a=write_kubeconfig(
                work / "a" / "config",
                clusters={"decoy": cluster(DECOY)},
                users={"decoy": {"token": "decoy-token"}},
                contexts={"decoy": {"cluster": "decoy", "user": "decoy"}},
            ),
            b=write_kubeconfig(
                work / "b" / "config",
                clusters={"real": real_cluster},
                users={"reader": token_user},
                contexts={"reader": {"cluster": "real", "user": "reader", "namespace": "team"}},
                current="reader",
            ),
            runs=counter,
        )


async def test_an_exec_user_with_a_client_certificate(real: Cluster) -> None:
    env = {"KUBECONFIG": str(real.cert_config)}
    before = runs(real.runs)
    every = await real.plugin("list", "-A", **env)
    assert every.code == 0, every.err
    assert rows(every.out) == [["NAMESPACE", "NAME"], ["default", "root"], ["team", "beta"]]
    assert runs(real.runs) == before + 1  # one plugin run per command: the credential is cached
    mine = await real.plugin("list", **env)  # the context's namespace
    assert rows(mine.out) == [["NAME", "STATUS"], ["beta", "Progressing"]], mine.err
    status = await real.plugin("status", "beta", **env)
    assert status.code == 0 and "beta" in status.out, status.err
    other = await real.plugin("status", "root", "-n", "default", **env)
    assert other.code == 0 and "root" in other.out, other.err
    missing = await real.plugin("status", "root", **env)  # root is not in the context's namespace
    assert (missing.code, missing.err) == (
        1,
        'Error from server (NotFound): kcpshards.kcpshard.dev "root" not found\n',
    )
    # the reference: kubectl sees the same user and the same shards
    assert await real.whoami(**env) == ("exec-cert-user", "exec-cert-user")
    names = await real.run(KUBECTL, "get", "kcpshards", "-A", "-o", "name", **env)
    assert sorted(names.out.split()) == ["kcpshard.kcpshard.dev/beta", "kcpshard.kcpshard.dev/root"], (
        names.err
    )


async def test_kubeconfig_files_merged_the_context_in_the_second(real: Cluster) -> None:
    env = {"KUBECONFIG": f"{real.a}{os.pathsep}{real.b}"}
    current = await real.run(KUBECTL, "config", "current-context", **env)
    assert current.out.strip() == "reader", current.err  # kubectl picks the same context
    every = await real.plugin("list", "-A", **env)
    assert every.code == 0, every.err
    assert rows(every.out)[1:] == [["default", "root"], ["team", "beta"]]
    status = await real.plugin("status", "beta", **env)
    assert status.code == 0 and "beta" in status.out, status.err
    assert await real.whoami(**env) == (READER, READER)
    # --context: the first file's decoy, for the plugin and for kubectl
    decoy = await real.plugin("list", "--context", "decoy", **env)
    assert decoy.code == 1 and decoy.err.startswith(f"error: cannot reach {DECOY}: "), decoy.err
    assert (await real.run(KUBECTL, "get", "kcpshards", "--context", "decoy", **env)).code != 0
    # --kubeconfig: that one file only, whatever $KUBECONFIG says
    alone = await real.plugin("list", "-A", "--kubeconfig", str(real.b), KUBECONFIG=str(real.dir / "absent"))
    assert rows(alone.out)[1:] == [["default", "root"], ["team", "beta"]], alone.err
    no_current = await real.plugin("list", "--kubeconfig", str(real.a))
    assert no_current.code == 1 and "no current-context set" in no_current.err
    # -n before the sub-command too
    named = await real.plugin("-n", "default", "status", "root", **env)
    assert named.code == 0 and "root" in named.out, named.err
