"""Exec credential plugins (client.authentication.k8s.io v1 and v1beta1): a token or a client certificate,
run again once expirationTimestamp has passed and not before, and after a 401; never shown in logs."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from kcpshard.k8s import credentials as credentials_module
from kcpshard.k8s.api import ApiClient, ApiError
from kcpshard.k8s.connection import Connection
from kcpshard.k8s.credentials import Credentials, KubeconfigError, load_credentials
from kcpshard_testkit.kinds import CONFIGMAPS
from kcpshard_testkit.pki import CertificateAuthority
from kubeconfigs import cluster, exec_user, runs, write_kubeconfig, write_plugin

CA = CertificateAuthority("test-ca")
ME = CA.client("exec-user", "team")
T0 = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
EXPIRES = "2030-01-01T12:10:00Z"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def kubeconfig(tmp_path: Path, version: str = "v1", **env: str) -> tuple[Path, Path]:
    """A kubeconfig whose user is the test plugin; returns it and the plugin's run counter."""
    counter = tmp_path / "runs"
    plugin = write_plugin(tmp_path / "bin")
    path = write_kubeconfig(
        tmp_path / "kubeconfig",
        clusters={"c": cluster("https://127.0.0.1:6443", CA.cert_pem)},
        users={"u": exec_user(plugin, version, PLUGIN_RUNS=str(counter), **env)},
        contexts={"ctx": {"cluster": "c", "user": "u", "namespace": "team"}},
        current="ctx",
    )
    return path, counter


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_a_token(tmp_path: Path, version: str) -> None:
    path, counter = kubeconfig(tmp_path, version, PLUGIN_TOKEN="tok")
    creds = load_credentials(path)
    assert (creds.authorization, creds.namespace, creds.ca_data) == ("Bearer tok-1", "team", CA.cert_pem)
    assert creds.expires_at is None and not creds.stale()
    assert runs(counter) == 1


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_a_client_certificate(tmp_path: Path, version: str) -> None:
    ME.write(tmp_path / "tls.crt", tmp_path / "tls.key")
    path, counter = kubeconfig(
        tmp_path, version, PLUGIN_CERT=str(tmp_path / "tls.crt"), PLUGIN_KEY=str(tmp_path / "tls.key")
    )
    creds = load_credentials(path)
    assert (creds.cert_data, creds.key_data, creds.token) == (ME.cert, ME.key, None)
    creds.ssl_context()  # the pair loads
    assert "client_cert=<hidden>" in repr(creds) and ME.key.decode().splitlines()[1] not in repr(creds)
    assert runs(counter) == 1


def test_the_expiry_is_honoured(tmp_path: Path) -> None:
    path, counter = kubeconfig(tmp_path, PLUGIN_TOKEN="tok", PLUGIN_EXPIRES=EXPIRES)
    creds = load_credentials(path)
    assert creds.expires_at == dt.datetime(2030, 1, 1, 12, 10, tzinfo=dt.UTC)
    assert not creds.stale(creds.expires_at - dt.timedelta(seconds=1))
    assert creds.stale(creds.expires_at)
    again = creds.refreshed()
    assert (again.token, runs(counter)) == ("tok-2", 2)


def test_a_relative_command_is_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    write_plugin(tmp_path / "cfg" / "bin")
    user = exec_user("./bin/credential-plugin", PLUGIN_RUNS=str(tmp_path / "runs"), PLUGIN_TOKEN="rel")
    path = write_kubeconfig(
        tmp_path / "cfg" / "config",
        clusters={"c": cluster("https://127.0.0.1:1")},
        users={"u": user},
        contexts={"x": {"cluster": "c", "user": "u"}},
        current="x",
    )
    assert load_credentials(path).token == "rel-1"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PLUGIN_FAIL": "1"}, "process returned 3. the identity provider says no"),
        ({}, "neither a token nor a certificate"),
        ({"PLUGIN_TOKEN": "t", "PLUGIN_EXPIRES": "tomorrow"}, "bad expirationTimestamp"),
    ],
)
def test_a_failing_plugin_is_an_error_not_a_silent_anonymous_user(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    path, _ = kubeconfig(tmp_path, **env)
    with pytest.raises(KubeconfigError, match="exec plugin") as err:
        load_credentials(path)
    assert message in str(err.value) and "user 'u'" in str(err.value)


# ----- the ApiClient: refreshed when stale and after a 401, cheaply otherwise ---------------------------


class Recorder:
    """An API server in memory: records each request's Authorization, answers 401 for refused tokens."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.refused: set[str] = set()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        self.seen.append(token)
        if token in self.refused:
            return httpx.Response(401, json={"kind": "Status", "code": 401, "reason": "Unauthorized"})
        return httpx.Response(200, json={"kind": "ConfigMap", "metadata": {"name": "x"}})


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    recorder = Recorder()

    def connect(self: Connection, creds: Credentials) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=creds.server, transport=httpx.MockTransport(recorder))

    monkeypatch.setattr(Connection, "_connect", connect)
    return recorder


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Callable[[float], None]:
    now = [T0]
    monkeypatch.setattr(credentials_module, "_now", lambda: now[0])
    return lambda seconds: now.__setitem__(0, T0 + dt.timedelta(seconds=seconds))


async def test_the_client_runs_the_plugin_again_after_expiry_not_before(
    tmp_path: Path, server: Recorder, clock: Callable[[float], None]
) -> None:
    path, counter = kubeconfig(tmp_path, PLUGIN_TOKEN="tok", PLUGIN_EXPIRES=EXPIRES)
    async with ApiClient(load_credentials(path)) as api:
        for seconds in (0, 60, 599):  # before 12:10
            clock(seconds)
            await api.get(CONFIGMAPS, "ns", "x")
        assert (server.seen, runs(counter)) == (["tok-1"] * 3, 1)
        kubeconfig(
            tmp_path, PLUGIN_TOKEN="tok", PLUGIN_EXPIRES="2030-01-01T13:00:00Z"
        )  # the next lasts longer
        clock(600)
        await api.get(CONFIGMAPS, "ns", "x")
        await api.get(CONFIGMAPS, "ns", "x")
        assert (server.seen[3:], runs(counter)) == (["tok-2", "tok-2"], 2)


async def test_a_401_refreshes_once_and_tries_again(
    tmp_path: Path, server: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    path, counter = kubeconfig(tmp_path, PLUGIN_TOKEN="tok")
    async with ApiClient(load_credentials(path)) as api:
        server.refused.add("tok-1")  # revoked
        await api.get(CONFIGMAPS, "ns", "x")
        assert (server.seen, runs(counter)) == (["tok-1", "tok-2"], 2)
        server.refused.update({"tok-2", "tok-3"})  # refused for good: one retry, then the 401
        with pytest.raises(ApiError) as err:
            await api.get(CONFIGMAPS, "ns", "x")
        assert err.value.status == 401 and server.seen[2:] == ["tok-2", "tok-3"]
    assert "tok-" not in caplog.text + str(err.value)
    assert "credentials refreshed (kubeconfig" in caplog.text


async def test_a_static_token_is_not_retried(tmp_path: Path, server: Recorder) -> None:
    server.refused.add("fixed")
    async with ApiClient(Credentials(server="https://x", token="fixed")) as api:
        with pytest.raises(ApiError):
            await api.get(CONFIGMAPS, "ns", "x")
    assert server.seen == ["fixed"]
