"""`kubectl kcpshard status` on real rolls, run through the real kubectl as a plugin.

The live view runs in a pseudo-terminal, as a person sees it: each redraw replaces the last one in
place, and every step of the roll and every condition of the new slot shows up as it happens.
`--wait` runs as a script runs it (no terminal): 0 once the roll succeeded, 3 when it stalled, 4
when its timeout passed first.

With KCPSHARD_RECORD_DIR set, the objects seen along the way are written there: the testdata of the
Argo CD and kstatus health checks came from these rolls.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import signal
import struct
import subprocess
import sys
import termios
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kcpshard.k8s.api import KCPSHARDS
from kcpshard.roll.plan import Step
from kcpshard_testkit import record, scenario
from kcpshard_testkit.kcpbin import make_kcp
from kcpshard_testkit.stack import Stack
from kcpshard_testkit.tcp import free_port
from kcpshard_testkit.waiting import wait_for

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(300)]

BIN = Path(sys.executable).parent
KUBECTL = str(BIN / "kubectl")
REDRAW = re.compile(r"\x1b\[\d+F\x1b\[J|\x1b\[H\x1b\[2J")
COLOR = re.compile(r"\x1b\[[0-9;]*m")
BLUE_GREEN_STEPS = [
    Step.STARTING,
    Step.WAITING_READY,
    Step.FLIPPING,
    Step.STOPPING_OLD,
    Step.HANDING_OVER_LEASE,
    Step.PROBING,
    Step.DRAINING,
    Step.RETIRING,
]


def _env(stack: Stack, home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    # COLUMNS and LINES go: the pseudo-terminal gives the size (pytest-xdist's workers set COLUMNS=80,
    # which the plugin would honour as a person's setting, as shutil.get_terminal_size does)
    inherited = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return {
        **inherited,
        "KUBECONFIG": stack.info.kubeconfig,
        "HOME": str(home),
        # kubectl finds the plugin as any other: a kubectl-kcpshard executable on PATH
        "PATH": os.pathsep.join([str(BIN), os.environ.get("PATH", "")]),
        "TERM": "xterm-256color",
    }


@dataclass
class Terminal:
    """A process on a pseudo-terminal and everything it has written so far."""

    popen: subprocess.Popen[bytes]
    master: int
    output: bytearray = field(default_factory=bytearray)

    def frames(self) -> list[str]:
        """Each view drawn, without colours; a redraw starts a new one."""
        text = self.output.decode(errors="replace").replace("\r", "")
        return [COLOR.sub("", frame) for frame in REDRAW.split(text)]


@contextlib.asynccontextmanager
async def in_terminal(argv: list[str], env: dict[str, str]) -> AsyncIterator[Terminal]:
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 200, 0, 0))  # rows, columns
    popen = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    term = Terminal(popen, master)
    loop = asyncio.get_running_loop()

    def readable() -> None:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the process closed its side
            data = b""
        if data:
            term.output.extend(data)
        else:
            loop.remove_reader(master)

    loop.add_reader(master, readable)
    try:
        yield term
    finally:
        loop.remove_reader(master)
        if popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGKILL)
        popen.wait()
        os.close(master)


# The finished roll's line, whole. The view is awaited until it shows it (a CI run under load once ended
# the wait on a Healthy view whose line did not match yet) and printed when it never does.
LAST_ROLL = re.compile(r"Last roll:\s+✔ Succeeded  slot a → b  revision \w+ → \w+  total")


def _running_step(frame: str) -> str | None:
    found = re.search(r"^\s+◌ (\w+)\s.*\bnow$", frame, re.MULTILINE)
    return found.group(1) if found else None


def _new_slot_done(frame: str) -> int:
    """How many of the new slot's conditions show ✔ in a view of a roll under way."""
    if "Slot b (new" not in frame:
        return -1
    section = frame.split("Slot b (new", 1)[1].split("\n\n", 1)[0]
    return len(re.findall(r"^\s+✔ ", section, re.MULTILINE))


def _distinct(values: list[str | None]) -> list[str]:
    out: list[str] = []
    for value in values:
        if value is not None and (not out or out[-1] != value):
            out.append(value)
    return out


async def _plugin(env: dict[str, str], *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        KUBECTL,
        "kcpshard",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )


async def _finish(proc: asyncio.subprocess.Process, timeout: float = 150) -> tuple[int, str, str]:
    async with asyncio.timeout(timeout):
        out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()


