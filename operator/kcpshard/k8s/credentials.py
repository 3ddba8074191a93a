"""Credentials of an API server, found as kubectl finds them: one source for the plugin, the operator's
``ApiClient`` and kopf's login (``controller/login.py``).

``load_credentials`` turns "kubeconfig file(s) and a context, or the in-cluster service account" into a
``Credentials``: server URL, CA, client certificate and key (PEM, in memory), a token and its expiry, and a
``reload`` that reads the source again (an exec plugin runs again, a token file is read again).

The loader: the `kubernetes` package, already a dependency (kopf's default login uses it too) and the
client-go port the Kubernetes project maintains. ``KubeConfigMerger`` merges files, ``KubeConfigLoader``
resolves a context (CA, client certificates, ``token``/``tokenFile``, auth-provider, basic auth),
``ExecProvider`` runs exec plugins (client.authentication.k8s.io v1 and v1beta1). It is imported only when a
kubeconfig file is read: its import takes ~0.3 s and brings pydantic, which the agents' start (in-cluster,
on the path of every kcp start) must not pay; so the in-cluster configuration is read here directly, as
client-go's ``rest.InClusterConfig`` does (four values, no parsing). Compared with:
- kubernetes_asyncio: the same code ported to asyncio (the exec plugin in an asyncio subprocess, so no
  thread), but a second generated client as a dependency for one function, with the same merge code;
- lightkube: httpx like ours, but its ``KubeConfig`` reads one file (``from_env`` takes ``$KUBECONFIG`` as
  one path: no merging) and its exec support is narrower, in the versions read.
Where the `kubernetes` package (37.0.2) differs from kubectl 1.37, as measured, this module follows kubectl:
1. a 0-byte (or ``null``) file in ``$KUBECONFIG`` fails ("file is empty"); here files without clusters,
   contexts or users are skipped before merging (their current-context still counts);
2. the current-context comes from the *last* file that sets it, and an empty one clears it; here from the
   first file that sets a non-empty one;
3. a user's relative paths (certificate, key, tokenFile, exec command) resolve against the file of the
   context's *cluster*; here against the user's own file;
4. an exec plugin's failure is only logged and the load goes on without credentials, its expiry stays
   private and its certificate goes to a temp file; here ``ExecProvider`` is called directly: a failure
   raises ``KubeconfigError``, ``expirationTimestamp`` is ``expires_at``, the certificate stays in memory.
The loader is synchronous (an exec plugin runs in the calling thread): async code calls it through
``asyncio.to_thread``. Tokens and keys never appear in a repr, a log line or an exception message.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import ssl
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from kubernetes.config.kube_config import ConfigNode

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# client-go reads a token file again at most once a minute (CachedFileTokenSource); a 401 forces it sooner.
TOKEN_FILE_PERIOD = dt.timedelta(minutes=1)
_USER_PATHS = ("client-certificate", "client-key", "tokenFile")


class KubeconfigError(Exception):
    """The credentials cannot be loaded (the message names the file and the field, never a secret)."""


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(frozen=True, repr=False)
class Credentials:
    """How to reach and authenticate to one API server; ``refreshed()`` gives the next one."""

    server: str
    namespace: str = "default"
    ca_data: bytes | None = None  # PEM; None: the system's CAs
    insecure: bool = False
    tls_server_name: str | None = None
    proxy_url: str | None = None
    cert_data: bytes | None = None  # PEM client certificate
    key_data: bytes | None = None  # PEM private key
    scheme: str | None = None  # "Bearer" or "Basic"
    token: str | None = None
    expires_at: dt.datetime | None = None  # the credential's own end (an exec plugin's expirationTimestamp)
    reread_at: dt.datetime | None = None  # a token file is read again from then on (projected tokens rotate)
    source: str = ""  # for messages: the files and the context, or in-cluster
    reload: Callable[[], Credentials] | None = field(default=None, compare=False)

    def __repr__(self) -> str:
        ca = f"<{len(self.ca_data)} bytes>" if self.ca_data else None
        return (
            f"Credentials(server={self.server!r}, namespace={self.namespace!r}, source={self.source!r}, "
            f"ca={ca}, insecure={self.insecure}, client_cert={'<hidden>' if self.cert_data else None}, "
            f"token={'<hidden>' if self.token else None}, expires_at={self.expires_at})"
        )

    __str__ = __repr__

    @property
    def authorization(self) -> str | None:
        """The ``Authorization`` header's value, or None."""
        return f"{self.scheme or 'Bearer'} {self.token}" if self.token else None

    def stale(self, now: dt.datetime | None = None) -> bool:
        """Expired, or its token file is due to be read again: use ``refreshed()`` first. Cheap."""
        due = min((t for t in (self.expires_at, self.reread_at) if t is not None), default=None)
        return due is not None and (now or _now()) >= due

    def refreshed(self) -> Credentials:
        """Read the source again (may run an exec plugin: blocking); self when there is nothing to reload."""
        return self.reload() if self.reload is not None else self

    def tls_identity(self) -> tuple[Any, ...]:
        """What an open connection is bound to: a change needs new connections, not just a new header."""
        return (self.server, self.ca_data, self.insecure, self.tls_server_name, self.proxy_url,
                self.cert_data, self.key_data)  # fmt: skip

    def ssl_context(self) -> ssl.SSLContext | bool:
        """TLS settings for httpx (False for plain http)."""
        if not self.server.startswith("https://"):
            return False
        ctx = ssl.create_default_context(cadata=self.ca_data.decode() if self.ca_data else None)
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert_data and self.key_data:
            _load_cert_chain(ctx, self.cert_data, self.key_data)
        return ctx


