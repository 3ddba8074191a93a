"""`kcpshard agent slot`: the host agent of one KcpSlot (the process of the slot's Job).

It plays, for one kcp process, the part the kubelet plays for a container (`pkg/kubelet/kuberuntime`:
start, report status, stop with a grace period then SIGKILL), and reports on `KcpSlot.status` what only
the host can see: the seeded root material, the bound port, the slot's own `/readyz`, the exit.
Every status write is a read-modify-write (`mutate_status`): the operator writes the same object.

Before kcp starts: one of the store endpoints must accept a TCP connection (kcp would otherwise retry
etcd and never become ready, which says less), the root is seeded, and a non-root shard's kubeconfigs are
copied from their Secrets (slot_material.py). Once kcp is ready, its kcp-admin kubeconfig is published in
a Secret. The options are in slot_options.py, the supervision of kcp in slot_supervision.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Coroutine, Sequence
from typing import Any

from kcpshard.agent import cli, seed, slot_hold
from kcpshard.agent.child import Child
from kcpshard.agent.kine import Kine, KineError, KineStopped, without_dsn
from kcpshard.agent.kine import kcp_command as kine_kcp_command
from kcpshard.agent.slot_material import Material
from kcpshard.agent.slot_options import Options, parse_args
from kcpshard.agent.slot_status import API_ERRORS, Cond, SlotReport, fail
from kcpshard.agent.slot_supervision import Supervisor
from kcpshard.api.conditions import now_precise
from kcpshard.k8s.api import KCPSLOTS, ApiClient, NotFound

log = logging.getLogger("kcpshard.agent.slot")


class SlotAgent:
    def __init__(self, opts: Options, api: ApiClient):
        self.opts = opts
        self.api = api
        self.report = SlotReport(opts, api)
        self.stop_requested = asyncio.Event()
        self.material = Material(opts, api, self.report, self.stop_requested)
        self.supervisor = Supervisor(opts, self.report, self.stop_requested, self.stop_timeout)
        self.child: Child | None = None
        self.kine: Kine | None = None  # the slot's own kine, when the store is kine
        self.signals = 0
        self.hold: asyncio.Task[None] | None = None

    def on_signal(self) -> None:
        self.signals += 1
        if self.signals == 1 and self.child is not None and self.opts.hold_timeout > 0:
            self.hold = asyncio.get_running_loop().create_task(self.hold_then_stop())
        elif not self.stop_requested.is_set():
            if self.hold is not None:
                self.hold.cancel()  # a second request while holding: stop now
            log.info("stop requested: stopping kcp")
            self.stop_requested.set()
        elif self.child is not None:
            # kcp exits at once on a second signal, as kube-apiserver does (genericapiserver signal handler).
            log.info("second stop request: forwarding it to kcp")
            self.child.signal(signal.SIGTERM)

    async def hold_then_stop(self) -> None:
        """kcp serves on while the shard serves this slot (slot_hold.py), then stops as in a roll."""
        spec = (self.report.slot or {}).get("spec") or {}
        shard, slot = str(spec.get("shard")), str(spec.get("slot"))
        log.info("stop requested: kcp serves on while shard %s serves slot %s", shard, slot)
        timeout = self.opts.hold_timeout
        if await slot_hold.hold_while_serving(self.api, self.opts.namespace, shard, slot, timeout):
            log.info("stopping kcp: shard %s does not serve slot %s any more", shard, slot)
        else:
            log.warning("stopping kcp: shard %s still serves slot %s after %ss", shard, slot, timeout)
        self.stop_requested.set()

    async def stop_timeout(self) -> float:
        """SIGTERM to SIGKILL for kcp: the shard's roll.stopTimeoutSeconds as it is at the stop."""
        shard = str(((self.report.slot or {}).get("spec") or {}).get("shard"))
        return await slot_hold.read_stop_timeout(self.api, self.opts.namespace, shard, self.opts.stop_timeout)

    async def main(self) -> int:
        where = self.report.where
        try:
            self.report.read(await self.api.get(KCPSLOTS, self.opts.namespace, self.opts.slot))
        except NotFound:
            return fail(f"KcpSlot {where} not found")
        except API_ERRORS as exc:
            return fail(f"cannot read KcpSlot {where}: {exc}")
        pod = f" in pod {self.opts.pod_name}" if self.opts.pod_name else ""
        starting = f"host agent starting{pod}"
        first = {
            "podUID": self.opts.pod_uid,
            "jobName": self.opts.job_name,
            "startedAt": now_precise(),
            # A new process: nothing of an earlier start of this slot holds any more.
            **dict.fromkeys(("pid", "port", "readyAt", "stoppingAt", "exitedAt", "exitCode")),
        }
        conds = [Cond(t, "Unknown", "Starting", starting) for t in ("Seeded", "Listening", "Ready")]
        if not await self.report.write(first, *conds):
            return fail(f"cannot write the status of KcpSlot {where}")

        if self.opts.kine is not None:
            started = await self.start_kine(self.opts.kine)
            if not isinstance(started, Kine):
                return started
            self.kine = started
        try:
            return await self.seed_and_run()
        finally:
            if self.kine is not None:
                await self.kine.stop()  # after kcp: it holds kcp's data

    async def seed_and_run(self) -> int:
        material = self.material
        tls = await material.read_store_tls()
        if tls is False:
            return 1
        if not await material.wait_for_store(tls):
            return 1
        if self.stop_requested.is_set():
            return await self.stopped_before_start()
        plan, secret = await material.read_secret()
        if plan is None:
            return 1
        kubeconfigs = await material.read_kubeconfigs()
        if kubeconfigs is None:
            return 1
        if tls is not None:
            kubeconfigs = {**kubeconfigs, **tls.files()}
        if not await material.seed_root(plan, kubeconfigs):
            return 1
        if self.stop_requested.is_set():
            return await self.stopped_before_start()
        command, env = self.opts.command, None
        if self.kine is not None:
            command, env = kine_kcp_command(command, self.kine.url), without_dsn(os.environ)
        try:
            self.child = await Child.start(command, env=env)
        except OSError as exc:
            msg = f"cannot start {self.opts.command[0]}: {exc.strerror or exc}"
            await self.report.write(None, Cond("Ready", "False", "StartFailed", msg))
            return fail(msg)
        log.info("kcp started, pid %d", self.child.pid)
        workers: list[Coroutine[Any, Any, None]] = []
        if plan.kind is seed.SeedKind.FRESH_START:
            workers.append(material.upload_material(secret))
        if self.opts.admin_secret:
            workers.append(material.publish_admin(self.opts.admin_secret, self.supervisor.ready_once))
        return await self.supervisor.supervise(self.child, self.kine, workers)

    async def start_kine(self, binary: str) -> Kine | int:
        """The slot's kine, listening; else the agent's exit code: 1 (Seeded=False StoreUnreachable written)
        when kine did not start, 0 when a stop came first (as while waiting for an etcd store)."""
        try:
            return await Kine.start(binary, self.opts.store_wait, stop=self.stop_requested)
        except KineStopped:
            return await self.stopped_before_start()
        except KineError as exc:
            await self.report.write(None, Cond("Seeded", "False", "StoreUnreachable", str(exc)))
            return fail(str(exc))

    async def stopped_before_start(self) -> int:
        stopped = Cond("Ready", "False", "Exited", "stopped before kcp started")
        await self.report.write({"exitedAt": now_precise()}, stopped)
        return 0


async def _work(opts: Options, api: ApiClient) -> int:
    agent = SlotAgent(opts, api)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, agent.on_signal)
    try:
        return await agent.main()
    finally:
        if agent.hold is not None:
            agent.hold.cancel()
        if agent.child is not None and agent.child.proc.returncode is None:
            agent.child.kill_group()  # never leave kcp behind, whatever went wrong
            with contextlib.suppress(Exception):
                await agent.child.wait()


def run(argv: Sequence[str]) -> int:
    return cli.main("slot", argv, parse_args, _work)
