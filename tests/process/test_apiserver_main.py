"""`python -m kcpshard_testkit.apiserver` runs alone and exits cleanly on SIGTERM."""

import asyncio
import contextlib
import os
import signal
import ssl
import sys
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).parent.parent.parent


async def test_module_entry_point(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kcpshard_testkit.apiserver",
        "--dir",
        str(tmp_path / "api"),
        "--crds",
        str(ROOT / "crds"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(30):
            kubeconfig = Path((await proc.stdout.readline()).decode().strip())
        assert kubeconfig == tmp_path / "api" / "kubeconfig"
        config = yaml.safe_load(kubeconfig.read_text())
        assert config["current-context"] == "kcpshard-dev"
        server = config["clusters"][0]["cluster"]["server"]
        token = config["users"][0]["user"]["token"]
        ctx = ssl.create_default_context(cafile=str(tmp_path / "api" / "ca.crt"))
        async with httpx.AsyncClient(verify=ctx, headers={"Authorization": f"Bearer {token}"}) as api:
            resp = await api.get(f"{server}/apis/kcpshard.dev/v1alpha1")
            assert {r["name"] for r in resp.json()["resources"]} >= {"kcpshards", "kcpslots"}
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            code = await proc.wait()
        assert code == 0
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


async def test_module_entry_point_reports_a_bad_crd_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: x}\n"
        "spec: {group: g.dev, names: {plural: xs, kind: X}, scope: Namespaced, versions: []}\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kcpshard_testkit.apiserver",
        "--dir",
        str(tmp_path / "api"),
        "--crds",
        str(bad),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    async with asyncio.timeout(30):
        _, err = await proc.communicate()
    assert proc.returncode == 1
    expected = f'error: {bad}: CustomResourceDefinition.apiextensions.k8s.io "x" is invalid: '
    assert err.decode().strip().splitlines() == [expected + "spec.versions: Required value"]