def _load_cert_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    # ssl loads a key from a file only: a private 0700 directory, 0600 files, removed at once.
    with tempfile.TemporaryDirectory(prefix="kcpshard-tls-") as tmp:
        paths = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
        for path, data in zip(paths, (cert, key), strict=True):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
        ctx.load_cert_chain(str(paths[0]), str(paths[1]))


# ----- where to look: kubectl's order ------------------------------------------------------------------


def load_credentials(
    kubeconfig: str | Path | None = None,
    context: str | None = None,
    *,
    in_cluster_first: bool = True,
    sa_dir: Path = SERVICE_ACCOUNT_DIR,
) -> Credentials:
    """``kubeconfig`` (one file) if given, else the files of ``$KUBECONFIG`` merged, else the in-cluster
    service account or ``~/.kube/config``.

    ``in_cluster_first`` (the operator and its agents, as controller-runtime and kopf): in a pod the service
    account wins over a ``~/.kube/config``; False (the plugin, as kubectl): ``~/.kube/config`` wins. An
    empty ``$KUBECONFIG`` configuration falls back to in-cluster, as kubectl does. Blocking.
    """
    if kubeconfig is not None:
        path = Path(kubeconfig).expanduser()
        if not path.is_file():
            raise KubeconfigError(f"kubeconfig {path} does not exist")
        return _from_files([path], context)
    in_cluster = context is None and _in_cluster_possible(sa_dir)
    env = os.environ.get("KUBECONFIG", "")
    if env:
        files = [Path(p).expanduser() for p in env.split(os.pathsep) if p]
        existing = [p for p in files if p.is_file()]
        if existing and (any(_entries(doc) for _, doc in _read_all(existing)) or not in_cluster):
            return _from_files(existing, context)
        if in_cluster:
            return _in_cluster(sa_dir)
        raise KubeconfigError(f"no file of $KUBECONFIG exists: {env}")
    home = Path.home() / ".kube" / "config"
    if in_cluster and (in_cluster_first or not home.is_file()):
        return _in_cluster(sa_dir)
    if home.is_file():
        return _from_files([home], context)
    raise KubeconfigError(
        "no kubeconfig given, $KUBECONFIG is unset, ~/.kube/config does not exist and not running in a "
        "cluster (KUBERNETES_SERVICE_HOST/PORT unset)"
    )


def _in_cluster_possible(sa_dir: Path) -> bool:
    # rest.InClusterConfig's test: the service's address in the environment and a token file.
    env = os.environ
    return (
        bool(env.get("KUBERNETES_SERVICE_HOST") and env.get("KUBERNETES_SERVICE_PORT"))
        and (sa_dir / "token").is_file()
    )


