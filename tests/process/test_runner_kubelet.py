"""The workload runner as the kubelet of the real control plane: its Node and Lease, and the identity it
gives each pod (a token of the pod's ServiceAccount, bound to the pod, in a 0600 kubeconfig)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import textwrap
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kcpshard.k8s.api import PODS, ApiClient, ApiError, ResourceRef
from kcpshard_testkit.controlplane import ControlPlane
from kcpshard_testkit.identity import SERVICEACCOUNTS
from kcpshard_testkit.kubectl import kubectl_binary
from kcpshard_testkit.runner import WorkloadRunner
from kcpshard_testkit.runner.kubelet import LEASE_NAMESPACE, NODE_LEASES, NODES
from kcpshard_testkit.runner.volumes import pod_dir_name
from kcpshard_testkit.waiting import wait_for

PY = sys.executable
NS = "default"
NODE = "local-node"
ROLES = ResourceRef("rbac.authorization.k8s.io", "v1", "roles")
ROLEBINDINGS = ResourceRef("rbac.authorization.k8s.io", "v1", "rolebindings")

pytestmark = pytest.mark.timeout(180)


@dataclass
class Kubelet:
    api: ApiClient
    runner: WorkloadRunner
    sandbox: Path
    kubeconfig: Path  # the admin's


@pytest.fixture
async def kubelet(tmp_path: Path) -> AsyncIterator[Kubelet]:
    async with (
        ControlPlane(tmp_path / "controlplane") as plane,
        ApiClient.from_kubeconfig(plane.admin_kubeconfig) as api,
    ):
        runner = WorkloadRunner(api, tmp_path / "sandbox", NODE, kubelet_only=True, heartbeat=0.2)
        task = asyncio.create_task(runner.run())
        try:
            await asyncio.wait_for(runner.ready.wait(), 30)
            yield Kubelet(api, runner, tmp_path / "sandbox", Path(plane.admin_kubeconfig))
        finally:
            await runner.stop()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def pod(name: str, script: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "x", "command": [PY, "-c", script]}],
            **spec,
        },
    }


async def finished(api: ApiClient, name: str) -> dict[str, Any]:
    async def done() -> dict[str, Any] | None:
        got = await api.get(PODS, NS, name)
        return got if (got.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None

    return await wait_for(f"pod {name} to finish", done, timeout=60)


def pod_dir(sandbox: Path, obj: dict[str, Any]) -> Path:
    return sandbox / "pods" / pod_dir_name(obj)


# What the pod's program does with the identity it was given: who am I, may I list pods, secrets.
WHOAMI = textwrap.dedent(
    """
    import asyncio, json, os
    from kcpshard.k8s.api import ApiClient, ApiError, PODS, SECRETS

    async def main():
        out = {"kubeconfig": os.environ["KUBECONFIG"]}
        async with ApiClient.from_kubeconfig() as api:
            review = await api.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
            out["user"] = review["status"]["userInfo"]["username"]
            out["extra"] = review["status"]["userInfo"].get("extra", {})
            for ref, what in ((PODS, "pods"), (SECRETS, "secrets")):
                try:
                    await api.list(ref, "default")
                    out[what] = 200
                except ApiError as exc:
                    out[what] = exc.status
        print("RESULT=" + json.dumps(out))

    asyncio.run(main())
    """
)


def result_of(log: Path) -> dict[str, Any]:
    line = next(x for x in log.read_text().splitlines() if x.startswith("RESULT="))
    return dict(json.loads(line.removeprefix("RESULT=")))


async def test_node_is_registered_ready_and_its_lease_is_renewed(kubelet: Kubelet) -> None:
    node = await kubelet.api.get(NODES, None, NODE)
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and ready["reason"] == "KubeletReady"
    assert {"type": "InternalIP", "address": "127.0.0.1"} in node["status"]["addresses"]
    lease = await kubelet.api.get(NODE_LEASES, LEASE_NAMESPACE, NODE)
    assert lease["spec"]["holderIdentity"] == NODE
    assert lease["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]
    first = lease["spec"]["renewTime"]

    async def renewed() -> bool:
        again = await kubelet.api.get(NODE_LEASES, LEASE_NAMESPACE, NODE)
        return bool(again["spec"]["renewTime"] != first)

    await wait_for("the node lease to be renewed", renewed, timeout=30)


async def test_pod_acts_as_its_service_account_bound_to_the_pod(kubelet: Kubelet) -> None:
    api = kubelet.api
    await api.create(SERVICEACCOUNTS, NS, {"metadata": {"name": "reader"}})
    rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}
    await api.create(ROLES, NS, {"metadata": {"name": "pod-reader"}, "rules": [rule]})
    binding = {
        "metadata": {"name": "reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": NS}],
    }
    await api.create(ROLEBINDINGS, NS, binding)
    created = await api.create(PODS, NS, pod("who", WHOAMI, serviceAccountName="reader"))
    done = await finished(api, "who")
    assert done["status"]["phase"] == "Succeeded", done["status"]

    folder = pod_dir(kubelet.sandbox, created)
    result = result_of(folder / "main.log")
    assert result["user"] == "system:serviceaccount:default:reader"
    # bound to this pod, as a kubelet's projected token is
    assert result["extra"]["authentication.kubernetes.io/pod-name"] == ["who"]
    assert result["extra"]["authentication.kubernetes.io/pod-uid"] == [created["metadata"]["uid"]]
    assert result["pods"] == 200  # granted by the Role
    assert result["secrets"] == 403  # not granted: RBAC refuses it
    kubeconfig = Path(result["kubeconfig"])
    assert kubeconfig == folder / "serviceaccount" / "kubeconfig"
    for secret in (kubeconfig, folder / "serviceaccount" / "token"):
        assert secret.stat().st_mode & 0o777 == 0o600
    token = (folder / "serviceaccount" / "token").read_text()
    assert token not in (folder / "main.log").read_text()

    # Once the pod is gone, its token is refused.
    async with ApiClient.from_kubeconfig(kubeconfig) as as_pod:
        await as_pod.list(PODS, NS)
        await api.delete(PODS, NS, "who")

        async def refused() -> bool:
            try:
                await as_pod.list(PODS, NS)
            except ApiError as exc:
                return exc.status == 401
            return False

        await wait_for("the deleted pod's token to be refused", refused, timeout=30)


async def test_missing_service_account_keeps_the_pod_waiting_until_it_exists(kubelet: Kubelet) -> None:
    api = kubelet.api
    await api.create(PODS, NS, pod("later", "print('ran')", serviceAccountName="later"))

    async def waiting() -> str | None:
        got = await api.get(PODS, NS, "later")
        for status in (got.get("status") or {}).get("containerStatuses") or []:
            message = ((status.get("state") or {}).get("waiting") or {}).get("message")
            if message:
                return str(message)
        return None

    message = await wait_for("the pod to wait for its service account", waiting, timeout=30)
    assert 'serviceaccount "later" not found' in message
    await api.create(SERVICEACCOUNTS, NS, {"metadata": {"name": "later"}})
    assert (await finished(api, "later"))["status"]["phase"] == "Succeeded"


@pytest.mark.parametrize(
    "spec",
    [
        {"serviceAccountName": "default", "automountServiceAccountToken": False},  # opts out
        {},  # names no account: without the ServiceAccount admission plugin nothing sets one
    ],
)
async def test_no_token_for_a_pod_without_an_account_to_act_as(
    kubelet: Kubelet, spec: dict[str, Any]
) -> None:
    script = "import os; print('KUBECONFIG=' + os.environ.get('KUBECONFIG', 'unset'))"
    created = await kubelet.api.create(PODS, NS, pod("none", script, **spec))
    assert (await finished(kubelet.api, "none"))["status"]["phase"] == "Succeeded"
    folder = pod_dir(kubelet.sandbox, created)
    assert "KUBECONFIG=unset" in (folder / "main.log").read_text()
    assert not (folder / "serviceaccount").exists()


async def test_kubectl_logs_reads_a_pods_output_through_the_api_server(kubelet: Kubelet) -> None:
    """The API server asks the runner's kubelet endpoint, as it asks a kubelet (`kubectl logs`)."""
    script = "import sys, time\nfor i in range(5): print(f'line {i}', flush=True)\ntime.sleep(600)"
    await kubelet.api.create(PODS, NS, pod("talker", script))

    async def running() -> dict[str, Any] | None:
        got = await kubelet.api.get(PODS, NS, "talker")
        return got if (got.get("status") or {}).get("phase") == "Running" else None

    await wait_for("pod talker running", running, timeout=60)

    async def kubectl_logs(*args: str) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            kubectl_binary(),
            "logs",
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "KUBECONFIG": str(kubelet.kubeconfig)},
        )
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=30)
        return proc.returncode or 0, out.decode()

    async def all_lines() -> str | None:
        code, out = await kubectl_logs("talker", "-n", NS)
        return out if code == 0 and "line 4" in out else None

    out = await wait_for("kubectl logs to show every line", all_lines, timeout=30)
    assert out.splitlines() == [f"line {i}" for i in range(5)], out
    code, out = await kubectl_logs("talker", "-n", NS, "--tail=2")
    assert (code, out.splitlines()) == (0, ["line 3", "line 4"]), out
    code, out = await kubectl_logs("nobody", "-n", NS)
    assert code != 0 and 'pods "nobody" not found' in out, out