async def test_status_watch_shows_each_step_as_it_happens(
    stack: Stack, bin_dir: Path, tmp_path: Path
) -> None:
    await scenario.serving_shard(stack, bin_dir)
    env = _env(stack, tmp_path / "home")
    async with in_terminal([KUBECTL, "kcpshard", "status", "root", "-w"], env) as term:

        async def healthy_view() -> bool:
            return "Status:          ✔ Healthy" in term.frames()[-1]

        await wait_for("the view of a healthy shard", healthy_view, timeout=30)
        before = len(term.frames())

        async with record.changes(stack.api, "root", "bluegreen"):
            patched = await stack.api.patch(
                KCPSHARDS, stack.namespace, "root", {"spec": {"kcp": {"version": "v0.32.2"}}}
            )
            record.record("kcpshard-stale-generation", patched)
            # a script waiting on the same roll at the same time, without a terminal
            waiter = await _plugin(env, "status", "root", "--wait", "--timeout", "2m")

            async def rolled_view() -> bool:
                last = term.frames()[-1]
                return "Status:          ✔ Healthy" in last and bool(LAST_ROLL.search(last))

            try:
                await wait_for("the view of the finished roll", rolled_view, timeout=120)
            except TimeoutError:
                pytest.fail(f"the view never showed the finished roll; last frame:\n{term.frames()[-1]}")
            code, out, err = await _finish(waiter)
        assert term.popen.poll() is None  # -w goes on until it is stopped

    frames = term.frames()[before:]
    # every step was shown running, one after the other, in the order the roll takes them
    assert _distinct([_running_step(f) for f in frames]) == [s.value for s in BLUE_GREEN_STEPS]
    # the new slot's conditions turned ✔ one by one, never back, up to all six
    done = [n for n in (_new_slot_done(f) for f in frames) if n >= 0]
    assert done == sorted(done) and done[-1] == 6, done
    assert len(set(done)) >= 4, done  # seen at several stages, not just at the end
    final = frames[-1]
    assert "Serving:         slot b (front b:" in final
    assert "Revision:" in final and "(kcp v0.32.2)" in final
    assert LAST_ROLL.search(final), final
    for step in BLUE_GREEN_STEPS:
        assert re.search(rf"^\s+✔ {step.value}\s+\d\d:\d\d:\d\d\s+\S+s$", final, re.MULTILINE), step

    # the script's --wait: one line per change, no terminal codes, 0 once the roll succeeded
    assert code == 0, (out, err)
    assert "\x1b[" not in out
    lines = out.strip().splitlines()
    assert lines[0].startswith("Progressing - ")
    assert lines[-1].startswith("kcpshard root is healthy: slot b serves revision")

    shard = await stack.shard("root")
    record.record("kcpshard-ready", shard)
    assert shard["status"]["lastRoll"]["toSlot"] == "b"


async def test_wait_fails_on_a_stalled_roll_and_on_its_timeout(
    stack: Stack, bin_dir: Path, tmp_path: Path
) -> None:
    good = make_kcp(bin_dir, "kcp-good", **scenario.FAST)
    never_ready = make_kcp(bin_dir, "kcp-never-ready", never_ready=True, **scenario.FAST)
    crashes = make_kcp(bin_dir, "kcp-crashes", crash_after_seconds=0.5, **scenario.FAST)
    env = _env(stack, tmp_path / "home")
    manifest = stack.manifest("root", free_port(), kcp={"version": "v0.32.1", "binary": good})
    record.record("kcpshard-new", await stack.api.create(KCPSHARDS, stack.namespace, manifest))
    async with record.changes(stack.api, "root", "first"):
        await scenario.wait_ready(stack)

    # healthy with no roll: --wait says so at once
    code, out, _ = await _finish(await _plugin(env, "status", "root", "--wait"))
    assert code == 0 and out.startswith("kcpshard root is healthy"), out

    async with record.changes(stack.api, "root", "stalled"):
        patch = {"spec": {"kcp": {"binary": never_ready}, "roll": {"readyTimeoutSeconds": 6}}}
        await stack.api.patch(KCPSHARDS, stack.namespace, "root", patch)
        short = await _plugin(env, "status", "root", "--wait", "--timeout", "1s")
        long = await _plugin(env, "status", "root", "--wait", "--timeout", "2m")
        code, out, err = await _finish(short)
        assert code == 4, (out, err)
        assert "timed out after 1s waiting for kcpshard root: Progressing" in out

        code, out, err = await _finish(long)
        assert code == 3, (out, err)
        last = out.strip().splitlines()[-1]
        assert last.startswith("kcpshard root stalled: slot a serves revision"), out
        assert "was not ready within 6s" in last

        shard = await scenario.wait_stalled(stack)
    record.record("kcpshard-stalled", shard)
    # a stalled shard: --wait does not wait
    code, out, _ = await _finish(await _plugin(env, "status", "root", "--wait"))
    assert code == 3 and "was not ready within 6s" in out

    # a new spec whose kcp crashes: --wait does not take the old stall for the new roll's verdict
    async with record.changes(stack.api, "root", "crashed"):
        patch = {"spec": {"kcp": {"binary": crashes}, "roll": {"readyTimeoutSeconds": 60}}}
        record.record(
            "kcpshard-stalled-stale-generation",
            await stack.api.patch(KCPSHARDS, stack.namespace, "root", patch),
        )
        code, out, err = await _finish(await _plugin(env, "status", "root", "--wait"))
    assert code == 3, (out, err)
    assert "exited with code 2" in out.strip().splitlines()[-1]
