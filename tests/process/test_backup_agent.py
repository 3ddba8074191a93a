"""Process tests of `kcpshard agent backup`: the real agent program and the real etcdctl against a real etcd
(plain and TLS), reporting on a Job built by `backup_job` in the real API server (the session's control plane,
each test in a namespace of its own)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import ipaddress
import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kcpshard.agent.backup import INTERRUPTED
from kcpshard.agent.snapshot_files import SNAPSHOT_NAME
from kcpshard.api.models import BackupReport, KcpShardSpec
from kcpshard.k8s import backup_job as bj
from kcpshard.k8s.api import JOBS, KCPSHARDS, SECRETS, ApiClient, Conflict
from kcpshard_testkit.etcd import EtcdServer, etcd_binary
from kcpshard_testkit.tcp import free_port
from kcpshard_testkit.waiting import wait_for

SHARD = "alpha"
AGENT = (sys.executable, "-m", "kcpshard.cli")
ETCDCTL = "/usr/bin/etcdctl"


def etcdctl(*args: str, tls: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ETCDCTL_")}
    return subprocess.run(
        [ETCDCTL, *tls, *args], env={**env, "ETCDCTL_API": "3"}, capture_output=True, text=True, timeout=30
    )


def snapshots(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if SNAPSHOT_NAME.match(p.name)) if directory.exists() else []


# -- fixtures -------------------------------------------------------------------------------------------


@dataclass
class Backup:
    """One backup: the Job in the API server (in the test's namespace) and the agent process its command line
    describes."""

    api: ApiClient
    kubeconfig: Path
    namespace: str
    workdir: Path
    procs: list[asyncio.subprocess.Process]

    @property
    def directory(self) -> Path:
        return self.workdir / "backups"

    async def job(self, store: dict[str, Any], attempt: int = 0) -> dict[str, Any]:
        """Create the KcpShard and its backup Job (as the operator would) and return the Job.

        The control plane's Job controller sees it, but makes no pod: the Job's ServiceAccount (the
        operator's to make) is not there, so its pods are refused (and no kubelet would run one). The agent
        started by the test is the Job's only worker."""
        shard_body = {
            "apiVersion": "kcpshard.dev/v1alpha1",
            "kind": "KcpShard",
            "metadata": {"name": SHARD, "namespace": self.namespace},
            "spec": {
                "kcp": {"version": "v0.32.1"},
                "node": "local",
                "store": store,
                "front": {"port": 16443},
                "roll": {"backup": True, "backupTimeoutSeconds": 60},
            },
        }
        try:
            shard = await self.api.create(KCPSHARDS, self.namespace, shard_body)
        except Conflict:
            shard = await self.api.get(KCPSHARDS, self.namespace, SHARD)
        spec = KcpShardSpec.model_validate(shard["spec"])
        job = bj.backup_job(shard, spec, revision="0123456789abcdef", attempt=attempt, agent_command=AGENT)
        return await self.api.create(JOBS, self.namespace, job)

    def command(self, job: dict[str, Any], **overrides: str) -> list[str]:
        """The Job's own command, with the node's backup dir moved into the test's folder."""
        command = list(job["spec"]["template"]["spec"]["containers"][0]["command"])
        flags = {"--dir": str(self.directory), **overrides}
        for flag, value in flags.items():
            if flag in command:
                command[command.index(flag) + 1] = value
            else:
                command += [flag, value]
        return command

    async def run(self, command: list[str], env: dict[str, str] | None = None, seconds: float = 60) -> Result:
        proc = await self.start(command, env)
        out, err = await asyncio.wait_for(proc.communicate(), seconds)
        assert proc.returncode is not None
        return Result(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))

    async def start(
        self, command: list[str], env: dict[str, str] | None = None
    ) -> asyncio.subprocess.Process:
        full_env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), **(env or {})}
        proc = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=full_env,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    async def annotations(self, job: dict[str, Any]) -> dict[str, str]:
        fresh = await self.api.get(JOBS, self.namespace, job["metadata"]["name"])
        return dict(fresh["metadata"].get("annotations") or {})

    async def result(self, job: dict[str, Any]) -> BackupReport | str | None:
        return bj.backup_result(await self.api.get(JOBS, self.namespace, job["metadata"]["name"]))


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
async def backup(tmp_path: Path, kubeconfig: Path, namespace: str, api: ApiClient) -> AsyncIterator[Backup]:
    b = Backup(api, kubeconfig, namespace, tmp_path, [])
    yield b
    for proc in b.procs:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()


def etcd_store(*endpoints: str, tls_secret: str | None = None) -> dict[str, Any]:
    etcd: dict[str, Any] = {"endpoints": list(endpoints)}
    if tls_secret:
        etcd["tlsSecretRef"] = {"name": tls_secret}
    return {"etcd": etcd}


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens: connection refused


