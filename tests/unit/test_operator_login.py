"""The operator reads its credentials one way: kopf's login handler and the operator's ApiClient get the
same Credentials, loaded once; a later login (after a 401 or the expiry) refreshes them for both."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import kopf
import pytest

from kcpshard.controller import handlers, login
from kcpshard.k8s.api import ApiClient
from kcpshard_testkit.pki import CertificateAuthority
from kubeconfigs import cluster, exec_user, runs, write_kubeconfig, write_plugin

CA = CertificateAuthority("test-ca")
LOG = logging.getLogger("test")


def exec_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **env: str) -> Path:
    counter = tmp_path / "runs"
    user = exec_user(write_plugin(tmp_path / "bin"), "v1beta1", PLUGIN_RUNS=str(counter), **env)
    path = write_kubeconfig(
        tmp_path / "kubeconfig",
        clusters={"c": cluster("https://127.0.0.1:6443", CA.cert_pem)},
        users={"u": user},
        contexts={"ctx": {"cluster": "c", "user": "u", "namespace": "kcp-system"}},
        current="ctx",
    )
    monkeypatch.setenv("KUBECONFIG", str(path))
    return counter


async def test_kopf_and_the_api_client_share_one_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = exec_kubeconfig(
        tmp_path, monkeypatch, PLUGIN_TOKEN="tok", PLUGIN_EXPIRES="2099-01-01T00:00:00Z"
    )
    memo = kopf.Memo()
    # kopf runs its login and the startup handlers concurrently: the credentials are loaded once.
    info, _ = await asyncio.gather(
        login.login(memo=memo, logger=LOG),
        handlers.startup(settings=kopf.OperatorSettings(), memo=memo, logger=LOG),
    )
    api = memo.api
    assert isinstance(api, ApiClient) and runs(counter) == 1
    creds = api.credentials
    assert info == login.connection_info(creds)
    assert (info.server, info.ca_data, info.scheme, info.token) == (
        creds.server,
        CA.cert_pem,
        "Bearer",
        "tok-1",
    )
    assert (info.default_namespace, info.expiration) == ("kcp-system", creds.expires_at)
    assert info.expiration is not None and info.certificate_data is None

    # kopf logs in again (a 401, or the expiration): the plugin runs again, for kopf and the client alike
    again = await login.login(memo=memo, logger=LOG)
    assert (again.token, api.credentials.token, runs(counter)) == ("tok-2", "tok-2", 2)
    assert again != info  # kopf refuses a ConnectionInfo equal to one it invalidated
    assert memo.api is api
    await handlers.cleanup(memo=memo)


async def test_a_client_certificate_reaches_kopf_as_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    issued = CA.client("operator", "system:masters")
    issued.write(tmp_path / "tls.crt", tmp_path / "tls.key")
    exec_kubeconfig(
        tmp_path, monkeypatch, PLUGIN_CERT=str(tmp_path / "tls.crt"), PLUGIN_KEY=str(tmp_path / "tls.key")
    )
    memo = kopf.Memo()
    info = await login.login(memo=memo, logger=LOG)
    assert (info.certificate_data, info.private_key_data, info.token) == (issued.cert, issued.key, None)
    assert info.certificate_data == memo.api.credentials.cert_data
    info.as_ssl_context()  # kopf can build its TLS from it
    await memo.api.aclose()


async def test_an_unreadable_kubeconfig_stops_the_operator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(kopf.PermanentError, match="no file of \\$KUBECONFIG exists"):
        await login.login(memo=kopf.Memo(), logger=LOG)


def test_the_login_handler_is_registered_so_kopf_uses_no_other() -> None:
    """Without it kopf would log in through the `kubernetes` package's own loader (its fallback)."""
    from kopf._core.intents.causes import Activity  # kopf exports no name for it

    import kcpshard.controller.main  # noqa: F401  (what `kcpshard operator` imports)

    registry = kopf.get_default_registry()
    assert [h.id for h in registry._activities.get_handlers(activity=Activity.AUTHENTICATION)] == ["login"]
