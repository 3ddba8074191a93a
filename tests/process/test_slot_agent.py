"""Process tests of the host agent (`kcpshard agent slot`): the real agent program against the real API server
(the session's control plane, each test in a namespace of its own), with the stand-in kcp on a real etcd (or
small shell commands where only the exit matters)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import ssl
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

import httpx
import pytest
import yaml

from kcpshard.agent import seed
from kcpshard.k8s.api import KCPSHARDS, KCPSLOTS, NAMESPACES, SECRETS, ApiClient
from kcpshard.kcp.flags import KINE_ENDPOINT_ENV, KINE_URL
from kcpshard.kcp.readyz import client_for
from kcpshard_testkit.devenv import DevEnvInfo
from kcpshard_testkit.etcd import EtcdServer
from kcpshard_testkit.fakekcp import kcp_binary
from kcpshard_testkit.pki import CertificateAuthority
from kcpshard_testkit.tcp import free_port
from kcpshard_testkit.tls import namespaced_kubeconfig
from kcpshard_testkit.tools import tool
from kcpshard_testkit.waiting import wait_for

SHARD = "alpha"
SECRET = "alpha-shared"
FAST = {"KCP_FAKE_RSA_BITS": "2048", "KCP_FAKE_STARTUP_SECONDS": "0.2"}
T = TypeVar("T")


async def eventually(what: str, probe: Callable[[], Awaitable[T | None]], seconds: float = 30.0) -> T:
    """Poll `probe` until it returns something truthy; fail naming `what` at the deadline."""
    return await wait_for(what, probe, timeout=seconds, interval=0.05)


def cond(status: dict[str, Any], type_: str) -> tuple[str, str, str] | None:
    for c in status.get("conditions") or []:
        if c["type"] == type_:
            return c["status"], c["reason"], c.get("message", "")
    return None


def pid_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie no longer runs
    except FileNotFoundError:
        return True


def _log_file(path: Path) -> IO[bytes]:
    return open(path, "wb")  # the child gets its own copy of the descriptor


class Agent:
    """One `kcpshard agent slot` process, in its own process group, logs in files."""

    def __init__(
        self, workdir: Path, kubeconfig: Path, namespace: str, slot: str, kcp: Sequence[str], **opts: Any
    ):
        self.workdir = workdir
        self.namespace = namespace
        self.slot = slot
        self.root = workdir / f"root-{slot}"
        self.out = workdir / f"agent-{slot}.out"
        self.err = workdir / f"agent-{slot}.err"
        self.kubeconfig = kubeconfig
        self.kcp = [part.replace("{root}", str(self.root)) for part in kcp]
        self.env: dict[str, str] = opts.get("env") or {}
        self.stop_timeout = str(opts.get("stop_timeout", 10))
        self.args: list[str] = list(opts.get("args") or [])  # more agent options, before `--`
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> Agent:
        args = [sys.executable, "-m", "kcpshard.cli", "agent", "slot", "--namespace", self.namespace]
        args += ["--slot", self.slot]
        args += ["--secret", SECRET, "--root-dir", str(self.root), "--job-name", f"{self.slot}-job-1"]
        args += ["--stop-timeout", self.stop_timeout, *self.args, "--", *self.kcp]
        env = {**os.environ, **FAST, **self.env, "KUBECONFIG": str(self.kubeconfig)}
        env.update(POD_UID=f"uid-{self.slot}", POD_NAME=f"{self.slot}-pod")
        with _log_file(self.out) as out, _log_file(self.err) as err:
            self.proc = await asyncio.create_subprocess_exec(
                *args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=env,
                start_new_session=True,
            )
        return self

    async def wait(self, seconds: float = 30.0) -> int:
        assert self.proc is not None
        return await asyncio.wait_for(self.proc.wait(), seconds)

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def logs(self) -> str:
        return self.out.read_text(errors="replace") + self.err.read_text(errors="replace")

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            await self.proc.wait()


def ns(api: ApiClient) -> str:
    """The test's namespace: that of the client's kubeconfig context (the `kubeconfig` fixture's)."""
    return api.default_namespace


async def install_shard(api: ApiClient) -> None:
    """The KcpShard and its two KcpSlots, in the client's namespace."""
    await api.create(KCPSHARDS, ns(api), shard_body(ns(api)))
    for slot in ("a", "b"):
        await api.create(KCPSLOTS, ns(api), slot_body(ns(api), slot))


@pytest.fixture
async def api(kubeconfig: Path) -> AsyncIterator[ApiClient]:
    async with ApiClient.from_kubeconfig(kubeconfig) as client:
        await install_shard(client)
        yield client


@pytest.fixture
async def agents(
    tmp_path: Path, kubeconfig: Path, namespace: str
) -> AsyncIterator[Callable[..., Awaitable[Agent]]]:
    """Start agents (by default with the test's kubeconfig, in its namespace); all killed at the end."""
    started: list[Agent] = []
    kcp_pids: list[int] = []

    async def start(slot: str, kcp: Sequence[str], *, config: Path = kubeconfig, **opts: Any) -> Agent:
        agent = await Agent(tmp_path, config, namespace, slot, kcp, **opts).start()
        started.append(agent)
        return agent

    start.kcp_pids = kcp_pids  # type: ignore[attr-defined]
    yield start
    for agent in started:
        await agent.kill()
    for pid in kcp_pids:  # the agent's death kills kcp (PDEATHSIG); make sure anyway
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def shard_body(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "KcpShard",
        "metadata": {"name": SHARD, "namespace": namespace},
        "spec": {
            "kcp": {"version": "v0.32.1"},
            "node": "local",
            "store": {"etcd": {"endpoints": ["http://127.0.0.1:2379"]}},
            "front": {"port": 16443},
        },
    }


def slot_body(namespace: str, slot: str) -> dict[str, Any]:
    return {
        "apiVersion": "kcpshard.dev/v1alpha1",
        "kind": "KcpSlot",
        "metadata": {"name": f"{SHARD}-{slot}", "namespace": namespace},
        "spec": {"shard": SHARD, "slot": slot, "revision": "r1"},
    }


async def create_secret(api: ApiClient, files: dict[str, bytes], name: str = SECRET) -> dict[str, Any]:
    data = {key: base64.b64encode(value).decode() for key, value in files.items()}
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": ns(api)},
        "data": data,
    }
    return await api.create(SECRETS, ns(api), body)