def etcdctl_pids(marker: str) -> list[int]:
    """etcdctl processes whose command line holds `marker` (zombies excluded)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if Path(argv[0]).name == "etcdctl" and any(marker in a for a in argv) and state != "Z":
                found.append(int(entry.name))
    return found


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


# -- tests ----------------------------------------------------------------------------------------------


async def test_snapshot_is_saved_private_readable_and_reported(etcd: EtcdServer, backup: Backup) -> None:
    marker = "backup-marker-7f3a9c"
    for i in range(3):
        assert (
            etcdctl(f"--endpoints={etcd.endpoint}", "put", f"/registry/k{i}", f"{marker}-{i}").returncode == 0
        )
    job = await backup.job(etcd_store(etcd.endpoint))

    result = await backup.run(backup.command(job))

    assert result.returncode == 0, result.stderr
    (path,) = snapshots(backup.directory)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(backup.directory.stat().st_mode) == 0o700
    assert path.name.endswith(f"-{job['metadata']['name']}.db")
    status = etcdctl("snapshot", "status", "-w", "json", str(path))
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["totalKey"] >= 3
    assert f"{marker}-2".encode() in path.read_bytes()  # the value put before is in the snapshot
    report = await backup.result(job)
    assert isinstance(report, BackupReport)
    assert report.path == str(path)
    assert report.size_bytes == path.stat().st_size
    assert report.job == job["metadata"]["name"]
    notes = await backup.annotations(job)
    assert bj.ANNOTATION_ERROR not in notes
    assert len(notes[bj.ANNOTATION_SECONDS].split(".")[1]) == 3


async def test_unreachable_etcd_is_reported_and_leaves_no_file(backup: Backup) -> None:
    url = closed_port_url()
    job = await backup.job(etcd_store(url))

    result = await backup.run(backup.command(job, **{"--connect-timeout": "1"}))

    assert result.returncode == 1
    error = await backup.result(job)
    assert isinstance(error, str)
    assert error.startswith("etcdctl snapshot save failed: ")
    assert error.endswith(f"(endpoints {url})")
    assert "connection refused" in error
    assert "\n" not in error
    # One line for a person on stderr, the same message; no traceback.
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == f"kcpshard agent backup: {error}"
    assert list(backup.directory.iterdir()) == []


async def test_first_endpoint_down_second_used(etcd: EtcdServer, backup: Backup) -> None:
    down = closed_port_url()
    job = await backup.job(etcd_store(down, etcd.endpoint))

    result = await backup.run(backup.command(job, **{"--connect-timeout": "1"}))

    assert result.returncode == 0, result.stderr
    report = await backup.result(job)
    assert isinstance(report, BackupReport)
    assert Path(report.path).exists()


async def test_keep_prunes_older_snapshots(etcd: EtcdServer, backup: Backup) -> None:
    backup.directory.mkdir(mode=0o700)
    old = [backup.directory / f"2020010{d}T120000Z-alpha-backup-old-{d}.db" for d in range(1, 5)]
    for path in old:
        path.write_bytes(b"old snapshot")
    stale_part = backup.directory / "20200101T000000Z-alpha-backup-killed.db.part"
    stale_part.write_bytes(b"partial")
    unrelated = backup.directory / "README"
    unrelated.write_text("kept: not a snapshot")
    job = await backup.job(etcd_store(etcd.endpoint))

    result = await backup.run(backup.command(job, **{"--keep": "2"}))

    assert result.returncode == 0, result.stderr
    report = await backup.result(job)
    assert isinstance(report, BackupReport)
    assert snapshots(backup.directory) == sorted([old[-1], Path(report.path)])
    assert not stale_part.exists()
    assert unrelated.exists()


HANGING_SAVE = """#!/bin/sh
# etcdctl whose `snapshot save` starts its .part file and then never finishes (a stuck etcd).
for a in "$@"; do last="$a"; done
case " $* " in
  *" snapshot save "*) echo $$ > "$(dirname "$0")/save.pid"; : > "$last.part"; exec sleep 300 ;;
