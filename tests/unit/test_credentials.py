"""kcpshard.k8s.credentials: kubeconfig files as kubectl reads them (merging, paths, contexts), in-cluster,
and secrets kept out of reprs and messages. The exec plugin has its own file (test_credentials_exec.py)."""

from __future__ import annotations

import base64
import os
import ssl
from pathlib import Path

import pytest

from kcpshard.k8s.credentials import Credentials, KubeconfigError, load_credentials
from kcpshard_testkit.pki import CertificateAuthority
from kubeconfigs import cluster, write_kubeconfig

CA = CertificateAuthority("test-ca")
ME = CA.client("someone", "team")
SECRET = "s3cret-token-value"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No outside kubeconfig, home or cluster leaks into a test."""
    for var in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "POD_NAMESPACE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def one(path: Path, server: str = "https://127.0.0.1:6443", user: dict | None = None, **ctx: str) -> Path:
    return write_kubeconfig(
        path,
        clusters={"c": cluster(server, CA.cert_pem)},
        users={"u": user if user is not None else {"token": SECRET}},
        contexts={"ctx": {"cluster": "c", "user": "u", **ctx}},
        current="ctx",
    )


def test_token_and_ca_data_and_a_masked_repr(tmp_path: Path) -> None:
    creds = load_credentials(one(tmp_path / "kc", "https://127.0.0.1:6443/", namespace="work"))
    assert (creds.server, creds.namespace, creds.ca_data) == ("https://127.0.0.1:6443", "work", CA.cert_pem)
    assert creds.authorization == f"Bearer {SECRET}"
    assert not creds.stale() and creds.expires_at is None and creds.reread_at is None
    ctx = creds.ssl_context()
    assert isinstance(ctx, ssl.SSLContext) and ctx.verify_mode == ssl.CERT_REQUIRED
    for text in (repr(creds), str(creds), f"{creds}"):
        assert SECRET not in text and "token=<hidden>" in text and "kubeconfig" in text


def test_client_certificate_data_stays_in_memory_and_out_of_the_repr(tmp_path: Path) -> None:
    user = {
        "client-certificate-data": base64.b64encode(ME.cert).decode(),
        "client-key-data": base64.b64encode(ME.key).decode(),
    }
    creds = load_credentials(one(tmp_path / "kc", user=user))
    assert (creds.cert_data, creds.key_data, creds.token) == (ME.cert, ME.key, None)
    assert isinstance(creds.ssl_context(), ssl.SSLContext)  # the key loads (through a 0600 temp file)
    key_line = ME.key.decode().splitlines()[1]
    assert key_line not in repr(creds) and "client_cert=<hidden>" in repr(creds)
    assert not list(Path(os.environ.get("TMPDIR", "/tmp")).glob("kcpshard-kubeconfig-*"))  # temp dir gone


def test_relative_files_and_a_token_file_read_again(tmp_path: Path) -> None:
    ME.write(tmp_path / "tls.crt", tmp_path / "tls.key")
    (tmp_path / "ca.crt").write_bytes(CA.cert_pem)
    (tmp_path / "token").write_text("first\n")
    user = {"client-certificate": "tls.crt", "client-key": "tls.key", "tokenFile": "token"}
    write_kubeconfig(
        tmp_path / "kc",
        clusters={"c": {"server": "https://127.0.0.1:1", "certificate-authority": "ca.crt"}},
        users={"u": user},
        contexts={"ctx": {"cluster": "c", "user": "u"}},
        current="ctx",
    )
    creds = load_credentials(tmp_path / "kc")
    assert (creds.ca_data, creds.cert_data, creds.token) == (CA.cert_pem, ME.cert, "first")
    # a token file is read again once a minute (client-go's CachedFileTokenSource), not per request
    assert creds.reread_at is not None and not creds.stale()
    assert creds.stale(creds.reread_at)
    (tmp_path / "token").write_text("second")
    assert creds.refreshed().token == "second"


def test_insecure_and_plain_http(tmp_path: Path) -> None:
    path = write_kubeconfig(
        tmp_path / "kc",
        clusters={"s": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}},
        contexts={"s": {"cluster": "s"}},
        current="s",
    )
    ctx = load_credentials(path).ssl_context()
    assert isinstance(ctx, ssl.SSLContext) and ctx.verify_mode == ssl.CERT_NONE
    assert load_credentials(one(tmp_path / "plain", "http://127.0.0.1:8080")).ssl_context() is False


def test_errors_name_the_file_and_never_a_secret(tmp_path: Path) -> None:
    path = one(tmp_path / "kc")
    with pytest.raises(KubeconfigError, match='context "nope" not found') as err:
        load_credentials(path, "nope")
    with pytest.raises(KubeconfigError, match="does not exist"):
        load_credentials(tmp_path / "missing")
    (tmp_path / "bad").write_text("clusters: [")
    with pytest.raises(KubeconfigError, match="not valid YAML"):
        load_credentials(tmp_path / "bad")
    write_kubeconfig(
        tmp_path / "nocurrent", clusters={"c": cluster("https://x")}, contexts={"x": {"cluster": "c"}}
    )
    with pytest.raises(KubeconfigError, match="no current-context set"):
        load_credentials(tmp_path / "nocurrent")
    assert SECRET not in str(err.value)


# ----- $KUBECONFIG with several files: kubectl's merge ----------------------------------------------------


def test_two_files_the_context_in_the_second(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = write_kubeconfig(
        tmp_path / "a" / "config",
        clusters={"decoy": cluster("https://127.0.0.1:9")},
        contexts={"decoy": {"cluster": "decoy"}},
    )
    second = one(tmp_path / "b" / "config", "https://127.0.0.1:2", namespace="team")
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'absent'}:{first}:{second}")
    creds = load_credentials()
    assert (creds.server, creds.namespace, creds.token) == ("https://127.0.0.1:2", "team", SECRET)
    assert creds.source == f"kubeconfig {first}:{second}, context ctx"
    assert load_credentials(context="decoy").server == "https://127.0.0.1:9"  # --context across files


def test_first_file_wins_per_name_and_for_the_current_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = write_kubeconfig(
        tmp_path / "a",
        clusters={"c": cluster("https://127.0.0.1:1")},
        contexts={"one": {"cluster": "c"}},
        current="one",
    )
    second = write_kubeconfig(
        tmp_path / "b",
        clusters={"c": cluster("https://127.0.0.1:2"), "d": cluster("https://127.0.0.1:3")},
        contexts={"one": {"cluster": "d"}, "two": {"cluster": "c"}},
        current="two",
    )
    monkeypatch.setenv("KUBECONFIG", f"{first}:{second}")
    assert load_credentials().server == "https://127.0.0.1:1"  # context "one" and cluster "c" of the first
    assert load_credentials(context="two").server == "https://127.0.0.1:1"  # "two" from b, "c" from a
    monkeypatch.setenv("KUBECONFIG", f"{second}:{first}")
    assert load_credentials().server == "https://127.0.0.1:2"


@pytest.mark.parametrize(
    "empty",
    [
        "",  # 0 bytes: the `kubernetes` package fails with "file is empty"
        "null\n",
        "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\ncurrent-context: ''\n",
        "apiVersion: v1\nkind: Config\nclusters: null\ncontexts: null\nusers: null\npreferences: {}\n",
    ],
)
def test_an_empty_first_file_is_taken_as_kubectl_takes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, empty: str
) -> None:
    (tmp_path / "empty").write_text(empty)
    second = one(tmp_path / "real", "https://127.0.0.1:2")
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'empty'}:{second}")
    assert load_credentials().server == "https://127.0.0.1:2"
    # and an empty current-context in a later file clears nothing
    monkeypatch.setenv("KUBECONFIG", f"{second}:{tmp_path / 'empty'}")
    assert load_credentials().server == "https://127.0.0.1:2"


def test_an_empty_file_still_names_the_current_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pointer").write_text("apiVersion: v1\nkind: Config\ncurrent-context: other\n")
    real = write_kubeconfig(
        tmp_path / "real",
        clusters={"c": cluster("https://127.0.0.1:1"), "d": cluster("https://127.0.0.1:2")},
        contexts={"ctx": {"cluster": "c"}, "other": {"cluster": "d"}},
        current="ctx",
    )
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'pointer'}:{real}")
    assert load_credentials().server == "https://127.0.0.1:2"


def test_a_users_relative_paths_are_relative_to_its_own_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "user").mkdir()
    ME.write(tmp_path / "user" / "tls.crt", tmp_path / "user" / "tls.key")
    users = write_kubeconfig(
        tmp_path / "user" / "config",
        users={"u": {"client-certificate": "tls.crt", "client-key": "tls.key"}},
        contexts={"ctx": {"cluster": "c", "user": "u"}},
        current="ctx",
    )
    clusters = write_kubeconfig(
        tmp_path / "cluster" / "config", clusters={"c": cluster("https://127.0.0.1:1")}
    )
    monkeypatch.setenv("KUBECONFIG", f"{users}:{clusters}")
    assert load_credentials().cert_data == ME.cert


def test_nothing_to_load_says_where_it_looked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    with pytest.raises(KubeconfigError, match="no file of \\$KUBECONFIG exists"):
        load_credentials()
    monkeypatch.delenv("KUBECONFIG")
    with pytest.raises(KubeconfigError, match="not running in a cluster"):
        load_credentials()


# ----- in-cluster --------------------------------------------------------------------------------------


def service_account(directory: Path, token: str = "sa-token") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "token").write_text(token)
    (directory / "ca.crt").write_bytes(CA.cert_pem)
    (directory / "namespace").write_text("kcp-system")
    return directory


def test_in_cluster_and_the_token_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sa = service_account(tmp_path / "sa")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    creds = load_credentials(sa_dir=sa)
    assert (creds.server, creds.namespace, creds.ca_data) == ("https://[::1]:443", "kcp-system", CA.cert_pem)
    assert creds.authorization == "Bearer sa-token" and "sa-token" not in repr(creds)
    assert creds.reread_at is not None and creds.expires_at is None
    (sa / "token").write_text("rotated")  # the kubelet rotates projected tokens
    assert creds.refreshed().token == "rotated"


def test_where_in_cluster_stands_in_the_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sa = service_account(tmp_path / "sa")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    home = one(tmp_path / "home" / ".kube" / "config", "https://127.0.0.1:7")
    # the operator (as controller-runtime): in a pod, its service account; the plugin (as kubectl): ~/.kube
    assert load_credentials(sa_dir=sa).server == "https://10.0.0.1:443"
    assert load_credentials(sa_dir=sa, in_cluster_first=False).server == "https://127.0.0.1:7"
    # an explicit file and $KUBECONFIG come first for both; an empty $KUBECONFIG falls back to in-cluster
    assert load_credentials(home, sa_dir=sa).server == "https://127.0.0.1:7"
    (tmp_path / "empty").write_text("")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "empty"))
    assert load_credentials(sa_dir=sa).server == "https://10.0.0.1:443"


def test_credentials_without_a_reload_refresh_to_themselves() -> None:
    creds = Credentials(server="https://x", token=SECRET)
    assert creds.refreshed() is creds and SECRET not in repr(creds)
