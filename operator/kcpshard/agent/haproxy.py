"""One HAProxy in TCP mode, run and driven through its runtime API on a local unix socket (the front
agent runs two of them on one port); its configuration is rendered by haproxy_config.py.

Switching servers uses the runtime API commands of HAProxy 2.6 ``doc/management.txt`` (``set server ...
addr/state``, ``show servers state``, ``show stat``, ``shutdown sessions server``): no reload, and
established connections stay on the server they were opened to until they close or are drained.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import logging
import os
import shutil
import signal
import socket
import tempfile
from pathlib import Path

from kcpshard.agent.haproxy_config import (
    BACKEND,
    MAX_SOCKET_PATH,
    SLOTS,
    HAProxyBindError,
    HAProxyError,
    bind_failure,
    check_ip,
    check_port,
    check_slot,
    describe_returncode,
    parse_table,
    render_config,
)
from kcpshard.timeouts import within

log = logging.getLogger(__name__)

START_TIMEOUT_SECONDS = 10.0
STOP_TIMEOUT_SECONDS = 5.0
COMMAND_TIMEOUT_SECONDS = 5.0
# srv_admin_state bits that keep new traffic away (management.txt, "show servers state"): FMAINT, IMAINT,
# FDRAIN, IDRAIN, RMAINT. Not CMAINT: it stays set on a "disabled" server even after "state ready".
_NOT_READY_MASK = 0x01 | 0x02 | 0x08 | 0x10 | 0x20
_SRV_ST_STOPPED = 0


def check_bindable(address: str, port: int) -> None:
    """Bind (and release) the front address as HAProxy will, to name a taken port before starting it.

    SO_REUSEADDR like HAProxy's listeners: a port with only TIME_WAIT leftovers (a previous HAProxy) is
    free for it, one with a listener is not. Raises HAProxyBindError.
    """
    ip = check_ip(address, "address")
    check_port(port, "the front port")
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            probe.bind((str(ip), port))
        except OSError as exc:
            raise HAProxyBindError(address, port, exc.errno, (exc.strerror or "").lower()) from None


def runtime_socket_path(state_dir: Path) -> Path:
    """The runtime API socket: in the state dir, or in a short private folder when that path is too long.

    Unix socket paths are capped at 107 bytes, and a hostPath mapped under a deep folder
    (a test's tmp dir, a kubelet's pod dir) easily passes that.
    """
    preferred = Path(state_dir) / "haproxy.sock"
    if len(str(preferred).encode()) <= MAX_SOCKET_PATH:
        return preferred
    digest = hashlib.sha256(str(Path(state_dir).resolve()).encode()).hexdigest()[:16]
    short = Path(tempfile.gettempdir()) / f"kcpshard-front-{digest}"
    short.mkdir(mode=0o700, exist_ok=True)
    short.chmod(0o700)  # the socket is the admin API: only us
    return short / "haproxy.sock"


class HAProxy:
    """Supervises one ``haproxy -db`` (foreground, one process) in the caller's process group.

    Not master-worker (``-W``): its master exists for seamless reloads, which the front never does (it
    changes servers through the runtime API), and a master killed with SIGKILL leaves its worker running
    and listening. One process in the agent's group dies with whatever kills the group (a kubelet, the
    local workload runner, a test fixture).
    """

    def __init__(self, state_dir: Path, bind_address: str, bind_port: int, binary: str | None = None) -> None:
        self.state_dir = Path(state_dir)
        self.bind_address = bind_address
        self.bind_port = bind_port
        self.binary = binary
        self.config_path = self.state_dir / "haproxy.cfg"
        self.socket_path = runtime_socket_path(self.state_dir)
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._output: collections.deque[str] = collections.deque(maxlen=30)
        # While starting, HAProxy's lines are held back: a failed start is reported once, by the caller,
        # not as a burst of alerts on every retry.
        self._quiet = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc is not None else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    def _resolve_binary(self) -> str:
        name = self.binary or "haproxy"
        found = shutil.which(name)
        if found is None and os.sep not in name:
            found = shutil.which(name, path="/usr/sbin:/usr/local/sbin")
        if found is None:
            raise HAProxyError(f"haproxy not found ({name}): install the Debian package haproxy")
        return found

    async def start(self, backend: tuple[str, int] | None = None) -> None:
        """Write the config, run HAProxy and wait until its runtime API answers; `backend` (slot, port)
        serves from the first connection (None: no server until `set_backend`)."""
        if self.alive:
            raise HAProxyError("haproxy is already running")
        binary = self._resolve_binary()
        self.write_config(backend)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()  # a stale socket from a dead run would be mistaken for ours
        self._output.clear()
        self._quiet = True
        self._proc = await asyncio.create_subprocess_exec(
            binary,
            "-db",
            "-f",
            str(self.config_path),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        self._reader = asyncio.create_task(self._read_output(self._proc))
        try:
            await self._wait_ready()
        except BaseException:
            await self.stop()
            raise
        for line in self._output:
            log.info("haproxy: %s", line)
        self._quiet = False
        log.info("haproxy (pid %s) listens on %s:%s", self._proc.pid, self.bind_address, self.bind_port)

    def write_config(self, backend: tuple[str, int] | None) -> None:
        """haproxy.cfg for the next start, whole or not at all (a container started again by the kubelet
        reads it any time, front_members.py)."""
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        config = render_config(
            bind_address=self.bind_address,
            bind_port=self.bind_port,
            socket_path=self.socket_path,
            backend=backend,
        )
        partial = self.config_path.with_name(self.config_path.name + ".tmp")
        partial.write_text(config)
        partial.replace(self.config_path)

    async def _read_output(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            if line:
                self._output.append(line)
                log.log(logging.DEBUG if self._quiet else logging.INFO, "haproxy: %s", line)

    async def _wait_ready(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT_SECONDS
        assert self._proc is not None
        while True:
            if self._proc.returncode is not None:
                if self._reader is not None:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await within(asyncio.shield(self._reader), 2)
                raise self._start_failure(self._proc.returncode)
            if self.socket_path.exists():
                with contextlib.suppress(OSError, HAProxyError):
                    await self.command("show info")
                    return
            if loop.time() > deadline:
                raise HAProxyError(
                    f"haproxy did not answer on {self.socket_path} within {START_TIMEOUT_SECONDS}s"
                )
            await asyncio.sleep(0.05)

    def _start_failure(self, code: int) -> HAProxyError:
        bind = bind_failure(self._output, self.bind_address, self.bind_port)
        if bind is not None:
            return bind
        return HAProxyError(f"haproxy {describe_returncode(code)} at start: {self._last_alerts()}")

    def _last_alerts(self) -> str:
        """HAProxy's last alerts (or last lines), on one line: enough for a person to see what it said."""
        lines = [line for line in self._output if "ALERT" in line] or list(self._output)
        return " | ".join(lines[-3:]) or "no output"

    def describe_exit(self) -> str:
        """Why a started HAProxy is gone: ``haproxy exited with signal SIGKILL`` (and its last alert)."""
        code = self.returncode
        if code is None:
            return "haproxy is running" if self.alive else "haproxy was not started"
        alerts = [line for line in self._output if "ALERT" in line]
        return f"haproxy {describe_returncode(code)}" + (f" ({alerts[-1]})" if alerts else "")

    async def wait(self) -> int:
        """Wait until HAProxy exits; returns its exit code."""
        if self._proc is None:
            raise HAProxyError("haproxy was not started")
        return await self._proc.wait()

    async def soft_stop(self, grace: float) -> None:
        """SIGUSR1 (HAProxy's soft stop: it stops listening at once and lets open connections finish),
        then `stop()` for whatever is left after `grace` seconds."""
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGUSR1)
            with contextlib.suppress(TimeoutError):
                await within(proc.wait(), grace)
        await self.stop()

    async def stop(self) -> None:
        """SIGTERM (HAProxy's hard stop: every connection closes), SIGKILL after a grace period."""
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await within(proc.wait(), STOP_TIMEOUT_SECONDS)
            except TimeoutError:
                log.warning("haproxy did not stop within %ss; killing it", STOP_TIMEOUT_SECONDS)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        if self._reader is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await within(self._reader, 2)
            self._reader = None
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    async def command(self, cmd: str) -> str:
        """One runtime API command (non-interactive: HAProxy answers and closes)."""
        if "\n" in cmd or ";" in cmd:
            raise HAProxyError("one runtime API command at a time, without newlines or ';'")
        try:
            reader, writer = await within(
                asyncio.open_unix_connection(str(self.socket_path)), COMMAND_TIMEOUT_SECONDS
            )
        except (OSError, TimeoutError) as exc:
            raise HAProxyError(f"haproxy runtime API at {self.socket_path} is unreachable: {exc}") from None
        try:
            writer.write(cmd.encode() + b"\n")
            await writer.drain()
            data = await within(reader.read(), COMMAND_TIMEOUT_SECONDS)
        except (OSError, TimeoutError) as exc:
            raise HAProxyError(f"haproxy runtime API command {cmd.split()[0]!r} failed: {exc}") from None
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        return data.decode(errors="replace")

    async def _expect_silent(self, cmd: str) -> None:
        answer = (await self.command(cmd)).strip()
        if answer:
            raise HAProxyError(f"haproxy refused {cmd!r}: {answer}")

    async def set_backend(self, slot: str, port: int, address: str = "127.0.0.1") -> None:
        """Send new connections to ``slot`` at ``address:port``; leave established ones where they are.

        The new server is made ready before the others go to ``maint``: for an instant both take new
        connections (the old slot still serves at the flip), rather than none.
        """
        check_slot(slot)
        check_port(port, "the backend port")
        ip = check_ip(address, "the backend address")
        answer = (await self.command(f"set server {BACKEND}/{slot} addr {ip} port {port}")).strip()
        if answer and "changed" not in answer and "no need to change" not in answer:
            raise HAProxyError(f"haproxy refused the address of server {slot}: {answer}")
        await self._expect_silent(f"set server {BACKEND}/{slot} state ready")
        for other in SLOTS:
            if other != slot:
                # maint stops new connections only; sessions already open are not shut down.
                await self._expect_silent(f"set server {BACKEND}/{other} state maint")

    async def current_backend(self) -> tuple[str, int] | None:
        """The one server taking new connections, as (slot, port); None when none or several are."""
        rows = parse_table(await self.command(f"show servers state {BACKEND}"), sep=None)
        ready = [
            (row["srv_name"], int(row["srv_port"]))
            for row in rows
            if row.get("srv_name") in SLOTS
            and not int(row.get("srv_admin_state", "1")) & _NOT_READY_MASK
            and int(row.get("srv_op_state", "0")) != _SRV_ST_STOPPED
        ]
        return ready[0] if len(ready) == 1 else None

    async def connections(self) -> dict[str, int]:
        """Open (current) sessions per server name, from ``show stat`` (column ``scur``)."""
        rows = parse_table(await self.command(f"show stat {BACKEND} 4 -1"), sep=",")
        counts = {slot: 0 for slot in SLOTS}
        for row in rows:
            if row.get("pxname") == BACKEND and row.get("svname") in SLOTS:
                counts[row["svname"]] = int(row.get("scur") or 0)
        return counts

    async def drain(self, slot: str) -> int:
        """Close every session on ``slot``'s server; returns how many were open."""
        check_slot(slot)
        open_now = (await self.connections())[slot]
        await self._expect_silent(f"shutdown sessions server {BACKEND}/{slot}")
        return open_now