esac
exec /usr/bin/etcdctl "$@"
"""


async def test_save_stuck_past_the_timeout_is_killed_and_cleaned_up(
    tmp_path: Path, etcd: EtcdServer, backup: Backup
) -> None:
    fake = tmp_path / "bin" / "etcdctl"
    fake.parent.mkdir()
    fake.write_text(HANGING_SAVE)
    fake.chmod(0o755)
    job = await backup.job(etcd_store(etcd.endpoint))

    result = await backup.run(backup.command(job, **{"--timeout": "3", "--etcdctl": str(fake)}))

    assert result.returncode == 1
    error = await backup.result(job)
    assert error == f"etcdctl snapshot save failed: no snapshot after 3s (endpoints {etcd.endpoint})"
    assert list(backup.directory.iterdir()) == []  # the .part file is gone
    assert not pid_alive(int((fake.parent / "save.pid").read_text()))


async def test_missing_etcdctl_is_a_clear_error(tmp_path: Path, backup: Backup) -> None:
    job = await backup.job(etcd_store("http://127.0.0.1:2379"))
    empty = tmp_path / "empty-path"
    empty.mkdir()

    result = await backup.run(backup.command(job), env={"PATH": str(empty)})

    assert result.returncode == 1
    error = await backup.result(job)
    assert isinstance(error, str) and "etcdctl not found in PATH" in error
    assert "Traceback" not in result.stderr


async def test_stop_signal_kills_etcdctl_and_reports(backup: Backup) -> None:
    # A port that accepts connections and never answers: etcdctl waits on it until its timeout.
    silent = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    try:
        job = await backup.job(etcd_store(url))
        proc = await backup.start(backup.command(job, **{"--connect-timeout": "60"}))
        await wait_for(
            "etcdctl to run", lambda: asyncio.to_thread(etcdctl_pids, f"127.0.0.1:{port}"), timeout=20
        )

        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 30)

        assert proc.returncode == 1
        assert await backup.result(job) == INTERRUPTED
        assert etcdctl_pids(f"127.0.0.1:{port}") == []
        assert "Traceback" not in err.decode()
    finally:
        silent.close()


# -- TLS ------------------------------------------------------------------------------------------------


def _pem(obj: Any) -> bytes:
    if isinstance(obj, x509.Certificate):
        return obj.public_bytes(serialization.Encoding.PEM)
    return bytes(
        obj.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


def make_pki() -> dict[str, bytes]:
    """A CA and one leaf for 127.0.0.1 good for server and client auth (etcd's and etcdctl's)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-etcd-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "etcd")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return {"ca.crt": _pem(ca), "tls.crt": _pem(leaf), "tls.key": _pem(key)}


@dataclass
class TlsEtcd:
    endpoint: str
    pki: dict[str, bytes]
    flags: list[str]


@pytest.fixture
async def tls_etcd(tmp_path: Path) -> AsyncIterator[TlsEtcd]:
    """etcd serving clients over TLS and requiring a client certificate."""
    pki_dir = tmp_path / "pki"
    pki_dir.mkdir(mode=0o700)
    pki = make_pki()
    for name, data in pki.items():
        fd = os.open(pki_dir / name, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    client, peer = free_port(), free_port()
    endpoint, peer_url = f"https://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
    args = [
        etcd_binary(),
        "--name=tls",
        f"--data-dir={tmp_path / 'tls.data'}",
        f"--listen-client-urls={endpoint}",
        f"--advertise-client-urls={endpoint}",
        f"--listen-peer-urls={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=tls={peer_url}",
        f"--cert-file={pki_dir / 'tls.crt'}",
        f"--key-file={pki_dir / 'tls.key'}",
        f"--trusted-ca-file={pki_dir / 'ca.crt'}",
        "--client-cert-auth",
    ]
    flags = [
        f"--cacert={pki_dir / 'ca.crt'}",
        f"--cert={pki_dir / 'tls.crt'}",
        f"--key={pki_dir / 'tls.key'}",
    ]
    with open(tmp_path / "tls-etcd.log", "wb") as log:
        proc = subprocess.Popen(
            args, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
        )

    async def serving() -> bool:
        assert proc.poll() is None, (tmp_path / "tls-etcd.log").read_text(errors="replace")
        health = await asyncio.to_thread(etcdctl, f"--endpoints={endpoint}", "endpoint", "health", tls=flags)
        return health.returncode == 0

    try:
        await wait_for("TLS etcd to serve", serving, timeout=20, interval=0.05)
        yield TlsEtcd(endpoint, pki, flags)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


async def test_tls_material_comes_from_the_secret_and_is_not_left_behind(
    tmp_path: Path, tls_etcd: TlsEtcd, backup: Backup
) -> None:
    data = {name: base64.b64encode(value).decode() for name, value in tls_etcd.pki.items()}
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "etcd-client"}, "data": data}
    await backup.api.create(SECRETS, backup.namespace, secret)
    assert (
        etcdctl(f"--endpoints={tls_etcd.endpoint}", "put", "/tls-key", "v", tls=tls_etcd.flags).returncode
        == 0
    )
    job = await backup.job(etcd_store(tls_etcd.endpoint, tls_secret="etcd-client"))
    tmpdir = tmp_path / "agent-tmp"
    tmpdir.mkdir()

    result = await backup.run(backup.command(job), env={"TMPDIR": str(tmpdir)})

    assert result.returncode == 0, result.stderr
    report = await backup.result(job)
    assert isinstance(report, BackupReport)
    assert etcdctl("snapshot", "status", str(report.path)).returncode == 0
    assert list(tmpdir.iterdir()) == []  # the decoded key material is gone
    key_text = tls_etcd.pki["tls.key"].decode()
    assert "PRIVATE KEY" not in result.stdout + result.stderr
    assert key_text not in json.dumps(await backup.annotations(job))


async def test_tls_endpoint_without_the_secret_fails_clearly(tls_etcd: TlsEtcd, backup: Backup) -> None:
    job = await backup.job(etcd_store(tls_etcd.endpoint, tls_secret="missing"))

    result = await backup.run(backup.command(job))

    assert result.returncode == 1
    assert await backup.result(job) == f"TLS Secret {backup.namespace}/missing not found"