async def slot_status(api: ApiClient, slot: str) -> dict[str, Any]:
    return dict((await api.get(KCPSLOTS, ns(api), f"{SHARD}-{slot}")).get("status") or {})


async def wait_condition(
    api: ApiClient, slot: str, type_: str, status: str, seconds: float = 30.0
) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        st = await slot_status(api, slot)
        found = cond(st, type_)
        return st if found is not None and found[0] == status else None

    return await eventually(f"{type_}={status} on slot {slot}", probe, seconds)


def fake_kcp(etcd: EtcdServer | str, *extra: str) -> list[str]:
    """The stand-in kcp on `etcd` (a server or an endpoint URL)."""
    endpoint = etcd if isinstance(etcd, str) else etcd.endpoint
    return [
        kcp_binary(),
        "start",
        "--root-directory={root}",
        "--secure-port=0",
        "--experimental-bind-free-port",
        f"--etcd-servers={endpoint}",
        "--shard-base-url=https://127.0.0.1:16443",
        "--shutdown-delay-duration=1s",
        *extra,
    ]


async def readyz(port: int, root: Path) -> int:
    ca = seed.last_certificate((root / "apiserver.crt").read_bytes())
    async with client_for(ca) as client:
        return (await client.get(f"https://127.0.0.1:{port}/readyz")).status_code


