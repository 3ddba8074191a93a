"""The slot agent's kine: its address read from its own log line, a kine that exits or never says where
it listens named with its last lines, its log scrubbed of the DSN, a stop while it starts, kcp's command
and environment without the DSN. Real kine where it is built; shell scripts for the faults."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest

from kcpshard.agent.kine import Kine, KineError, KineStopped, kcp_command, without_dsn
from kcpshard.kcp.flags import KINE_ENDPOINT_ENV, KINE_URL
from kcpshard_testkit.tools import tool


def _script(path: Path, body: str) -> str:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture
def dsn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    value = f"sqlite://{tmp_path / 'state.db'}"
    monkeypatch.setenv(KINE_ENDPOINT_ENV, value)
    return value


async def test_real_kine_listens_where_it_says(dsn: str) -> None:
    kine = await Kine.start(str(tool("kine")), 20)
    try:
        assert kine.url.startswith("http://127.0.0.1:")
        port = int(kine.url.rsplit(":", 1)[1])
        assert port > 0
    finally:
        await kine.stop()
    assert kine.child.proc.returncode is not None


async def test_a_kine_that_exits_is_named_with_its_last_lines(tmp_path: Path, dsn: str) -> None:
    binary = _script(tmp_path / "kine", "echo 'level=fatal msg=\"no such database\"' >&2; exit 3")
    with pytest.raises(KineError) as info:
        await Kine.start(binary, 10)
    assert "kine ended (exit code 3) before it said where it listens" in str(
        info.value
    ) and "no such database" in str(info.value)
    assert dsn not in str(info.value)


async def test_a_kine_that_never_says_where_it_listens_is_stopped(tmp_path: Path, dsn: str) -> None:
    binary = _script(tmp_path / "kine", "echo starting >&2; exec sleep 60")
    with pytest.raises(KineError, match=r"did not say where it listens within 0\.5s"):
        await Kine.start(binary, 0.5)


async def test_kine_printing_its_dsn_shows_neither_the_dsn_nor_the_password(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # Real kine v0.17.5 quotes a DSN it cannot parse whole in its fatal line.
    monkeypatch.setenv(KINE_ENDPOINT_ENV, "postgres://kcp:s3cr3tpw@127.0.0.1:bad/kcp")
    with pytest.raises(KineError) as info:
        await Kine.start(str(tool("kine")), 20)
    message = str(info.value)
    assert "kine ended (exit code 1) before it said where it listens" in message, message
    assert "failed to parse datastore DSN URL" in message and 'parse "[hidden]"' in message, message
    out = capfd.readouterr()
    assert 'parse "[hidden]"' in out.out  # kine's log still passes through the agent's stdout, scrubbed
    assert "s3cr3tpw" not in message + out.out + out.err


async def test_a_secret_split_across_two_writes_is_still_hidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(KINE_ENDPOINT_ENV, "postgres://kcp:s3cr3tpw@db.example/kcp")
    half = 'printf "dial postgres://kcp:s3cr" >&2; sleep 0.3; printf "3tpw@db.example/kcp failed\\n" >&2'
    binary = _script(tmp_path / "kine", f"{half}; exit 1")
    with pytest.raises(KineError) as info:
        await Kine.start(binary, 10)
    out = capfd.readouterr()
    assert "dial [hidden] failed" in str(info.value) and "dial [hidden] failed" in out.out
    assert "s3cr" not in str(info.value) + out.out + out.err


async def test_a_stop_while_kine_starts_stops_it(tmp_path: Path, dsn: str) -> None:
    pidfile = tmp_path / "kine.pid"
    binary = _script(tmp_path / "kine", f"echo $$ > {pidfile}; echo starting >&2; exec sleep 60")
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(0.5, stop.set)
    with pytest.raises(KineStopped):
        await Kine.start(binary, 300, stop=stop)
    pid = int(pidfile.read_text())
    assert not Path(f"/proc/{pid}").exists()  # stopped and reaped


async def test_without_its_dsn_kine_is_not_started(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KINE_ENDPOINT_ENV, raising=False)
    with pytest.raises(KineError, match=f"{KINE_ENDPOINT_ENV} is not set"):
        await Kine.start("/bin/false", 1)


def test_kcp_gets_the_address_and_no_dsn() -> None:
    command = ["kcp", "start", f"--etcd-servers={KINE_URL}", "--root-directory=/x"]
    assert kcp_command(command, "http://127.0.0.1:4100") == [
        "kcp",
        "start",
        "--etcd-servers=http://127.0.0.1:4100",
        "--root-directory=/x",
    ]
    env = {**os.environ, KINE_ENDPOINT_ENV: "postgres://u:secret@db/kcp"}
    assert KINE_ENDPOINT_ENV not in without_dsn(env) and "PATH" in without_dsn(env)
