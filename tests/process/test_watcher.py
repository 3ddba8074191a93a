"""The watching client of `make bench` against the stand-in kcp on real etcd, and the stand-in's watch from a
resourceVersion (only changes after it, as kube sends)."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import yaml

from kcpshard_testkit import waiting
from kcpshard_testkit.etcd import EtcdServer
from kcpshard_testkit.fakekcp.process import KcpProcess
from kcpshard_testkit.tcp import free_port
from kcpshard_testkit.watcher import WatchedWrites

# No hold of open watches at shutdown (the stand-in holds them 60 s, as kcp does): the restart test
# restarts kcp under its own watcher, which is what it measures.
FAST = {"KCP_FAKE_RSA_BITS": "2048", "KCP_FAKE_STARTUP_SECONDS": "0.2", "KCP_FAKE_WATCH_HOLD_SECONDS": "0"}
FREE_PORT = ["--secure-port=0", "--experimental-bind-free-port"]
CM = "/clusters/root/api/v1/namespaces/default/configmaps"


async def started(
    kcps: list[KcpProcess], root: Path, etcd: EtcdServer, port: int | None = None
) -> KcpProcess:
    bind = [f"--secure-port={port}"] if port else FREE_PORT
    k = KcpProcess(root, [*bind, f"--etcd-servers={etcd.endpoint}"], FAST)
    kcps.append(k)
    k.start()
    await asyncio.to_thread(k.wait_ready)
    return k


def watcher(k: KcpProcess, rate: float, watch_timeout: int = 300) -> WatchedWrites:
    doc = yaml.safe_load((k.root / "admin.kubeconfig").read_text())
    base = next(c["cluster"] for c in doc["clusters"] if c["name"] == "base")
    ca_pem = base64.b64decode(base["certificate-authority-data"])
    return WatchedWrites(k.url, k.token(), ca_pem, rate=rate, watch_timeout=watch_timeout)


async def test_watcher_sees_every_write_across_watch_timeouts(
    kcps: list[KcpProcess], etcd: EtcdServer, tmp_path: Path
) -> None:
    k = await started(kcps, tmp_path / "root", etcd)
    w = watcher(k, rate=10.0, watch_timeout=1)
    await w.start()

    async def enough() -> bool:  # several streams, each resumed from the last resourceVersion
        return w.report.created >= 25 and w.report.watches >= 3

    await waiting.wait_for("25 writes and 3 watches", enough, timeout=30)
    report = await w.stop()
    assert report.created >= 25 and report.write_failures == 0, report
    assert report.seen == report.created, report
    assert report.missed_by_watch == 0 and report.missed == 0 and report.seen_late == 0, report
    assert report.relists == 0 and report.lists == 1 and report.errors == {}, report
    assert report.max_lag_seconds < 5, report  # the stand-in's watch polls every 0.5 s
    with k.client() as c:  # cleaned up
        names = [i["metadata"]["name"] for i in c.get(CM).json()["items"]]
    assert not [n for n in names if n.startswith(w.prefix)]


async def test_watcher_resumes_when_kcp_restarts_in_place(
    kcps: list[KcpProcess], etcd: EtcdServer, tmp_path: Path
) -> None:
    port = free_port()
    first = await started(kcps, tmp_path / "root", etcd, port)
    w = watcher(first, rate=10.0)
    await w.start()

    async def writes_and_watches(writes: int, watches: int) -> bool:
        return w.report.created >= writes and w.report.watches >= watches

    await waiting.wait_for("writes on the first kcp", lambda: writes_and_watches(10, 1), timeout=30)
    await asyncio.to_thread(first.stop)
    second = await started(kcps, tmp_path / "root", etcd, port)  # same port, root directory and etcd
    assert second.port() == port
    after = w.report.created + 10
    await waiting.wait_for("writes on the second kcp", lambda: writes_and_watches(after, 2), timeout=30)
    report = await w.stop()
    assert report.watches >= 2 and report.longest_gap_seconds > 0 and report.max_lag_seconds > 0, report
    assert report.missed == 0 and report.missed_by_watch == 0, report
    assert report.seen == report.created, report
    # Resumed from the last resourceVersion, not listed again: the stand-in never answers 410 (real kcp
    # does after a restart, its watch cache starting at the current revision).
    assert report.relists == 0 and report.lists == 1, report
    assert not [kind for kind in report.errors if "crashed" in kind], report


def test_stand_in_watch_from_a_resource_version_sends_only_later_changes(
    kcps: list[KcpProcess], etcd: EtcdServer, tmp_path: Path
) -> None:
    k = KcpProcess(tmp_path / "root", [*FREE_PORT, f"--etcd-servers={etcd.endpoint}"], FAST)
    kcps.append(k)
    k.start().wait_ready()
    with k.client() as c:
        for name in ("a", "b"):
            assert c.post(CM, json={"metadata": {"name": name}}).status_code == 201
        rv = c.get(CM).json()["metadata"]["resourceVersion"]
        assert c.post(CM, json={"metadata": {"name": "c"}}).status_code == 201
        a = c.get(f"{CM}/a").json()
        a["data"] = {"k": "v"}
        assert c.put(f"{CM}/a", json=a).status_code == 200

        def events(**params: str) -> list[tuple[str, str]]:
            query = {"watch": "1", "timeoutSeconds": "1", "allowWatchBookmarks": "true", **params}
            with c.stream("GET", CM, params=query) as resp:
                assert resp.status_code == 200
                lines = [json.loads(line) for line in resp.iter_lines() if line.strip()]
            return [(e["type"], e["object"]["metadata"]["name"]) for e in lines]

        # Created after the list: ADDED; changed after it: MODIFIED, in revision order; b is known (real kcp
        # v0.31.2 sends the same two events).
        assert events(resourceVersion=rv) == [("ADDED", "c"), ("MODIFIED", "a")]
        # Without a resourceVersion (or with "0"): ADDED for everything there is, as before.
        for params in ({}, {"resourceVersion": "0"}):
            assert sorted(events(**params)) == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]
        bad = c.get(CM, params={"watch": "1", "resourceVersion": "x"})  # as real kcp v0.31.2 answers
        assert bad.status_code == 500 and "reason" not in bad.json()
        assert (
            bad.json()["message"]
            == 'resourceVersion: Invalid value: "x": strconv.ParseUint: parsing "x": invalid syntax'
        )
