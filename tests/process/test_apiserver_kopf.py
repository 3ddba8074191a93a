"""The real kopf (in a subprocess) runs a tiny operator against the emulated API server."""

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from kcpshard_testkit.apiserver import EmulatedApiServer
from kcpshard_testkit.apiserver.testkit import client, wait_for

HERE = Path(__file__).parent
W = "/apis/test.kcpshard.dev/v1/namespaces/default/widgets"
KOPF_FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"


@pytest.fixture
async def srv(tmp_path: Path) -> AsyncIterator[EmulatedApiServer]:
    server = EmulatedApiServer(tmp_path / "api", crd_paths=[HERE / "fixtures" / "widgets.yaml"])
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def api(srv: EmulatedApiServer) -> AsyncIterator[httpx.AsyncClient]:
    async with client(srv) as c:
        yield c


@pytest.fixture
async def kopf_log(srv: EmulatedApiServer, tmp_path: Path) -> AsyncIterator[Path]:
    log = tmp_path / "kopf.log"
    with log.open("wb") as sink:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "kopf",
            "run",
            "--standalone",
            "--all-namespaces",
            "--verbose",
            str(HERE / "kopf_probe_operator.py"),
            env={**os.environ, "KUBECONFIG": str(srv.kubeconfig_path), "HOME": str(tmp_path)},
            stdout=sink,
            stderr=sink,
            start_new_session=True,
        )
    try:
        yield log
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            async with asyncio.timeout(10):
                await proc.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


async def test_kopf_operator_handles_create_update_delete(api: httpx.AsyncClient, kopf_log: Path) -> None:
    body = {
        "apiVersion": "test.kcpshard.dev/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 1},
    }
    assert (await api.post(W, json=body)).status_code == 201

    async def phase(expected: str) -> bool:
        obj = (await api.get(f"{W}/w")).json()
        return obj.get("status", {}).get("phase") == expected and KOPF_FINALIZER in obj["metadata"].get(
            "finalizers", []
        )

    try:
        await wait_for(lambda: phase("created-1"), timeout=30)
        await api.patch(
            f"{W}/w", headers={"Content-Type": "application/merge-patch+json"}, json={"spec": {"size": 2}}
        )
        await wait_for(lambda: phase("updated-2"), timeout=30)
        assert (await api.delete(f"{W}/w")).status_code == 200

        async def removed() -> bool:
            return (await api.get(f"{W}/w")).status_code == 404

        await wait_for(removed, timeout=30)  # kopf ran the delete handler and removed its finalizer
    except TimeoutError:
        pytest.fail("kopf did not act in time; its log:\n" + kopf_log.read_text()[-5000:])

    async def posted() -> bool:  # kopf posts k8s Events about its handlers from a background task
        events = (
            await api.get(
                "/api/v1/namespaces/default/events", params={"fieldSelector": "involvedObject.name=w"}
            )
        ).json()["items"]
        reasons = {e["reason"] for e in events}
        return {"ProbeCreated", "Logging"} <= reasons

    try:
        await wait_for(posted, timeout=30)
    except TimeoutError:
        pytest.fail("kopf posted no Event; its log:\n" + kopf_log.read_text()[-5000:])
    await wait_for(lambda: asyncio.sleep(0, result="probe: deleted w" in kopf_log.read_text()))
