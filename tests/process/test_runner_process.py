"""ContainerProcess: process groups, SIGTERM then SIGKILL, PR_SET_PDEATHSIG (real processes)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

from kcpshard_testkit.runner.process import ContainerProcess

PY = sys.executable


def alive(pid: int) -> bool:
    """True when ``pid`` runs (a zombie counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def until(cond: Callable[[], bool], deadline: float = 10.0) -> None:
    end = time.monotonic() + deadline
    while not cond():
        assert time.monotonic() < end, "condition not met before the deadline"
        await asyncio.sleep(0.05)


TRAP = textwrap.dedent(
    """
    import signal, sys, time, pathlib
    def bye(*_):
        pathlib.Path(sys.argv[1]).write_text("term")
        sys.exit(0)
    signal.signal(signal.SIGTERM, bye)
    print("started", flush=True)
    time.sleep(60)
    """
)


async def test_stop_sends_sigterm_and_logs_output(tmp_path: Path) -> None:
    marker, log = tmp_path / "marker", tmp_path / "c.log"
    proc = await ContainerProcess.start([PY, "-c", TRAP, str(marker)], {}, tmp_path, log)
    await until(lambda: log.exists() and "started" in log.read_text())
    assert os.getpgid(proc.pid) == proc.pid  # its own process group
    assert await proc.stop(grace=10) == 0
    assert marker.read_text() == "term"
    assert not alive(proc.pid)


async def test_sigterm_ignored_means_sigkill_after_grace(tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    script = (
        "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); "
        "time.sleep(60)"
    )
    proc = await ContainerProcess.start([PY, "-c", script], {}, tmp_path, log)
    await until(lambda: log.exists() and "up" in log.read_text())
    assert await proc.stop(grace=0.5) == 128 + signal.SIGKILL


async def test_group_leftovers_die_with_the_main_process(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    script = (
        "import subprocess,sys,pathlib;"
        f"p=subprocess.Popen([{PY!r},'-c','import time; time.sleep(60)']);"
        f"pathlib.Path({str(pidfile)!r}).write_text(str(p.pid))"
    )
    proc = await ContainerProcess.start(
        [PY, "-c", script], {"PATH": os.environ["PATH"]}, tmp_path, tmp_path / "l"
    )
    assert await proc.wait() == 0
    child = int(pidfile.read_text())
    await until(lambda: not alive(child))


async def test_start_error_for_missing_binary(tmp_path: Path) -> None:
    try:
        await ContainerProcess.start(["/nonexistent/bin"], {}, tmp_path, tmp_path / "l")
    except OSError as exc:
        assert isinstance(exc, FileNotFoundError)
    else:
        raise AssertionError("expected OSError")


async def test_pdeathsig_kills_container_when_runner_is_sigkilled(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    helper = textwrap.dedent(
        f"""
        import asyncio, pathlib, sys
        from kcpshard_testkit.runner.process import ContainerProcess
        async def main():
            tmp = pathlib.Path({str(tmp_path)!r})
            argv = [{PY!r}, "-c", "import time; time.sleep(60)"]
            p = await ContainerProcess.start(argv, {{}}, tmp, tmp / "l")
            pathlib.Path({str(pidfile)!r}).write_text(str(p.pid))
            await asyncio.sleep(60)
        asyncio.run(main())
        """
    )
    runner = await asyncio.create_subprocess_exec(PY, "-c", helper, start_new_session=True)
    try:
        await until(lambda: pidfile.exists() and pidfile.read_text() != "")
        child = int(pidfile.read_text())
        assert alive(child)
        runner.kill()
        await runner.wait()
        await until(lambda: not alive(child))
    finally:
        if runner.returncode is None:
            os.killpg(runner.pid, signal.SIGKILL)
            await runner.wait()