def _in_cluster(sa_dir: Path) -> Credentials:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST", ""), os.environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise KubeconfigError("in-cluster configuration: KUBERNETES_SERVICE_HOST/PORT unset")
    token = (_read(sa_dir / "token") or b"").decode().strip()
    if not token:
        raise KubeconfigError(f"in-cluster configuration: the token file {sa_dir / 'token'} is empty")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address
    ns_file = sa_dir / "namespace"
    namespace = os.environ.get("POD_NAMESPACE") or (ns_file.read_text().strip() if ns_file.is_file() else "")
    return Credentials(
        server=f"https://{host}:{port}",
        namespace=namespace or "default",
        ca_data=_read(sa_dir / "ca.crt"),
        scheme="Bearer",
        token=token,
        reread_at=_now() + TOKEN_FILE_PERIOD,
        source=f"in-cluster service account {sa_dir}",
        reload=functools.partial(_in_cluster, sa_dir),
    )


# ----- kubeconfig files --------------------------------------------------------------------------------


def _read_all(paths: Sequence[Path]) -> list[tuple[Path, dict[str, Any]]]:
    docs = []
    for path in paths:
        try:
            doc = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise KubeconfigError(f"cannot read kubeconfig {path}: {exc.strerror}") from None
        except yaml.YAMLError:
            raise KubeconfigError(f"kubeconfig {path} is not valid YAML") from None
        if doc is not None and not isinstance(doc, dict):
            raise KubeconfigError(f"kubeconfig {path} is not a mapping")
        docs.append((path, doc or {}))
    return docs


def _entries(doc: dict[str, Any]) -> bool:
    return any(doc.get(key) for key in ("clusters", "contexts", "users"))


def _from_files(paths: Sequence[Path], context: str | None) -> Credentials:
    from kubernetes.client import Configuration
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import KubeConfigLoader, KubeConfigMerger

    docs = _read_all(paths)
    where = os.pathsep.join(map(str, paths))
    # kubectl: the first file that sets a current-context wins; an empty value sets nothing.
    current = next((str(doc["current-context"]) for _, doc in docs if doc.get("current-context")), None)
    name = context or current
    if not name:
        raise KubeconfigError(f"{where}: no context given and no current-context set")
    merger = KubeConfigMerger("")  # no paths: the files are added one by one below, empty ones skipped
    for path, doc in docs:
        if _entries(doc):
            merger.load_config(str(path))
    if merger.config is None:
        raise KubeconfigError(f"{where}: no clusters, contexts or users")
    merged: ConfigNode = merger.config
    merged.value["current-context"] = name
    _absolute_paths(merged)
    ctx_node = merged["contexts"].get_with_name(name, safe=True) if merged.value["contexts"] else None
    if ctx_node is None:
        raise KubeconfigError(f'{where}: context "{name}" not found')
    ctx = ctx_node.value.get("context") or {}
    user_node = _named(merged, "users", ctx.get("user"))
    user = dict((user_node.value.get("user") or {}) if user_node is not None else {})
    exec_config = (
        user.get("exec") if not any(user.get(k) for k in ("token", "tokenFile", "auth-provider")) else None
    )
    if exec_config is not None and user_node is not None:  # run below, where its failure is not swallowed
        user_node.value = {**user_node.value, "user": {k: v for k, v in user.items() if k != "exec"}}
    cfg = Configuration()
    # The loader writes inline CA, certificate and key data to temp files: 0600 in a private 0700 dir,
    # read back into memory and removed before this returns.
    with tempfile.TemporaryDirectory(prefix="kcpshard-kubeconfig-") as tmp:
        try:
            loader = KubeConfigLoader(merged, active_context=name, config_base_path=None, temp_file_path=tmp)
            loader.load_and_set(cfg)
            ca, cert, key = (_read(p) for p in (cfg.ssl_ca_cert, cfg.cert_file, cfg.key_file))
        except ConfigException as exc:
            raise KubeconfigError(f"{where}: context {name!r}: {exc}") from None
    scheme, token = _split_header(cfg.api_key.get("BearerToken"))
    expires_at: dt.datetime | None = getattr(loader, "expiry", None)  # an auth-provider's token
    if exec_config is not None:
        cluster_node = _named(merged, "clusters", ctx.get("cluster"))
        cluster = (cluster_node.value.get("cluster") or {}) if cluster_node is not None else {}
        base = Path(user_node.path).parent if user_node is not None and user_node.path else Path.cwd()
        status = _run_exec(exec_config, base, cluster, str(ctx.get("user")))
        if status.get("token"):
            scheme, token = "Bearer", str(status["token"])
        if status.get("clientCertificateData"):
            cert, key = str(status["clientCertificateData"]).encode(), str(status["clientKeyData"]).encode()
        expires_at = _timestamp(status.get("expirationTimestamp"), str(ctx.get("user")))
    return Credentials(
        server=str(cfg.host),
        namespace=str(ctx.get("namespace") or "default"),
        ca_data=ca,
        insecure=not cfg.verify_ssl,
        tls_server_name=getattr(cfg, "tls_server_name", None) or None,
        proxy_url=getattr(cfg, "proxy", None) or None,
        cert_data=cert,
        key_data=key,
        scheme=scheme,
        token=token,
        expires_at=expires_at,
        reread_at=_now() + TOKEN_FILE_PERIOD if user.get("tokenFile") and not user.get("token") else None,
        source=f"kubeconfig {where}, context {name}",
        # Again from the same files, pinned to this context: a refresh never moves to another cluster.
        reload=functools.partial(_from_files, list(paths), name),
    )


