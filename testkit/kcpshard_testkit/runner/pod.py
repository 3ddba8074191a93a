"""One pod on the local node: prepare, run its containers, report status, terminate on deletion.

Imitates the kubelet's pod worker (``pkg/kubelet/pod_workers.go``, ``kubelet.go`` ``SyncPod`` /
``SyncTerminatingPod``, ``kuberuntime_manager.go`` restarts with back-off, ``status/status_manager.go``
writes through ``pods/<name>/status``). Differences: the crash back-off starts at 0.5 s and is capped at 5 s
(kubelet: 10 s .. 5 min); liveness and startup probes are not run; ``hostNetwork: false`` pods also use the
host network (``podIP`` = ``hostIP`` = 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kcpshard.api.conditions import now as timestamp
from kcpshard.k8s.api import PODS, SECRETS, ApiClient, ApiError, NotFound
from kcpshard_testkit.identity import Token
from kcpshard_testkit.kinds import CONFIGMAPS
from kcpshard_testkit.runner.envs import POD_IP, ConfigError, build_env, referenced_names
from kcpshard_testkit.runner.expand import expand
from kcpshard_testkit.runner.kubelet import PodIdentity
from kcpshard_testkit.runner.probes import run_probe
from kcpshard_testkit.runner.process import ContainerProcess
from kcpshard_testkit.runner.volumes import (
    Mount,
    container_mounts,
    map_arg,
    map_path,
    pod_dir_name,
    prepare_volumes,
)

log = logging.getLogger(__name__)

DEFAULT_GRACE = 30.0
BACKOFF_START, BACKOFF_CAP, BACKOFF_RESET_AFTER = 0.5, 5.0, 60.0
CONFIG_RETRY = 1.0
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass
class Launch:
    """What is needed to start one container."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    mounts: list[Mount]


@dataclass
class ContainerState:
    name: str
    restart_count: int = 0
    ready: bool = False
    started: bool = False
    state: dict[str, Any] = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: dict[str, Any] = field(default_factory=dict)
    proc: ContainerProcess | None = None
    done: bool = False  # terminated and will not restart

    def as_status(self, image: str) -> dict[str, Any]:
        return {
            "name": self.name,
            "image": image,
            "imageID": "",
            "containerID": f"local://{self.proc.pid}" if self.proc else "",
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }


def grace_of(pod: Mapping[str, Any]) -> float:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    for value in (meta.get("deletionGracePeriodSeconds"), spec.get("terminationGracePeriodSeconds")):
        if value is not None:
            return float(value)
    return DEFAULT_GRACE


def _terminated(code: int, started_at: str, reason: str | None = None, message: str = "") -> dict[str, Any]:
    body = {
        "exitCode": code,
        "reason": reason or ("Completed" if code == 0 else "Error"),
        "startedAt": started_at,
        "finishedAt": timestamp(),
    }
    if message:
        body["message"] = message
    return {"terminated": body}