async def test_fresh_start_uploads_then_second_slot_seeds_then_stop_and_crash(
    api: ApiClient, etcd: EtcdServer, agents: Any
) -> None:
    await create_secret(api, {})
    a = await agents(f"{SHARD}-a", fake_kcp(etcd))

    st_a = await wait_condition(api, "a", "Ready", "True")
    agents.kcp_pids.append(st_a["pid"])
    assert cond(st_a, "Ready")[1] == "ReadyzOK"  # type: ignore[index]
    assert cond(st_a, "Seeded")[:2] == ("True", "FreshStart")  # type: ignore[index]
    port_a = st_a["port"]
    assert cond(st_a, "Listening") == ("True", "Bound", f"listening on 127.0.0.1:{port_a}")
    assert st_a["podUID"] == f"uid-{SHARD}-a" and st_a["jobName"] == f"{SHARD}-a-job-1"
    assert st_a["startedAt"] and st_a["readyAt"]
    assert await readyz(port_a, a.root) == 200
    # kcp's own log passes through the agent's stdout.
    assert f"Serving securely on 127.0.0.1:{port_a}" in a.out.read_text(errors="replace")

    async def uploaded() -> dict[str, Any] | None:
        secret = await api.get(SECRETS, ns(api), SECRET)
        return secret if seed.plan_seed(secret).kind is seed.SeedKind.SEEDED else None

    secret = await eventually("the root material in the Secret", uploaded)
    assert seed.plan_seed(secret).files == seed.read_material(a.root)
    st_a = await eventually(
        "the upload noted on the slot",
        lambda: _with(api, "a", lambda s: "uploaded to Secret" in (cond(s, "Seeded") or ("", "", ""))[2]),
    )
    assert cond(st_a, "Seeded") == ("True", "FreshStart", f"root material uploaded to Secret {SECRET}")

    b = await agents(f"{SHARD}-b", fake_kcp(etcd))
    st_b = await wait_condition(api, "b", "Ready", "True")
    agents.kcp_pids.append(st_b["pid"])
    assert cond(st_b, "Seeded")[:2] == ("True", "Seeded")  # type: ignore[index]
    assert st_b["port"] != port_a
    token_a = seed.shard_admin_token((a.root / "admin.kubeconfig").read_bytes())
    token_b = seed.shard_admin_token((b.root / "admin.kubeconfig").read_bytes())
    assert token_a and token_a == token_b
    assert (a.root / "apiserver.crt").read_bytes() == (b.root / "apiserver.crt").read_bytes()
    for name in seed.ROOT_FILES:
        assert (b.root / name).stat().st_mode & 0o077 == 0, name
    # No token or key in what the agents print.
    for log in (a.err.read_text(), b.err.read_text()):
        assert token_a not in log

    # SIGTERM to the agent: kcp stops, the exit is reported, the agent exits 0.
    a.signal(signal.SIGTERM)
    assert await a.wait() == 0
    st_a = await slot_status(api, "a")
    assert st_a["exitedAt"] and st_a["exitCode"] == 0
    # When kcp got SIGTERM, before its exit (the bench splits the leaderless gap at it).
    assert st_a["stoppingAt"] and st_a["stoppingAt"] <= st_a["exitedAt"]
    assert cond(st_a, "Ready")[:2] == ("False", "Exited")  # type: ignore[index]
    assert pid_gone(st_a["pid"])

    # kcp dies by itself: ProcessExited, and the agent exits 1 (the Job fails).
    os.kill(st_b["pid"], signal.SIGKILL)
    assert await b.wait() == 1
    st_b = await slot_status(api, "b")
    ready = cond(st_b, "Ready")
    assert ready is not None and ready[:2] == ("False", "ProcessExited")
    assert "SIGKILL" in ready[2]
    assert st_b["exitCode"] == 137 and st_b["exitedAt"]
    assert st_b.get("stoppingAt") is None  # no SIGTERM: it died by itself


async def test_a_stopping_kcp_holding_a_watch_after_its_listener_closed_is_reported(
    api: ApiClient, etcd: EtcdServer, agents: Any
) -> None:
    await create_secret(api, {})
    a = await agents(f"{SHARD}-a", fake_kcp(etcd))
    st = await wait_condition(api, "a", "Ready", "True")
    agents.kcp_pids.append(st["pid"])
    ca = seed.last_certificate((a.root / "apiserver.crt").read_bytes())
    token = seed.shard_admin_token((a.root / "admin.kubeconfig").read_bytes())
    url = f"https://127.0.0.1:{st['port']}/clusters/root/api/v1/namespaces/default/configmaps?watch=1"
    async with (
        client_for(ca, timeout=120) as client,
        client.stream("GET", url, headers={"Authorization": f"Bearer {token}"}) as watch,
    ):
        assert watch.status_code == 200
        a.signal(signal.SIGTERM)
        # After its shutdown delay kcp closes its listener, but holds the open watch (up to 60 s).
        unlistened = await eventually(
            "Listening=False/ShuttingDown",
            lambda: _with(api, "a", lambda s: (cond(s, "Listening") or ("", ""))[1] == "ShuttingDown"),
        )
        assert cond(unlistened, "Listening")[:2] == ("False", "ShuttingDown")  # type: ignore[index]
        assert not pid_gone(st["pid"])
    # The watch closed (the front closes it in a roll): kcp exits at once, and the agent reports it.
    assert await a.wait() == 0
    st = await slot_status(api, "a")
    assert cond(st, "Listening")[:2] == ("False", "Exited")  # type: ignore[index]


