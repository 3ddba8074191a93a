"""Kubeconfig files and an exec credential plugin, written by the tests (unit and process).

The plugin is a small Python script: it answers with the ExecCredential apiVersion it is asked for
(KUBERNETES_EXEC_INFO, v1 or v1beta1), counts its runs in PLUGIN_RUNS, and returns a token (PLUGIN_TOKEN,
suffixed with the run's number, or the content of PLUGIN_TOKEN_FILE) and/or a client certificate
(PLUGIN_CERT, PLUGIN_KEY: PEM files), with PLUGIN_EXPIRES as expirationTimestamp when set. PLUGIN_FAIL
makes it exit 3 with a message on stderr.
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any

import yaml

PLUGIN = """#!{python}
import json, os, pathlib, sys
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
runs = pathlib.Path(os.environ["PLUGIN_RUNS"])
n = int(runs.read_text()) + 1 if runs.exists() else 1
runs.write_text(str(n))
if os.environ.get("PLUGIN_FAIL"):
    print("the identity provider says no", file=sys.stderr)
    sys.exit(3)
status = {{}}
if os.environ.get("PLUGIN_TOKEN"):
    status["token"] = os.environ["PLUGIN_TOKEN"] + "-" + str(n)
if os.environ.get("PLUGIN_TOKEN_FILE"):
    status["token"] = pathlib.Path(os.environ["PLUGIN_TOKEN_FILE"]).read_text().strip()
if os.environ.get("PLUGIN_CERT"):
    status["clientCertificateData"] = pathlib.Path(os.environ["PLUGIN_CERT"]).read_text()
    status["clientKeyData"] = pathlib.Path(os.environ["PLUGIN_KEY"]).read_text()
if os.environ.get("PLUGIN_EXPIRES"):
    status["expirationTimestamp"] = os.environ["PLUGIN_EXPIRES"]
print(json.dumps({{"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": status}}))
"""


def write_plugin(directory: Path, name: str = "credential-plugin") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(PLUGIN.format(python=sys.executable))
    path.chmod(0o700)
    return path


def runs(counter: Path) -> int:
    return int(counter.read_text()) if counter.exists() else 0


def exec_user(command: str | Path, version: str = "v1", **env: str) -> dict[str, Any]:
    """A kubeconfig user whose credential comes from `command` (interactiveMode: kubectl needs it for v1)."""
    return {
        "exec": {
            "apiVersion": f"client.authentication.k8s.io/{version}",
            "command": str(command),
            "interactiveMode": "Never",
            "env": [{"name": k, "value": v} for k, v in env.items()],
        }
    }


def cluster(server: str, ca: bytes | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"server": server, **extra}
    if ca is not None:
        body["certificate-authority-data"] = base64.b64encode(ca).decode()
    return body


def write_kubeconfig(
    path: Path,
    *,
    clusters: dict[str, dict[str, Any]] | None = None,
    users: dict[str, dict[str, Any]] | None = None,
    contexts: dict[str, dict[str, Any]] | None = None,
    current: str | None = None,
) -> Path:
    """A kubeconfig (0600) from name -> body maps; a context body is {"cluster", "user", "namespace"}."""
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": n, "cluster": c} for n, c in (clusters or {}).items()],
        "users": [{"name": n, "user": u} for n, u in (users or {}).items()],
        "contexts": [{"name": n, "context": c} for n, c in (contexts or {}).items()],
    }
    if current is not None:
        doc["current-context"] = current
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)
    return path