class PodWorker:
    """Runs one pod until it ends, is deleted, or the runner stops."""

    def __init__(
        self,
        api: ApiClient,
        sandbox: Path,
        node_name: str,
        extra_env: Mapping[str, str],
        pod: Mapping[str, Any],
        identity: PodIdentity | None = None,
    ):
        self.api = api
        self.identity = identity
        self.sandbox = sandbox
        self.node_name = node_name
        self.extra_env = dict(extra_env)
        self.pod: dict[str, Any] = dict(pod)
        meta = self.pod.get("metadata") or {}
        self.uid = str(meta.get("uid"))
        self.namespace, self.name = str(meta.get("namespace")), str(meta.get("name"))
        self.dir = sandbox / "pods" / pod_dir_name(self.pod)
        spec = self.pod.get("spec") or {}
        self.restart_policy = str(spec.get("restartPolicy") or "Always")
        self.containers = {
            str(c["name"]): ContainerState(str(c["name"])) for c in spec.get("containers") or []
        }
        self.init_states = {
            str(c["name"]): ContainerState(str(c["name"])) for c in spec.get("initContainers") or []
        }
        self.phase = "Pending"
        self.reason: str | None = None
        self.message: str | None = None
        self.initialized = not self.init_states
        self.start_time = str((self.pod.get("status") or {}).get("startTime") or timestamp())
        self._terminate = asyncio.Event()
        self._grace = DEFAULT_GRACE
        self._finalize = False  # finish the API delete handshake after stopping
        self._status_lock = asyncio.Lock()
        self._last_status: dict[str, Any] | None = None
        self._launches: dict[str, Launch] = {}
        self._token: Token | None = None
        self._token_renewal: asyncio.Task[None] | None = None

    # --- signals from the runner ---------------------------------------------------------------------
    def update(self, pod: Mapping[str, Any]) -> None:
        """A newer version of the pod object was seen."""
        self.pod = dict(pod)
        if (self.pod.get("metadata") or {}).get("deletionTimestamp"):
            self.request_termination(grace_of(self.pod), finalize=True)

    def request_termination(self, grace: float, *, finalize: bool) -> None:
        if not self._terminate.is_set():
            self._grace, self._finalize = grace, finalize
            self._terminate.set()
        else:
            self._grace = min(self._grace, grace)
            self._finalize = self._finalize or finalize

    # --- lifecycle -----------------------------------------------------------------------------------
    async def run(self) -> None:
        """The pod's whole life. Cancel it to stop for a runner shutdown (call ``shutdown`` first)."""
        try:
            await self._run()
        finally:
            if self._token_renewal is not None:
                self._token_renewal.cancel()
            self._kill_all()  # whatever path left the pod (cancellation included), no process survives

    def _kill_all(self) -> None:
        for state in [*self.containers.values(), *self.init_states.values()]:
            if state.proc is not None:
                state.proc.kill_group()

    async def _run(self) -> None:
        old_status = self.pod.get("status") or {}
        if old_status.get("phase") in ("Succeeded", "Failed") or self._terminate.is_set():
            await self._wait_and_finalize()
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)  # secret volumes live below: keep them private
        if self._recover_after_restart(old_status):
            await self._publish()
            await self._wait_and_finalize()
            return
        await self._publish()
        if not await self._prepare():
            await self._wait_and_finalize()
            return
        if self.identity is not None and self._token is not None:
            self._token_renewal = asyncio.create_task(
                self.identity.keep_fresh(self.pod, self.dir, self._token)
            )
        if not await self._run_init_containers():
            await self._wait_and_finalize()
            return
        self.phase = "Running"
        supervisors = [asyncio.create_task(self._supervise(name)) for name in self.containers]
        terminate: asyncio.Future[Any] = asyncio.ensure_future(self._terminate.wait())
        all_done: asyncio.Future[Any] = asyncio.gather(*supervisors, return_exceptions=True)
        try:
            await asyncio.wait({terminate, all_done}, return_when=asyncio.FIRST_COMPLETED)
            for result in all_done.result() if all_done.done() else []:
                if isinstance(result, Exception):
                    log.error("pod %s/%s: container supervisor failed: %r", self.namespace, self.name, result)
            if self._terminate.is_set():
                await self._stop_containers(self._grace)
        finally:
            terminate.cancel()
            for task in supervisors:
                task.cancel()
            await asyncio.gather(*supervisors, return_exceptions=True)
        if not self._terminate.is_set():
            codes = [c.state.get("terminated", {}).get("exitCode", 1) for c in self.containers.values()]
            self.phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"
            await self._publish()
        await self._wait_and_finalize()

    async def shutdown(self, cap: float) -> None:
        """Runner stop: SIGTERM every container, SIGKILL after the grace period (at most ``cap``)."""
        self.request_termination(min(grace_of(self.pod), cap), finalize=False)
        self._grace = min(self._grace, cap)
        self._finalize = False
        await self._stop_containers(self._grace)

    async def _wait_and_finalize(self) -> None:
        await self._terminate.wait()
        await self._stop_containers(self._grace)
        if self._finalize:
            with contextlib.suppress(NotFound):
                await self.api.delete(PODS, self.namespace, self.name, grace_period_seconds=0)

    async def _stop_containers(self, grace: float) -> None:
        states = [*self.containers.values(), *self.init_states.values()]
        await asyncio.gather(*(s.proc.stop(grace) for s in states if s.proc and s.proc.returncode is None))

    def _recover_after_restart(self, old: Mapping[str, Any]) -> bool:
        """A previous runner ran this pod: its processes are gone. True when the pod is now Failed."""
        seen = {str(c.get("name")): c for c in old.get("containerStatuses") or []}
        if not any("running" in (c.get("state") or {}) or c.get("restartCount") for c in seen.values()):
            return False
        if self.restart_policy != "Always":
            # kubelet's answer for a container that vanished: ContainerStatusUnknown, exit code 137.
            for state in self.containers.values():
                state.state = _terminated(
                    137, self.start_time, "ContainerStatusUnknown", "The container could not be located"
                )
                state.done = True
            self.phase = "Failed"
            return True
        for name, state in self.containers.items():
            state.restart_count = int((seen.get(name) or {}).get("restartCount") or 0) + 1
        return False

    async def _prepare(self) -> bool:
        """Resolve env and volumes; retry config errors until deleted. False when the pod cannot start."""
        spec = self.pod.get("spec") or {}
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            if not container.get("command"):
                self._fail_start(
                    str(container.get("name")),
                    "container has no command: the local runner cannot run an image entrypoint",
                )
                await self._publish()
                return False
        while not self._terminate.is_set():
            try:
                await self._resolve()
                return True
            except ConfigError as exc:
                for state in [*self.containers.values(), *self.init_states.values()]:
                    state.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
                await self._publish()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._terminate.wait(), CONFIG_RETRY)
        return False

    def _fail_start(self, name: str, message: str) -> None:
        for state in [*self.containers.values(), *self.init_states.values()]:
            if state.name == name:
                state.state = _terminated(128, timestamp(), "StartError", message)
            else:
                state.state = {"waiting": {"reason": "PodInitializing"}}
            state.done = True
        self.phase, self.reason, self.message = "Failed", "StartError", f"container {name}: {message}"

    async def _fetch(self, ref: Any, names: set[str]) -> dict[str, dict[str, Any] | None]:
        out: dict[str, dict[str, Any] | None] = {}
        for name in names:
            try:
                out[name] = await self.api.get(ref, self.namespace, name)
            except NotFound:
                out[name] = None
        return out

    async def _resolve(self) -> None:
        secret_names, cm_names = referenced_names(self.pod)
        secrets = await self._fetch(SECRETS, secret_names)
        configmaps = await self._fetch(CONFIGMAPS, cm_names)
        volumes = prepare_volumes(self.sandbox, self.node_name, self.pod, self.dir, secrets, configmaps)
        identity_env: dict[str, str] = {}
        if self.identity is not None:
            written = await self.identity.kubeconfig(self.pod, self.dir)
            if written is not None:
                kubeconfig, self._token = written
                identity_env["KUBECONFIG"] = str(kubeconfig)
        spec = self.pod.get("spec") or {}
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            own = build_env(container, self.pod, secrets, configmaps, self.extra_env)
            mounts = container_mounts(container, volumes, own)
            argv = [
                map_arg(expand(str(a), own, self.extra_env), mounts)
                for a in [*(container.get("command") or []), *(container.get("args") or [])]
            ]
            env = {
                "PATH": os.environ.get("PATH", DEFAULT_PATH),
                "HOME": str(self.dir),
                "HOSTNAME": self.name,
                **self.extra_env,
                **identity_env,
                **{k: map_path(v, mounts) for k, v in own.items()},
            }
            env.pop("KUBERNETES_SERVICE_HOST", None)
            env.pop("KUBERNETES_SERVICE_PORT", None)
            cwd = self.dir
            if container.get("workingDir"):
                cwd = Path(map_path(str(container["workingDir"]), mounts))
                if not cwd.is_dir():
                    raise ConfigError(f"workingDir {container['workingDir']} is not a mounted local folder")
            self._launches[str(container["name"])] = Launch(argv, env, cwd, mounts)

    def _container_spec(self, name: str) -> dict[str, Any]:
        spec = self.pod.get("spec") or {}
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            if container.get("name") == name:
                return dict(container)
        return {}

    async def _start(self, state: ContainerState) -> str | None:
        """Start the container process; returns startedAt, or None after a StartError."""
        launch = self._launches[state.name]
        started_at = timestamp()
        try:
            state.proc = await ContainerProcess.start(
                launch.argv, launch.env, launch.cwd, self.dir / f"{state.name}.log"
            )
        except OSError as exc:
            state.proc = None
            state.state = _terminated(
                128, started_at, "StartError", f"cannot run {launch.argv[0]!r}: {exc.strerror}"
            )
            return None
        state.state = {"running": {"startedAt": started_at}}
        state.started = True
        if self._terminate.is_set():  # deleted while starting: the stop pass may have missed this process
            await state.proc.stop(self._grace)
        return started_at

    async def _run_init_containers(self) -> bool:
        """Each init container to completion, in order; False when the pod failed or is terminating."""
        for state in self.init_states.values():
            while not self._terminate.is_set():
                started_at = await self._start(state)
                await self._publish()
                code = 128 if started_at is None or state.proc is None else await self._wait_exit(state.proc)
                if self._terminate.is_set():
                    return False
                if started_at is not None:
                    state.state = _terminated(code, started_at)
                state.started = False
                if code == 0:
                    break
                if self.restart_policy == "Never":
                    self.phase = "Failed"
                    await self._publish()
                    return False
                state.restart_count += 1
                await self._backoff(state, 0)
            else:
                return False
        self.initialized = True
        return True

    async def _wait_exit(self, proc: ContainerProcess) -> int:
        return await proc.wait()

    async def _backoff(self, state: ContainerState, ran_for: float) -> None:
        exponent = 0 if ran_for >= BACKOFF_RESET_AFTER else state.restart_count - 1
        delay = min(BACKOFF_START * 2 ** max(exponent, 0), BACKOFF_CAP)
        state.last_state = state.state
        state.state = {"waiting": {"reason": "CrashLoopBackOff", "message": f"back-off {delay}s restarting"}}
        await self._publish()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._terminate.wait(), delay)

    async def _supervise(self, name: str) -> None:
        """Run one container, restarting it per restartPolicy, with its readiness probe alongside."""
        state = self.containers[name]
        while not self._terminate.is_set():
            began = time.monotonic()
            started_at = await self._start(state)
            prober = asyncio.create_task(self._probe(state)) if started_at else None
            await self._publish()
            try:
                code = 128 if state.proc is None or started_at is None else await self._wait_exit(state.proc)
            finally:
                if prober:
                    prober.cancel()
            state.ready = state.started = False
            if self._terminate.is_set():
                return
            if started_at is not None:
                state.state = _terminated(code, started_at)
            restart = self.restart_policy == "Always" or (self.restart_policy == "OnFailure" and code != 0)
            if not restart:
                state.done = True
                await self._publish()
                return
            state.restart_count += 1
            await self._backoff(state, time.monotonic() - began)

    async def _probe(self, state: ContainerState) -> None:
        spec = self._container_spec(state.name)
        probe = spec.get("readinessProbe")
        if not probe:
            state.ready = True
            await self._publish()
            return
        launch = self._launches[state.name]

        def mapper(argv: list[str]) -> list[str]:
            return [map_arg(expand(str(a), launch.env), launch.mounts) for a in argv]

        await asyncio.sleep(float(probe.get("initialDelaySeconds") or 0))
        period = float(probe.get("periodSeconds") or 10)
        need_ok, need_fail = int(probe.get("successThreshold") or 1), int(probe.get("failureThreshold") or 3)
        oks = fails = 0
        while True:
            ok = await run_probe(probe, spec, mapper, launch.env, launch.cwd)
            oks, fails = (oks + 1, 0) if ok else (0, fails + 1)
            ready = state.ready
            if oks >= need_ok:
                ready = True
            elif fails >= need_fail:
                ready = False
            if ready != state.ready:
                state.ready = ready
                await self._publish()
            await asyncio.sleep(period)

    # --- status --------------------------------------------------------------------------------------
    def build_status(self) -> dict[str, Any]:
        spec = self.pod.get("spec") or {}
        images = {str(c.get("name")): str(c.get("image") or "") for c in spec.get("containers") or []}
        init_images = {
            str(c.get("name")): str(c.get("image") or "") for c in spec.get("initContainers") or []
        }
        terminal = self.phase in ("Succeeded", "Failed")
        all_ready = not terminal and all(c.ready for c in self.containers.values())
        not_ready = [n for n, c in self.containers.items() if not c.ready]
        ready_reason = "PodCompleted" if terminal else (None if all_ready else "ContainersNotReady")
        ready_msg = (
            None if all_ready or terminal else f"containers with unready status: [{' '.join(not_ready)}]"
        )
        now = timestamp()

        def cond(
            kind: str, ok: bool, reason: str | None = None, message: str | None = None
        ) -> dict[str, Any]:
            body: dict[str, Any] = {
                "type": kind,
                "status": "True" if ok else "False",
                "lastTransitionTime": now,
            }
            if reason:
                body["reason"] = reason
            if message:
                body["message"] = message
            return body

        status: dict[str, Any] = {
            "phase": self.phase,
            "reason": self.reason,
            "message": self.message,
            "hostIP": POD_IP,
            "hostIPs": [{"ip": POD_IP}],
            "podIP": POD_IP,
            "podIPs": [{"ip": POD_IP}],
            "startTime": self.start_time,
            "qosClass": "BestEffort",
            "conditions": [
                cond(
                    "Initialized", self.initialized, None if self.initialized else "ContainersNotInitialized"
                ),
                cond("Ready", all_ready, ready_reason, ready_msg),
                cond("ContainersReady", all_ready, ready_reason, ready_msg),
                cond("PodScheduled", True),
            ],
            "containerStatuses": [c.as_status(images.get(n, "")) for n, c in self.containers.items()],
        }
        if self.init_states:
            status["initContainerStatuses"] = [
                c.as_status(init_images.get(n, "")) for n, c in self.init_states.items()
            ]
        return status

    async def _publish(self) -> None:
        """Write the status when it changed (ignoring transition timestamps)."""
        async with self._status_lock:
            status = self.build_status()
            comparable = _without_times(status)
            if comparable == self._last_status:
                return
            old_conditions = {
                c.get("type"): c for c in (self.pod.get("status") or {}).get("conditions") or []
            }
            for condition in status["conditions"]:
                old = old_conditions.get(condition["type"])
                if old and old.get("status") == condition["status"] and old.get("lastTransitionTime"):
                    condition["lastTransitionTime"] = old["lastTransitionTime"]
            try:
                updated = await self.api.patch(
                    PODS, self.namespace, self.name, {"status": status}, subresource="status"
                )
            except NotFound:
                self.request_termination(grace_of(self.pod), finalize=False)
                return
            except ApiError as exc:
                log.warning("pod %s/%s: status write failed: %s", self.namespace, self.name, exc)
                return
            self._last_status = comparable
            self.pod["status"] = updated.get("status") or status


def _without_times(status: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(status)
    out["conditions"] = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status["conditions"]
    ]
    return out
