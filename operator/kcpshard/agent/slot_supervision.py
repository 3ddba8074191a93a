"""kcp's process from its start to its exit, as the kubelet supervises a container
(`pkg/kubelet/kuberuntime`): its pid and bound port, its own `/readyz`, a crash, and a stop with a grace
period then SIGKILL. What only the host can see goes on the KcpSlot's status."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import httpx

from kcpshard.agent import seed
from kcpshard.agent.child import Child, describe_exit, exit_code
from kcpshard.agent.kine import Kine
from kcpshard.agent.procnet import listening_ports
from kcpshard.agent.slot_options import Options
from kcpshard.agent.slot_status import POLL_FAST, POLL_SLOW, Cond, Fatal, SlotReport
from kcpshard.api.conditions import now_precise
from kcpshard.kcp import readyz
from kcpshard.timeouts import within

log = logging.getLogger("kcpshard.agent.slot")


class Supervisor:
    def __init__(
        self,
        opts: Options,
        report: SlotReport,
        stop: asyncio.Event,
        stop_timeout: Callable[[], Awaitable[float]],  # read at each stop: the shard's, as it is then
    ) -> None:
        self.opts = opts
        self.report = report
        self.stop = stop
        self.stop_timeout = stop_timeout
        self.ready_once = asyncio.Event()  # Ready=True written for this kcp process

    async def supervise(
        self, child: Child, kine: Kine | None, workers: list[Coroutine[Any, Any, None]]
    ) -> int:
        """Until kcp exits, a stop is asked for, or a worker fails (`Fatal`: kcp is stopped)."""
        tasks = [asyncio.create_task(self.watch_kcp(child))]
        if kine is not None:
            tasks.append(asyncio.create_task(self.watch_kine(kine)))
        tasks += [asyncio.create_task(work) for work in workers]
        exited = asyncio.create_task(child.wait())
        stop = asyncio.create_task(self.stop.wait())
        waiting: set[asyncio.Task[Any]] = {exited, stop, *tasks}
        result = 0
        final: Cond | None = None  # the Ready condition a Fatal leaves once kcp stopped
        while True:
            done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if exited in done or stop in done:
                break
            failed = [t for t in done if t.exception() is not None]
            if failed:
                exc = failed[0].exception()
                if isinstance(exc, Fatal):
                    final = exc.ready
                else:
                    log.error("host agent failed: %s", exc)
                result = 1
                break
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

        if exited.done() and not self.stop.is_set() and result == 0:
            return await self.report_crash(child)
        stop.cancel()
        await self.stop_kcp(child, final)
        return result

    async def report_crash(self, child: Child) -> int:
        returncode = child.proc.returncode or 0
        await child.drained()
        tail = child.tail()
        msg = f"kcp exited by itself: {describe_exit(returncode)}"
        if tail:
            msg += "; last lines: " + " | ".join(tail)
        log.error("kcp exited by itself: %s", describe_exit(returncode))
        child.kill_group()  # anything kcp left behind
        await self.report.write(
            {"exitedAt": now_precise(), "exitCode": exit_code(returncode)},
            Cond("Ready", "False", "ProcessExited", msg),
            Cond("Listening", "False", "ProcessExited", "kcp is not running"),
        )
        return 1

    async def stop_kcp(self, child: Child, ready: Cond | None = None) -> None:
        """SIGTERM, wait up to the stop timeout, then SIGKILL; report the exit. Works without the API server.

        `ready`: the cause that stopped kcp, kept as the Ready condition with the exit added."""
        signalling = Cond("Ready", "False", "Stopping", "host agent is stopping kcp")
        stopping = asyncio.create_task(self.report.write({"stoppingAt": now_precise()}, signalling))
        child.signal(signal.SIGTERM)
        signalled = time.monotonic()
        unlistened = asyncio.create_task(self.report_unlistened(child))
        timeout = await self.stop_timeout()
        try:
            returncode = await within(child.wait(), max(timeout - (time.monotonic() - signalled), 0))
        except TimeoutError:
            log.warning("kcp did not stop within %ss: killing it", timeout)
            child.kill_group()
            returncode = await child.wait()
        finally:
            unlistened.cancel()
        child.kill_group()
        await child.drained()
        await stopping
        stopped = f"kcp stopped: {describe_exit(returncode)}"
        log.info("%s", stopped)
        if ready is not None:
            ready = Cond(ready.type, ready.status, ready.reason, f"{ready.message}; {stopped}")
        await self.report.write(
            {"exitedAt": now_precise(), "exitCode": exit_code(returncode)},
            ready or Cond("Ready", "False", "Exited", stopped),
            Cond("Listening", "False", "Exited", "kcp is not running"),
        )

    async def report_unlistened(self, child: Child) -> None:
        """Once a stopping kcp closed its listener (after its shutdown delay), say so: what it still serves
        are long-running requests (watches), which kcp holds until its HTTP server's shutdown timeout
        (60 s) unless the front closes them; the operator asks the front to, so their clients resume on
        the new slot at once."""
        while True:
            try:
                if not listening_ports(child.pid):
                    break
            except OSError:
                return  # gone: the exit is reported by the caller
            await asyncio.sleep(POLL_FAST / 2)
        log.info("kcp stopped listening; it serves only the requests still open")
        await self.report.write(None, Cond("Listening", "False", "ShuttingDown", "kcp stopped listening"))

    async def watch_kine(self, kine: Kine) -> None:
        """kcp cannot serve without its kine: kine ending ends the slot (kcp is stopped)."""
        why = await kine.exited()
        log.error("%s", why)
        ready = Cond("Ready", "False", "StoreExited", why)
        await self.report.write(None, ready)
        raise Fatal(why, ready)

    async def watch_kcp(self, child: Child) -> None:
        await self.report.persist({"pid": child.pid})
        port = await self.wait_for_port(child)
        await self.report.persist(
            {"port": port}, Cond("Listening", "True", "Bound", f"listening on 127.0.0.1:{port}")
        )
        log.info("kcp listens on 127.0.0.1:%d", port)
        await self.watch_ready(port)

    async def wait_for_port(self, child: Child) -> int:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.opts.listen_timeout
        ports: list[int] = []
        while loop.time() < deadline:
            try:
                ports = listening_ports(child.pid)
            except OSError:
                ports = []  # the process is gone or going: the exit is reported by the caller
            if len(ports) == 1:
                return ports[0]
            await asyncio.sleep(POLL_FAST / 2)
        found = ", ".join(map(str, ports)) or "none"
        msg = f"kcp did not listen on exactly one port within {self.opts.listen_timeout:g}s (found: {found})"
        await self.report.write(None, Cond("Listening", "False", "ListenTimeout", msg))
        log.error("%s", msg)
        raise Fatal(msg)

    async def watch_ready(self, port: int) -> None:
        """Poll /readyz: fast until ready, then every second; write only when readiness changes."""
        client: httpx.AsyncClient | None = None
        written: bool | None = None  # the readiness last written; None: still Starting
        try:
            while True:
                if client is None:
                    try:
                        ca = seed.last_certificate((self.opts.root_dir / "apiserver.crt").read_bytes())
                        client = readyz.client_for(ca)
                    except (OSError, ValueError, seed.SeedError):
                        await asyncio.sleep(POLL_FAST)
                        continue
                result = await readyz.probe(client, port)
                if result.ok and written is not True:
                    fields = {"readyAt": now_precise()} if written is None else None
                    msg = f"readyz ok on 127.0.0.1:{port}"
                    if await self.report.write(fields, Cond("Ready", "True", "ReadyzOK", msg)):
                        log.info("kcp is ready")
                        written = True
                        self.ready_once.set()
                elif (
                    not result.ok
                    and written is True
                    and await self.report.write(None, Cond("Ready", "False", "ReadyzFailing", result.detail))
                ):
                    log.warning("kcp is not ready: %s", result.detail)
                    written = False
                await asyncio.sleep(POLL_SLOW if written is not None else POLL_FAST)
        finally:
            if client is not None:
                await client.aclose()
