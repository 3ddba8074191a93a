"""The local workload runner with real processes, in both of its modes: on the emulated API server it
also plays the Job and Deployment controllers; on the real control plane it is the kubelet only and
kube-controller-manager's controllers make the pods (through ReplicaSets for Deployments)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import inspect
import socket
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kcpshard.k8s.api import DEPLOYMENTS, JOBS, PODS, SECRETS, ApiClient, NotFound
from kcpshard_testkit.apiserver import EmulatedApiServer
from kcpshard_testkit.controlplane import ControlPlane
from kcpshard_testkit.runner import WorkloadRunner

PY = sys.executable
NS = "default"


@dataclass
class Env:
    api: ApiClient
    runner: WorkloadRunner
    sandbox: Path
    tmp: Path
    real: bool


@contextlib.asynccontextmanager
async def _server(kind: str, tmp_path: Path) -> AsyncIterator[tuple[ApiClient, dict[str, str]]]:
    """An admin client of the API server, and the env the runner gives pods besides their identity."""
    async with contextlib.AsyncExitStack() as stack:
        if kind == "real":
            plane = await stack.enter_async_context(ControlPlane(tmp_path / "controlplane"))
            kubeconfig, extra_env = plane.admin_kubeconfig, {}
        else:
            srv = await stack.enter_async_context(EmulatedApiServer(tmp_path / "api"))
            kubeconfig = srv.kubeconfig_path
            extra_env = {"KUBECONFIG": str(kubeconfig)}
        yield await stack.enter_async_context(ApiClient.from_kubeconfig(kubeconfig)), extra_env


@pytest.fixture(params=["emulated", "real"])
async def env(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Env]:
    real = request.param == "real"
    async with _server(request.param, tmp_path) as (api, extra_env):
        sandbox = tmp_path / "sandbox"
        runner = WorkloadRunner(api, sandbox, extra_env=extra_env, shutdown_grace_cap=5.0, kubelet_only=real)
        task = asyncio.create_task(runner.run())
        try:
            await asyncio.wait_for(runner.ready.wait(), 30)
            yield Env(api, runner, sandbox, tmp_path, real)
        finally:
            await runner.stop()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def until(probe: Callable[[], Any], what: str, deadline: float = 20.0) -> Any:
    """Poll ``probe`` (sync or async) until it returns something truthy; fail after ``deadline`` seconds."""
    end = time.monotonic() + deadline
    while True:
        value = probe()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        assert time.monotonic() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def job_body(name: str, command: list[str], **extra: Any) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {
        "nodeName": "local-node",  # there is no scheduler: the template binds the pods, as the operator's do
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "kcpshard:dev", "command": command}],
    }
    container_extra = extra.pop("container", {})
    pod_spec["containers"][0].update(container_extra)
    pod_spec.update(extra.pop("pod", {}))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"backoffLimit": extra.pop("backoffLimit", 0), "template": {"spec": pod_spec}},
    }


async def job_condition(api: ApiClient, name: str, kind: str) -> dict[str, Any] | None:
    job = await api.get(JOBS, NS, name)
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return job
    return None


async def pods_of(api: ApiClient, selector: str) -> list[dict[str, Any]]:
    return list((await api.list(PODS, NS, label_selector=selector)).get("items") or [])


def container_pid(pod: dict[str, Any]) -> int | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if "running" in (cs.get("state") or {}) and str(cs.get("containerID", "")).startswith("local://"):
            return int(cs["containerID"].removeprefix("local://"))
    return None


async def running_pod(api: ApiClient, selector: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        for pod in await pods_of(api, selector):
            if (pod.get("status") or {}).get("phase") == "Running" and container_pid(pod):
                return pod
        return None

    return await until(probe, f"a running pod for {selector}")


TRAP = textwrap.dedent(
    """
    import os, pathlib, signal, sys, time
    pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))
    def bye(*_):
        pathlib.Path(sys.argv[2]).write_text("got SIGTERM")
        sys.exit(0)
    signal.signal(signal.SIGTERM, bye)
    while True:
        time.sleep(0.1)
    """
)


async def test_job_runs_to_completion_with_env_and_volumes(env: Env) -> None:
    token = base64.b64encode(b"tok-xyz").decode()
    await env.api.create(SECRETS, NS, {"metadata": {"name": "creds"}, "data": {"token": token}})
    script = textwrap.dedent(
        """
        import os, pathlib, sys
        print("TOKEN=" + os.environ["TOKEN"])
        print("POD=" + os.environ["POD_NAME"] + " NS=" + os.environ["POD_NS"])
        print("EXPANDED=" + os.environ["EXPANDED"])
        print("KUBECONFIG_SET=" + str("KUBECONFIG" in os.environ))
        print("SERVICE_HOST_SET=" + str("KUBERNETES_SERVICE_HOST" in os.environ))
        print("FILE=" + pathlib.Path(sys.argv[1]).read_text())
        out = sys.argv[2].split("=", 1)[1]
        pathlib.Path(out).write_text("written")
        """
    )
    body = job_body(
        "hello",
        [PY, "-c", script, "/etc/creds/token", "--out=/var/lib/state/out.txt"],
        container={
            "env": [
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "EXPANDED", "value": "ns=$(POD_NS)"},
            ],
            "volumeMounts": [
                {"name": "creds", "mountPath": "/etc/creds"},
                {"name": "state", "mountPath": "/var/lib/state"},
            ],
        },
        pod={
            # on the real control plane, the identity the pod's KUBECONFIG carries
            "serviceAccountName": "default",
            "volumes": [
                {"name": "creds", "secret": {"secretName": "creds"}},
                {"name": "state", "hostPath": {"path": "/var/lib/kcp-test", "type": "DirectoryOrCreate"}},
            ],
        },
    )
    await env.api.create(JOBS, NS, body)
    job = await until(lambda: job_condition(env.api, "hello", "Complete"), "Job Complete")
    assert job["status"]["succeeded"] == 1
    assert job["status"].get("failed", 0) == 0
    assert job["status"]["completionTime"] and job["status"]["startTime"]

    [pod] = await pods_of(env.api, "job-name=hello")
    assert pod["status"]["phase"] == "Succeeded"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert pod["metadata"]["labels"]["controller-uid"] == job["metadata"]["uid"]
    assert pod["spec"]["nodeName"] == "local-node"
    [cs] = pod["status"]["containerStatuses"]
    assert cs["state"]["terminated"]["exitCode"] == 0
    assert cs["state"]["terminated"]["reason"] == "Completed"

    uid8 = pod["metadata"]["uid"][:8]
    pod_dir = env.sandbox / "pods" / f"{NS}_{pod['metadata']['name']}_{uid8}"
    log = (pod_dir / "main.log").read_text()
    assert "TOKEN=tok-xyz" in log
    assert f"POD={pod['metadata']['name']} NS={NS}" in log
    assert "EXPANDED=ns=default" in log
    assert "KUBECONFIG_SET=True" in log
    assert "SERVICE_HOST_SET=False" in log
    assert "FILE=tok-xyz" in log
    assert (pod_dir / "volumes" / "creds" / "token").read_text() == "tok-xyz"
    assert (
        env.sandbox / "nodes" / "local-node" / "var" / "lib" / "kcp-test" / "out.txt"
    ).read_text() == "written"


async def test_failing_job_with_backoff_limit_zero_fails(env: Env) -> None:
    await env.api.create(JOBS, NS, job_body("boom", [PY, "-c", "import sys; sys.exit(3)"]))
    job = await until(lambda: job_condition(env.api, "boom", "Failed"), "Job Failed")
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert job["status"]["failed"] == 1
    pods = await pods_of(env.api, "job-name=boom")
    assert len(pods) == 1  # backoffLimit 0: no retry
    assert pods[0]["status"]["phase"] == "Failed"
    assert pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3


async def test_job_retries_until_backoff_limit(env: Env) -> None:
    await env.api.create(JOBS, NS, job_body("retry", [PY, "-c", "import sys; sys.exit(1)"], backoffLimit=1))
    # kube-controller-manager's Job controller waits 10 s before the second pod (pod failure back-off).
    job = await until(lambda: job_condition(env.api, "retry", "Failed"), "Job Failed", deadline=60)
    assert job["status"]["failed"] == 2
    assert len(await pods_of(env.api, "job-name=retry")) == 2


async def test_deleting_a_job_sends_sigterm_and_removes_the_pod(env: Env) -> None:
    pidfile, marker = env.tmp / "pid", env.tmp / "marker"
    await env.api.create(JOBS, NS, job_body("long", [PY, "-c", TRAP, str(pidfile), str(marker)]))
    await running_pod(env.api, "job-name=long")
    pid = int(await until(lambda: pidfile.exists() and pidfile.read_text(), "the pid file"))
    await env.api.delete(JOBS, NS, "long", propagation_policy="Background")
    await until(marker.exists, "SIGTERM marker")
    assert marker.read_text() == "got SIGTERM"
    await until(lambda: not alive(pid), "process exit")

    async def pods_gone() -> bool:
        return not await pods_of(env.api, "job-name=long")

    await until(pods_gone, "the pod object to be deleted")


async def test_process_ignoring_sigterm_is_killed_after_grace(env: Env) -> None:
    pidfile = env.tmp / "pid"
    script = (
        "import os, pathlib, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        f"pathlib.Path({str(pidfile)!r}).write_text(str(os.getpid()));"
        "time.sleep(120)"
    )
    body = job_body("stubborn", [PY, "-c", script], pod={"terminationGracePeriodSeconds": 1})
    await env.api.create(JOBS, NS, body)
    pod = await running_pod(env.api, "job-name=stubborn")
    pid = int(await until(lambda: pidfile.exists() and pidfile.read_text(), "pid file"))
    await env.api.delete(PODS, NS, pod["metadata"]["name"])

    async def pod_gone() -> bool:
        try:
            await env.api.get(PODS, NS, pod["metadata"]["name"])
        except NotFound:
            return True
        return False

    await until(pod_gone, "the pod to be deleted after the grace period")
    assert not alive(pid)
    job = await until(lambda: job_condition(env.api, "stubborn", "Failed"), "Job Failed")
    assert job["status"]["failed"] == 1  # a deleted pod counts as failed; backoffLimit 0: no new pod
    assert await pods_of(env.api, "job-name=stubborn") == []


def deployment_body(name: str, command: list[str], **container: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeName": "local-node",
                    "containers": [{"name": "main", "image": "x", "command": command, **container}],
                },
            },
        },
    }


async def test_deployment_restarts_its_crashed_process(env: Env) -> None:
    counter = env.tmp / "count"
    script = f"import pathlib; f = pathlib.Path({str(counter)!r}); f.open('a').write('x')"
    await env.api.create(DEPLOYMENTS, NS, deployment_body("crashy", [PY, "-c", script]))

    async def restarted() -> dict[str, Any] | None:
        for pod in await pods_of(env.api, "app=crashy"):
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            if statuses and statuses[0].get("restartCount", 0) >= 2:
                return pod
        return None

    pod = await until(restarted, "two restarts")
    assert pod["status"]["phase"] == "Running"
    assert len(counter.read_text()) >= 2
    assert len(await pods_of(env.api, "app=crashy")) == 1  # restarted in place, not replaced


async def test_deployment_readiness_probe_and_template_change(env: Env) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = (
        "import http.server as h; "
        f"h.HTTPServer(('127.0.0.1', {port}), h.SimpleHTTPRequestHandler).serve_forever()"
    )
    probe = {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1}
    body = deployment_body(
        "web", [PY, "-c", server], readinessProbe=probe, ports=[{"name": "http", "containerPort": port}]
    )
    await env.api.create(DEPLOYMENTS, NS, body)

    async def ready() -> dict[str, Any] | None:
        dep = await env.api.get(DEPLOYMENTS, NS, "web")
        return dep if (dep.get("status") or {}).get("readyReplicas") == 1 else None

    await until(ready, "the Deployment to be ready")
    [first] = await pods_of(env.api, "app=web")
    conditions = {c["type"]: c["status"] for c in first["status"]["conditions"]}
    assert conditions["Ready"] == "True" and conditions["ContainersReady"] == "True"
    old_pid = container_pid(first)
    assert old_pid is not None

    dep = await env.api.get(DEPLOYMENTS, NS, "web")
    dep["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "V", "value": "2"}]
    await env.api.replace(DEPLOYMENTS, NS, "web", dep)

    async def replaced() -> dict[str, Any] | None:
        pods = await pods_of(env.api, "app=web")
        fresh = [p for p in pods if p["metadata"]["uid"] != first["metadata"]["uid"]]
        if len(pods) == 1 and fresh and (fresh[0].get("status") or {}).get("phase") == "Running":
            return fresh[0]
        return None

    new = await until(replaced, "the pod to be replaced")
    assert new["metadata"]["labels"]["pod-template-hash"] != first["metadata"]["labels"]["pod-template-hash"]
    assert not alive(old_pid)
    await until(ready, "the new pod to be ready")


async def test_missing_secret_keeps_pod_pending_until_it_exists(env: Env) -> None:
    body = job_body(
        "waits",
        [PY, "-c", "import os; print(os.environ['V'])"],
        container={"env": [{"name": "V", "valueFrom": {"secretKeyRef": {"name": "later", "key": "v"}}}]},
    )
    await env.api.create(JOBS, NS, body)

    async def config_error() -> dict[str, Any] | None:
        for pod in await pods_of(env.api, "job-name=waits"):
            for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                if (cs.get("state", {}).get("waiting") or {}).get("reason") == "CreateContainerConfigError":
                    return pod
        return None

    pod = await until(config_error, "CreateContainerConfigError")
    assert pod["status"]["phase"] == "Pending"
    assert 'secret "later" not found' in pod["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
    value = base64.b64encode(b"now").decode()
    await env.api.create(SECRETS, NS, {"metadata": {"name": "later"}, "data": {"v": value}})
    await until(lambda: job_condition(env.api, "waits", "Complete"), "Job Complete")


async def test_container_without_command_fails_the_pod(env: Env) -> None:
    body = job_body("nocmd", [])
    await env.api.create(JOBS, NS, body)
    job = await until(lambda: job_condition(env.api, "nocmd", "Failed"), "Job Failed")
    assert job["status"]["failed"] == 1
    [pod] = await pods_of(env.api, "job-name=nocmd")
    assert pod["status"]["phase"] == "Failed"
    assert "no command" in pod["status"]["message"]


async def test_bare_pod_on_this_node_runs(env: Env) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bare", "namespace": NS},
        "spec": {
            "nodeName": "local-node",
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "x", "command": [PY, "-c", "print('hi')"]}],
        },
    }
    await env.api.create(PODS, NS, pod)

    async def succeeded() -> bool:
        got = await env.api.get(PODS, NS, "bare")
        return (got.get("status") or {}).get("phase") == "Succeeded"

    await until(succeeded, "the bare pod to succeed")


async def test_runner_stop_leaves_no_process(env: Env) -> None:
    pidfile, marker = env.tmp / "pid", env.tmp / "marker"
    await env.api.create(JOBS, NS, job_body("bg", [PY, "-c", TRAP, str(pidfile), str(marker)]))
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
    dep = deployment_body("dep", [PY, "-c", stubborn])
    dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 1
    await env.api.create(DEPLOYMENTS, NS, dep)
    job_pod = await running_pod(env.api, "job-name=bg")
    dep_pod = await running_pod(env.api, "app=dep")
    pids = [container_pid(job_pod), container_pid(dep_pod)]
    assert all(pid and alive(pid) for pid in pids)
    await env.runner.stop()
    assert marker.read_text() == "got SIGTERM"
    for pid in pids:
        assert pid is not None and not alive(pid)


async def test_init_container_runs_first_and_shares_empty_dir(env: Env) -> None:
    write = "import pathlib, sys; pathlib.Path(sys.argv[1]).write_text('from-init')"
    read = "import pathlib, sys; print('READ=' + pathlib.Path(sys.argv[1]).read_text())"
    body = job_body(
        "init",
        [PY, "-c", read, "/scratch/x"],
        container={"volumeMounts": [{"name": "work", "mountPath": "/scratch"}]},
        pod={
            "volumes": [{"name": "work", "emptyDir": {}}],
            "initContainers": [
                {
                    "name": "prep",
                    "image": "x",
                    "command": [PY, "-c", write, "/scratch/x"],
                    "volumeMounts": [{"name": "work", "mountPath": "/scratch"}],
                }
            ],
        },
    )
    await env.api.create(JOBS, NS, body)
    await until(lambda: job_condition(env.api, "init", "Complete"), "Job Complete")
    [pod] = await pods_of(env.api, "job-name=init")
    assert pod["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    uid8 = pod["metadata"]["uid"][:8]
    log = (env.sandbox / "pods" / f"{NS}_{pod['metadata']['name']}_{uid8}" / "main.log").read_text()
    assert "READ=from-init" in log


async def test_exec_readiness_probe_follows_the_command(env: Env) -> None:
    flag = env.tmp / "ready-flag"
    probe = {
        "exec": {
            "command": [PY, "-c", f"import os, sys; sys.exit(0 if os.path.exists({str(flag)!r}) else 1)"]
        },
        "periodSeconds": 1,
        "failureThreshold": 1,
    }
    body = deployment_body("gated", [PY, "-c", "import time; time.sleep(120)"], readinessProbe=probe)
    body["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 1
    await env.api.create(DEPLOYMENTS, NS, body)
    pod = await running_pod(env.api, "app=gated")
    assert not pod["status"]["containerStatuses"][0]["ready"]

    async def ready() -> bool:
        [p] = await pods_of(env.api, "app=gated")
        return bool(p["status"]["containerStatuses"][0]["ready"])

    flag.write_text("")
    await until(ready, "the probe to pass")
