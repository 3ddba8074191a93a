"""The real-etcd helper: free loopback ports, the v3 JSON gateway, no leftovers after stop."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from kcpshard_testkit import etcd as etcd_mod
from kcpshard_testkit.etcd import EtcdError, EtcdServer


def test_start_serve_stop(tmp_path: Path) -> None:
    server = EtcdServer(tmp_path, name="one")
    server.start_sync()
    try:
        assert server.endpoint.startswith("http://127.0.0.1:")
        pid = server.pid
        assert pid is not None
        r = httpx.post(f"{server.endpoint}/v3/kv/put", json={"key": "YQ==", "value": "Yg=="})
        assert r.status_code == 200
        got = httpx.post(f"{server.endpoint}/v3/kv/range", json={"key": "YQ=="}).json()
        assert got["kvs"][0]["value"] == "Yg=="
        assert (tmp_path / "one.data").is_dir()
    finally:
        server.stop_sync()
    assert not Path(f"/proc/{pid}").exists()
    server.stop_sync()  # idempotent


async def test_async_context_manager(tmp_path: Path) -> None:
    async with EtcdServer(tmp_path) as server:
        async with httpx.AsyncClient() as c:
            assert (await c.get(f"{server.endpoint}/health")).json()["health"] == "true"
        pid = server.pid
    assert not _alive(pid)


def test_missing_binary_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ETCD_BINARY", str(tmp_path / "no-etcd"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("KCPSHARD_TOOLS_BIN", str(tmp_path))
    monkeypatch.setattr(etcd_mod, "ETCD_BINARY", str(tmp_path / "no-debian-etcd"))
    with pytest.raises(EtcdError, match=r"etcd not found: run `make tools` \(etcd 3.6\) or install"):
        EtcdServer(tmp_path).start_sync()
    assert os.environ["PATH"] == str(tmp_path)


def _alive(pid: int | None) -> bool:
    return pid is not None and os.path.exists(f"/proc/{pid}")