async def _with(api: ApiClient, slot: str, pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    st = await slot_status(api, slot)
    return st if pred(st) else None


async def test_incomplete_secret_is_refused_and_kcp_never_starts(api: ApiClient, agents: Any) -> None:
    files = {"apiserver.crt": b"-----BEGIN CERTIFICATE-----\nsecret-bytes\n", "sa.key": b"secret-key-bytes"}
    await create_secret(api, files)
    # The "kcp" here leaves a file when it runs: it must not.
    a = await agents(f"{SHARD}-a", ["sh", "-c", "touch {root}/kcp-was-started; sleep 30"])
    assert await a.wait() == 1
    st = await slot_status(api, "a")
    seeded = cond(st, "Seeded")
    assert seeded is not None and seeded[:2] == ("False", "IncompleteMaterial")
    assert "apiserver.key, .admin-token-store, admin.kubeconfig" in seeded[2]
    assert "pid" not in st
    assert not (a.root / "kcp-was-started").exists()
    assert "secret-bytes" not in a.logs() and "secret-key-bytes" not in a.logs()
    assert "Traceback" not in a.logs()
    assert "missing: apiserver.key" in a.err.read_text()


async def test_missing_secret(api: ApiClient, agents: Any) -> None:
    a = await agents(f"{SHARD}-a", ["sh", "-c", "touch {root}/kcp-was-started"])
    assert await a.wait() == 1
    seeded = cond(await slot_status(api, "a"), "Seeded")
    assert seeded is not None and seeded[:2] == ("False", "SecretNotFound")
    assert not (a.root / "kcp-was-started").exists()


async def test_missing_slot_is_one_clear_line(api: ApiClient, agents: Any) -> None:
    a = await agents("nope", ["true"])
    assert await a.wait() == 1
    err = a.err.read_text()
    assert f"KcpSlot {ns(api)}/nope not found" in err
    assert "Traceback" not in err


async def test_crash_report_has_the_last_lines_without_tokens(api: ApiClient, agents: Any) -> None:
    await create_secret(api, {})
    script = "echo first line >&2; echo 'bearer token abc123xyz' >&2; echo last words >&2; exit 3"
    a = await agents(f"{SHARD}-a", ["sh", "-c", script])
    assert await a.wait() == 1
    st = await slot_status(api, "a")
    ready = cond(st, "Ready")
    assert ready is not None and ready[:2] == ("False", "ProcessExited")
    assert "exit code 3" in ready[2] and "first line" in ready[2] and "last words" in ready[2]
    assert "abc123xyz" not in ready[2]
    assert st["exitCode"] == 3
    assert "last words" in a.out.read_text()  # stderr of kcp passes through to the agent's stdout


async def test_two_fresh_slots_cannot_both_upload(api: ApiClient, etcd: EtcdServer, agents: Any) -> None:
    await create_secret(api, {})
    started = [await agents(f"{SHARD}-{slot}", fake_kcp(etcd)) for slot in ("a", "b")]

    async def settled() -> list[tuple[str, str, str]] | None:
        found = [cond(await slot_status(api, slot), "Seeded") for slot in ("a", "b")]
        done = all(
            c is not None
            and ("uploaded" in c[2] or c[1] in ("Seeded", "MaterialConflict") or "is in" in c[2])
            for c in found
        )
        return found if done else None  # type: ignore[return-value]

    seeded = await eventually("both slots settled on the root material", settled)
    secret = await api.get(SECRETS, ns(api), SECRET)
    token = seed.shard_admin_token(seed.plan_seed(secret).files["admin.kubeconfig"])
    winners = [i for i, c in enumerate(seeded) if c[2] == f"root material uploaded to Secret {SECRET}"]
    assert len(winners) == 1, seeded
    for i, (agent, c) in enumerate(zip(started, seeded, strict=True)):
        mine = seed.shard_admin_token((agent.root / "admin.kubeconfig").read_bytes())
        if c[1] == "MaterialConflict":  # lost the race with other material: refuses to go on
            assert c[0] == "False" and mine != token
            assert await agent.wait() == 1
        else:
            assert c[0] == "True" and mine == token, (i, c)


async def test_readyz_failing_after_ready_then_exit(api: ApiClient, etcd: EtcdServer, agents: Any) -> None:
    await create_secret(api, {})
    a = await agents(f"{SHARD}-a", fake_kcp(etcd, "--shutdown-delay-duration=5s"))
    st = await wait_condition(api, "a", "Ready", "True")
    agents.kcp_pids.append(st["pid"])
    # SIGTERM to kcp itself (not the agent): readyz fails at once while kcp keeps serving for the delay.
    os.kill(st["pid"], signal.SIGTERM)
    st = await eventually(
        "Ready=False ReadyzFailing",
        lambda: _with(api, "a", lambda s: (cond(s, "Ready") or ("", "", ""))[1] == "ReadyzFailing"),
    )
    message = cond(st, "Ready")[2]  # type: ignore[index]
    assert message.startswith("[-]")
    assert await a.wait() == 1  # kcp then exited without being asked by the agent
    st = await slot_status(api, "a")
    assert cond(st, "Ready")[:2] == ("False", "ProcessExited")  # type: ignore[index]
    assert st["exitCode"] == 0
    assert "kcp is not ready: [-]" in a.err.read_text()


async def test_stop_timeout_kills_kcp(api: ApiClient, etcd: EtcdServer, agents: Any) -> None:
    await create_secret(api, {})
    a = await agents(f"{SHARD}-a", fake_kcp(etcd), env={"KCP_FAKE_IGNORE_SIGTERM": "1"}, stop_timeout=1)
    # Ready, not just Listening: kcp binds its port before it installs its signal handlers.
    st = await wait_condition(api, "a", "Ready", "True")
    agents.kcp_pids.append(st["pid"])
    a.signal(signal.SIGTERM)
    assert await a.wait() == 0
    st = await slot_status(api, "a")
    assert st["exitCode"] == 137
    ready = cond(st, "Ready")
    assert ready is not None and ready[:2] == ("False", "Exited") and "SIGKILL" in ready[2]
    assert pid_gone(st["pid"])


async def test_second_sigterm_is_forwarded(api: ApiClient, etcd: EtcdServer, agents: Any) -> None:
    await create_secret(api, {})
    # A shutdown delay and a stop timeout far beyond the test's deadline: only the second signal ends kcp.
    kcp = fake_kcp(etcd, "--shutdown-delay-duration=120s")
    a = await agents(f"{SHARD}-a", kcp, stop_timeout=120)
    st = await wait_condition(api, "a", "Ready", "True")
    agents.kcp_pids.append(st["pid"])
    a.signal(signal.SIGTERM)
    st = await eventually(
        "Ready=False Stopping",
        lambda: _with(api, "a", lambda s: cond(s, "Ready")[1] == "Stopping"),  # type: ignore[index]
    )
    a.signal(signal.SIGTERM)
    assert await a.wait(seconds=20) == 0
    st = await slot_status(api, "a")
    assert st["exitCode"] == 1  # kcp's exit on a second signal, not the agent's SIGKILL (137)
    assert cond(st, "Ready")[:2] == ("False", "Exited")  # type: ignore[index]


async def test_stop_without_api_server_still_stops_kcp(
    own_control_plane: DevEnvInfo, namespace: str, etcd: EtcdServer, agents: Any, tmp_path: Path
) -> None:
    plane = own_control_plane
    config = namespaced_kubeconfig(Path(plane.kubeconfig), namespace, tmp_path / "own.kubeconfig")
    async with ApiClient.from_kubeconfig(config) as api:
        await api.create(
            NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
        await install_shard(api)
        await create_secret(api, {})
        a = await agents(f"{SHARD}-a", fake_kcp(etcd), config=config)
        st = await wait_condition(api, "a", "Ready", "True")
        agents.kcp_pids.append(st["pid"])
        # The whole control plane stops (`kcpshard-dev up` ends once its API server and etcd have).
        os.kill(plane.pid, signal.SIGTERM)

        async def api_server_gone() -> bool:
            if not pid_gone(plane.pid):
                return False
            try:
                await api.get(KCPSLOTS, namespace, f"{SHARD}-a")
            except httpx.TransportError:
                return True
            return False

        await eventually("the control plane to stop", api_server_gone, seconds=60)
    assert not pid_gone(st["pid"])  # kcp still runs, its agent with it
    a.signal(signal.SIGTERM)
    assert await a.wait() == 0
    assert pid_gone(st["pid"])
    err = a.err.read_text()
    assert "could not write the status" in err and "kcp stopped: exit code 0" in err
    assert "Traceback" not in err


async def test_kcp_dies_with_the_agent(api: ApiClient, agents: Any) -> None:
    await create_secret(api, {})
    a = await agents(f"{SHARD}-a", ["sleep", "600"])
    st = await eventually("the kcp pid", lambda: _with(api, "a", lambda s: "pid" in s))
    agents.kcp_pids.append(st["pid"])
    assert not pid_gone(st["pid"])
    await a.kill()  # SIGKILL: the agent cannot clean up; PR_SET_PDEATHSIG must

    async def gone() -> bool:
        return pid_gone(st["pid"])

    assert await eventually("kcp to die with its agent", gone, seconds=10)


def test_usage_errors_are_one_line() -> None:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "kcpshard.cli", "agent", "slot", "--namespace", "x"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == "kcpshard agent slot: the kcp command line must follow `--`"


# -- issue 4: store preflight, non-root kubeconfigs, the published kcp-admin kubeconfig ------------------


def processes_naming(text: str) -> list[int]:
    """Pids of running processes whose command line contains `text` (here: a slot's root directory)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if text in cmdline and not pid_gone(int(entry.name)):
            pids.append(int(entry.name))
    return pids


async def test_unreachable_store_stops_before_kcp_starts(api: ApiClient, agents: Any) -> None:
    await create_secret(api, {})
    closed = free_port()
    # Userinfo in the URL must not reach the condition or the log.
    endpoint = f"http://user:hunter2@127.0.0.1:{closed}"
    args = ["--store-endpoint", endpoint, "--store-wait", "1"]
    a = await agents(f"{SHARD}-a", fake_kcp(endpoint), args=args)
    assert await a.wait() == 1
    st = await slot_status(api, "a")
    expected = (
        f"none of the store endpoints answered within 1s: http://127.0.0.1:{closed}: connection refused"
    )
    assert cond(st, "Seeded") == ("False", "StoreUnreachable", expected)
    assert "pid" not in st
    assert not (a.root / "admin.kubeconfig").exists()
    assert processes_naming(str(a.root)) == []
    assert "Serving securely" not in a.logs()
    err = a.err.read_text()
    assert expected in err and "hunter2" not in a.logs()
    assert "Traceback" not in err


async def test_stop_while_waiting_for_the_store(api: ApiClient, agents: Any) -> None:
    await create_secret(api, {})
    endpoint = f"http://127.0.0.1:{free_port()}"
    # A store wait far beyond the test's deadline: only the stop request can end it.
    a = await agents(
        f"{SHARD}-a",
        ["sh", "-c", "touch {root}/kcp-was-started"],
        args=["--store-endpoint", endpoint, "--store-wait", "300"],
    )
    await wait_condition(api, "a", "Seeded", "Unknown")
    a.signal(signal.SIGTERM)
    assert await a.wait(seconds=20) == 0
    st = await slot_status(api, "a")
    assert cond(st, "Ready") == ("False", "Exited", "stopped before kcp started")
    assert not (a.root / "kcp-was-started").exists()


async def test_non_root_kubeconfigs_are_copied_before_kcp_starts(
    api: ApiClient, etcd: EtcdServer, agents: Any
) -> None:
    await create_secret(api, {})
    cache = b"apiVersion: v1\nkind: Config\n# cache-server-kubeconfig-content\n"
    root_shard = b"apiVersion: v1\nkind: Config\n# root-shard-kubeconfig-content\n"
    await create_secret(api, {"kubeconfig": cache}, name="cache-kc")
    await create_secret(api, {"admin.kubeconfig": root_shard, "kubeconfig": b"not this"}, name="root-kc")
    args = ["--store-endpoint", etcd.endpoint, "--cache-kubeconfig-secret", "cache-kc"]
    args += ["--root-shard-kubeconfig-secret", "root-kc:admin.kubeconfig"]
    kcp = fake_kcp(
        etcd,
        "--shard-name=beta",
        "--cache-kubeconfig={root}/cache.kubeconfig",
        "--root-shard-kubeconfig-file={root}/root-shard.kubeconfig",
    )
    a = await agents(f"{SHARD}-a", kcp, args=args)
    st = await wait_condition(api, "a", "Ready", "True")
    agents.kcp_pids.append(st["pid"])
    assert (a.root / "cache.kubeconfig").read_bytes() == cache
    assert (a.root / "root-shard.kubeconfig").read_bytes() == root_shard
    for name in ("cache.kubeconfig", "root-shard.kubeconfig"):
        assert (a.root / name).stat().st_mode & 0o777 == 0o600, name
    seeded = cond(st, "Seeded")
    assert seeded is not None and seeded[0] == "True"
    assert "store endpoint " + etcd.endpoint + " answers" in a.err.read_text()
    assert "cache-server-kubeconfig-content" not in a.logs()
    assert "root-shard-kubeconfig-content" not in a.logs()


async def test_missing_kubeconfig_secret_or_key_stops_before_kcp_starts(api: ApiClient, agents: Any) -> None:
    await create_secret(api, {})
    await create_secret(api, {"other": b"x"}, name="cache-kc")
    kcp = ["sh", "-c", "touch {root}/kcp-was-started"]
    no_key = await agents(f"{SHARD}-a", kcp, args=["--cache-kubeconfig-secret", "cache-kc"])
    no_secret = await agents(f"{SHARD}-b", kcp, args=["--root-shard-kubeconfig-secret", "absent:kc"])
    assert await no_key.wait() == 1 and await no_secret.wait() == 1
    assert cond(await slot_status(api, "a"), "Seeded") == (
        "False",
        "MissingSecret",
        f"Secret {ns(api)}/cache-kc has no key kubeconfig",
    )
    assert cond(await slot_status(api, "b"), "Seeded") == (
        "False",
        "MissingSecret",
        f"Secret {ns(api)}/absent not found",
    )
    for agent in (no_key, no_secret):
        assert not (agent.root / "kcp-was-started").exists()
        assert "Traceback" not in agent.logs()
    assert f"Secret {ns(api)}/cache-kc has no key kubeconfig" in no_key.err.read_text()


async def test_kcp_admin_kubeconfig_is_published_once_ready(
    api: ApiClient, etcd: EtcdServer, agents: Any
) -> None:
    await create_secret(api, {})
    # A Secret of that name from an earlier start: replaced, not kept (the 409 path).
    await create_secret(api, {"kubeconfig": b"stale"}, name="alpha-a-admin")
    front = "https://front.example:6443"
    args = ["--store-endpoint", etcd.endpoint, "--admin-secret", "alpha-a-admin", "--front-url", front]
    a = await agents(f"{SHARD}-a", fake_kcp(etcd), args=args)
    st = await wait_condition(api, "a", "Ready", "True")
    agents.kcp_pids.append(st["pid"])

    async def published() -> dict[str, Any] | None:
        secret = await api.get(SECRETS, ns(api), "alpha-a-admin")
        return secret if secret.get("metadata", {}).get("ownerReferences") else None

    secret = await eventually("the kcp-admin Secret", published)
    assert secret["type"] == "Opaque"
    config = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
    local = yaml.safe_load((a.root / "admin.kubeconfig").read_bytes())
    kcp_admin = next(u["user"]["token"] for u in local["users"] if u["name"] == "kcp-admin")
    assert config["users"] == [{"name": "kcp-admin", "user": {"token": kcp_admin}}]
    assert {c["context"]["user"] for c in config["contexts"]} == {"kcp-admin"}
    servers = [c["cluster"]["server"] for c in config["clusters"]]
    assert servers and all(server.startswith(front + "/") or server == front for server in servers)
    slot = await api.get(KCPSLOTS, ns(api), f"{SHARD}-a")
    (owner,) = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("KcpSlot", f"{SHARD}-a", slot["metadata"]["uid"])
    assert owner["apiVersion"] == "kcpshard.dev/v1alpha1"
    assert "published kcp-admin kubeconfig in Secret alpha-a-admin" in a.err.read_text()
    shard_admin = seed.shard_admin_token((a.root / "admin.kubeconfig").read_bytes())
    assert shard_admin and shard_admin not in str(config)
    assert kcp_admin not in a.logs() and shard_admin not in a.logs()


async def test_a_tls_store_is_checked_with_its_ca_and_kcp_gets_the_files(api: ApiClient, agents: Any) -> None:
    ca, other = CertificateAuthority("store-ca"), CertificateAuthority("another-ca")
    client = ca.client("kcp")
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as folder:
        server_tls.load_cert_chain(*ca.serving("etcd").write(Path(folder) / "s.crt", Path(folder) / "s.key"))
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=server_tls)
    endpoint = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    await create_secret(api, {})
    await create_secret(api, {"ca.crt": other.cert_pem}, name="wrong-ca")
    await create_secret(
        api, {"ca.crt": ca.cert_pem, "tls.crt": client.cert, "tls.key": client.key}, name="tls"
    )
    try:
        wrong = await agents(
            f"{SHARD}-a",
            ["sh", "-c", "touch {root}/kcp-was-started"],
            args=["--store-endpoint", endpoint, "--store-tls-secret", "wrong-ca", "--store-wait", "1"],
        )
        assert await wrong.wait() == 1
        seeded = cond(await slot_status(api, "a"), "Seeded")
        assert seeded is not None and seeded[:2] == ("False", "StoreUnreachable")
        assert "certificate signed by unknown authority" in seeded[2] and f"{ns(api)}/wrong-ca" in seeded[2]
        assert not (wrong.root / "kcp-was-started").exists()
        # The right CA: kcp starts, and finds the files where its --etcd-* flags point, mode 0600.
        copy = "cp -p {root}/etcd-tls/ca.crt {root}/etcd-tls/tls.key {root}/../"
        right = await agents(
            f"{SHARD}-b", ["sh", "-c", copy], args=["--store-endpoint", endpoint, "--store-tls-secret", "tls"]
        )
        await right.wait()
        assert (right.root.parent / "ca.crt").read_bytes() == ca.cert_pem
        assert (right.root.parent / "tls.key").stat().st_mode & 0o777 == 0o600
        assert "BEGIN" not in right.logs() and "BEGIN" not in wrong.logs()
    finally:
        server.close()


# -- store.kine: the agent runs kine before kcp and stops it after -----------------------------------------

DSN = "postgres://kcp:s3cr3tpw@db.example/kcp"


def fake_kine(folder: Path, *, listens: bool = True) -> str:
    """A kine that says where it listens (or never does), notes its pid, and notes when it is stopped."""
    says = """echo 'level=info msg="Kine available at http://127.0.0.1:4321"' >&2""" if listens else "true"
    path = folder / "kine"
    # The trap first: once its pid is noted, a stop is noted too.
    path.write_text(
        f"#!/bin/sh\ntrap 'echo kine-stopped >> {folder}/order; exit 0' TERM\n"
        f"echo $$ > {folder}/kine.pid\n{says}\n"
        "while :; do sleep 0.1; done\n"
    )
    path.chmod(0o755)
    return str(path)


def kcp_on_kine(folder: Path) -> list[str]:
    """A kcp that notes its --etcd-servers and environment, and when it is stopped."""
    # The trap first: once its notes are there, a stop is noted too; each note whole when it appears.
    script = (
        f"trap 'echo kcp-stopped >> {folder}/order; exit 0' TERM; "
        f'echo "$1" > {folder}/kcp.args.part; mv {folder}/kcp.args.part {folder}/kcp.args; '
        f"env > {folder}/kcp.env.part; mv {folder}/kcp.env.part {folder}/kcp.env; "
        "while :; do sleep 0.1; done"
    )
    return ["sh", "-c", script, "kcp", f"--etcd-servers={KINE_URL}"]


async def _file(path: Path) -> str | None:
    return path.read_text() if path.exists() and path.read_text().endswith("\n") else None


async def _slot_on_kine(api: ApiClient, agents: Any, tmp_path: Path) -> Any:
    """A slot agent running kcp_on_kine beside fake_kine, once kcp has started."""
    await create_secret(api, {})
    a = await agents(
        f"{SHARD}-a",
        kcp_on_kine(tmp_path),
        args=["--kine", fake_kine(tmp_path)],
        env={KINE_ENDPOINT_ENV: DSN},
    )
    st = await eventually("the kcp pid", lambda: _with(api, "a", lambda s: "pid" in s))
    agents.kcp_pids.append(st["pid"])
    return a


async def test_kcp_gets_kines_address_and_stops_before_kine(
    api: ApiClient, agents: Any, tmp_path: Path
) -> None:
    a = await _slot_on_kine(api, agents, tmp_path)
    assert await eventually("kcp's args", lambda: _file(tmp_path / "kcp.args")) == (
        "--etcd-servers=http://127.0.0.1:4321\n"
    )
    await eventually("kcp's env", lambda: _file(tmp_path / "kcp.env"))
    assert "PATH=" in (tmp_path / "kcp.env").read_text() and DSN not in (tmp_path / "kcp.env").read_text()
    a.signal(signal.SIGTERM)
    assert await a.wait() == 0
    assert (tmp_path / "order").read_text() == "kcp-stopped\nkine-stopped\n"
    assert cond(await slot_status(api, "a"), "Ready") == ("False", "Exited", "kcp stopped: exit code 0")
    assert "s3cr3tpw" not in a.logs()


async def test_kine_ending_stops_kcp_and_the_slot_says_why(
    api: ApiClient, agents: Any, tmp_path: Path
) -> None:
    a = await _slot_on_kine(api, agents, tmp_path)
    await eventually("kcp's args", lambda: _file(tmp_path / "kcp.args"))
    os.kill(int((tmp_path / "kine.pid").read_text()), signal.SIGKILL)
    assert await a.wait() == 1
    st = await slot_status(api, "a")
    ready = cond(st, "Ready")
    assert ready is not None and ready[:2] == ("False", "StoreExited"), ready
    assert ready[2].startswith("kine ended (killed by SIGKILL (exit code 137)); last lines: "), ready
    assert ready[2].endswith("; kcp stopped: exit code 0"), ready
    assert (tmp_path / "order").read_text() == "kcp-stopped\n"
    assert pid_gone(st["pid"])
    assert "kine ended (killed by SIGKILL" in a.err.read_text() and "Traceback" not in a.err.read_text()


async def test_a_kine_that_cannot_start_fails_the_slot_without_its_dsn(api: ApiClient, agents: Any) -> None:
    await create_secret(api, {})
    # Real kine: it quotes a DSN it cannot parse whole in its last line.
    dsn = "postgres://kcp:s3cr3tpw@127.0.0.1:bad/kcp"
    a = await agents(
        f"{SHARD}-a",
        ["sh", "-c", "touch {root}/kcp-was-started"],
        args=["--kine", str(tool("kine"))],
        env={KINE_ENDPOINT_ENV: dsn},
    )
    assert await a.wait() == 1
    st = await slot_status(api, "a")
    seeded = cond(st, "Seeded")
    assert seeded is not None and seeded[:2] == ("False", "StoreUnreachable"), seeded
    assert "kine ended (exit code 1) before it said where it listens" in seeded[2]
    assert 'parse "[hidden]"' in seeded[2] and "s3cr3tpw" not in seeded[2]
    assert "last lines: FATA[" in seeded[2] and "\x1b" not in seeded[2]  # without kine's colour codes
    assert "s3cr3tpw" not in a.logs() and 'parse "[hidden]"' in a.out.read_text()
    assert not (a.root / "kcp-was-started").exists()


async def test_stop_while_kine_starts(api: ApiClient, agents: Any, tmp_path: Path) -> None:
    await create_secret(api, {})
    # A kine that never says where it listens, and a wait beyond the test's deadline: only the stop ends it.
    a = await agents(
        f"{SHARD}-a",
        ["sh", "-c", "touch {root}/kcp-was-started"],
        args=["--kine", fake_kine(tmp_path, listens=False), "--store-wait", "300"],
        env={KINE_ENDPOINT_ENV: DSN},
    )
    await eventually("kine's pid", lambda: _file(tmp_path / "kine.pid"))
    a.signal(signal.SIGTERM)
    assert await a.wait(seconds=20) == 0
    assert cond(await slot_status(api, "a"), "Ready") == ("False", "Exited", "stopped before kcp started")
    assert (tmp_path / "order").read_text() == "kine-stopped\n"
    assert pid_gone(int((tmp_path / "kine.pid").read_text()))
    assert not (a.root / "kcp-was-started").exists()