def _named(merged: ConfigNode, kind: str, name: Any) -> ConfigNode | None:
    if not name or not merged.value.get(kind):
        return None
    node: ConfigNode | None = merged[kind].get_with_name(str(name), safe=True)
    return node


def _absolute_paths(merged: ConfigNode) -> None:
    # client-go's ResolveLocalPaths: each entry's paths against the directory of the file it came from.
    for kind, body, keys in (
        ("users", "user", _USER_PATHS),
        ("clusters", "cluster", ("certificate-authority",)),
    ):
        for node in merged.value.get(kind) or []:
            entry = getattr(node, "value", {}).get(body)  # each entry is a ConfigNode naming its file
            if not isinstance(entry, dict) or not node.path:
                continue
            base = Path(node.path).parent
            for key in keys:
                if isinstance(entry.get(key), str) and entry[key] and not Path(entry[key]).is_absolute():
                    entry[key] = str(base / entry[key])
            command = (entry.get("exec") or {}).get("command") if kind == "users" else None
            # A bare name is looked up on PATH; a relative path is relative to the kubeconfig.
            if isinstance(command, str) and os.sep in command and not Path(command).is_absolute():
                entry["exec"] = {**entry["exec"], "command": str(base / command)}


def _run_exec(config: dict[str, Any], base: Path, cluster: dict[str, Any], user: str) -> dict[str, Any]:
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.exec_provider import ExecProvider
    from kubernetes.config.kube_config import ConfigNode

    command = str(config.get("command", ""))
    try:
        provider = ExecProvider(ConfigNode("exec", config), str(base), ConfigNode("cluster", cluster))
        status = provider.run()
    except ConfigException as exc:
        raise KubeconfigError(f"exec plugin {command!r} of user {user!r}: {exc}") from None
    except OSError as exc:
        raise KubeconfigError(f"exec plugin {command!r} of user {user!r}: {exc.strerror}") from None
    if not isinstance(status, dict):
        raise KubeconfigError(f"exec plugin {command!r} of user {user!r}: status is not an object")
    has_cert = bool(status.get("clientCertificateData"))
    if has_cert != bool(status.get("clientKeyData")):
        raise KubeconfigError(f"exec plugin {command!r} of user {user!r}: a certificate needs its key")
    if not status.get("token") and not has_cert:
        raise KubeconfigError(f"exec plugin {command!r} of user {user!r}: neither a token nor a certificate")
    return status


def _timestamp(value: Any, user: str) -> dt.datetime | None:
    if not value:
        return None
    try:
        stamp = dt.datetime.fromisoformat(str(value))
    except ValueError:
        raise KubeconfigError(f"exec plugin of user {user!r}: bad expirationTimestamp {value!r}") from None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.UTC)


def _read(path: str | Path | None) -> bytes | None:
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise KubeconfigError(f"cannot read {path}: {exc.strerror}") from None


def _split_header(header: str | None) -> tuple[str | None, str | None]:
    if not header:
        return None, None
    scheme, _, token = header.strip().partition(" ")
    if not token:
        return "Bearer", scheme
    # The in-cluster loader writes "bearer"; a token file may end in a newline.
    return ("Bearer" if scheme.lower() == "bearer" else scheme), token.strip()
